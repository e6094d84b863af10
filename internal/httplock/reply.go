package httplock

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/keyfunc"
)

// What a client reads: plain words, never the key, an owner, a token or an address.
const (
	// TextBusy answers a busy lock (409).
	TextBusy = "locked by another request"
	// TextUnavailable answers Redis unreachable or the Locker closed (503).
	TextUnavailable = "lock service unavailable"
	// TextLeaseLost answers a lease lost while the handler ran (503).
	TextLeaseLost = "lock lost while handling the request"
	// TextInvalidKey begins the answer to a key the request cannot give (400); see KeyText.
	TextInvalidKey = "cannot build the lock key from the request"
	// TextInternal answers a key that names a path value or parameter the route lacks (500).
	TextInternal = "internal error: the route's lock is misconfigured"
	// TextUpgrade answers a write to a lock the request holds for reading (409).
	TextUpgrade = "the request holds this lock for reading and cannot take it for writing"
	// TextDeadlock answers the request chosen to end a deadlock (409, no Retry-After).
	TextDeadlock = "deadlock: the request waited for a lock in a cycle of requests and was chosen to fail"
)

// RetryAfter formats a retry hint (guard.LockedError's RetryAfter) as a Retry-After
// value: whole seconds, rounded up, at least 1, since an unknown or elapsed hint must
// not invite an immediate retry storm.
func RetryAfter(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second
	return strconv.FormatInt(int64(max(s, 1)), 10)
}

// DenyText is the text of the answer to a busy lock: TextBusy, and when the request's
// owner header was not accepted (reason is not ""), which header, the reason and what it
// means in plain words. It never quotes the token.
func DenyText(reason string) string {
	if reason == "" {
		return TextBusy
	}
	// The caller meant to reenter a lock of its own: a Signer missing here, or keys
	// that differ between the services, would otherwise show as a plain 409.
	return fmt.Sprintf("%s; the %s header was not accepted (%s): %s", TextBusy, ctxid.Header, reason, rejectionText(reason))
}

// rejectionTexts say to the client, in plain words, why its owner header was not
// accepted, by reason. They never quote the token.
var rejectionTexts = map[string]string{
	ctxid.RefusedNoSigner: "this service is not configured to accept owner tokens",
	ctxid.RefusedSeveral:  "the request sent more than one, and none is used",
	"too_long":            "the token is too long",
	"malformed":           "the token is malformed",
	"invalid_owner":       "the token's owner is not a valid owner ID",
	"unknown_key":         "the token is signed with a key this service does not know",
	"bad_signature":       "the token's signature does not match this service's key",
	"expired":             "the token has expired",
	"not_yet_valid":       "the token was issued in the future (clocks apart?)",
	"too_many_hops":       "the token has passed through too many services",
}

// rejectionText is rejectionTexts[reason], or a plain default.
func rejectionText(reason string) string {
	if text, ok := rejectionTexts[reason]; ok {
		return text
	}
	return "the token could not be verified"
}

// KeyText is the client's text for a key that cannot be built from the request. It
// names the template's placeholder that failed, such as {header.X-Tenant}, and never a
// value, the key or the source's own error text.
func KeyText(err error) string {
	var re *keyfunc.RenderError
	switch {
	case !errors.As(err, &re):
		return TextInvalidKey
	case errors.Is(re, keyfunc.ErrMissing), errors.Is(re, keyfunc.ErrEmpty):
		return fmt.Sprintf("%s: {%s} is missing or empty", TextInvalidKey, re.Placeholder)
	}
	return fmt.Sprintf("%s: {%s} cannot be read", TextInvalidKey, re.Placeholder)
}

// Status returns the status and the text a Lock middleware answers err with, a guard
// error other than a busy lock, checked in this order: a lost lease 503, a key the
// request cannot give 400 (KeyText), a refused upgrade 409, a deadlock's victim 409,
// Redis unavailable or the Locker closed 503. ok is false for any other error. A
// middleware checks its own errors (a route mistake, an extractor's status) after the
// lost lease and before the rest.
func Status(err error) (code int, text string, ok bool) {
	switch {
	case errors.Is(err, guard.ErrLeaseLost):
		return http.StatusServiceUnavailable, TextLeaseLost, true
	case errors.Is(err, guard.ErrInvalidKey):
		return http.StatusBadRequest, KeyText(err), true
	case errors.Is(err, guard.ErrUpgrade):
		return http.StatusConflict, TextUpgrade, true
	case errors.Is(err, guard.ErrDeadlock):
		return http.StatusConflict, TextDeadlock, true // no Retry-After: waiting does not clear it
	case errors.Is(err, guard.ErrUnavailable), errors.Is(err, guard.ErrClosed):
		return http.StatusServiceUnavailable, TextUnavailable, true
	}
	return 0, "", false
}
