package ctxid

import "errors"

// ErrInvalid is wrapped by the errors of [Parse] (and of [Signer.Sign] for a
// bad owner) when a string is not a canonical owner ID.
var ErrInvalid = errors.New("ctxid: invalid owner ID")

// ErrTooDeep is wrapped by the errors of [Section] when the parent is
// [MaxDepth] sections deep already, so that a new section could not be
// carried in a signed token.
var ErrTooDeep = errors.New("ctxid: sections nested too deep")

// ErrConfig is wrapped by the errors of [NewSigner] when a key or an option is
// invalid; the message names the offending field.
var ErrConfig = errors.New("ctxid: invalid configuration")

// ErrUntrusted is matched (errors.Is) by every error of [Signer.Verify] and
// [Signer.Accept]: whatever the reason, the inbound owner must not be used.
var ErrUntrusted = errors.New("ctxid: untrusted owner token")

// Reasons a token is rejected. Each is the Reason of a [*VerifyError], so an
// error returned by [Signer.Verify] matches both its reason and [ErrUntrusted].
var (
	// ErrTooLong: the token is longer than MaxTokenLen; it was not parsed.
	ErrTooLong = errors.New("ctxid: token too long")
	// ErrMalformed: the token is empty, has a byte outside [A-Za-z0-9._/-],
	// the wrong number of fields, an unknown version, or a field that is not
	// in its canonical form.
	ErrMalformed = errors.New("ctxid: malformed token")
	// ErrInvalidOwner: the owner field is not a canonical owner ID.
	ErrInvalidOwner = errors.New("ctxid: invalid owner in token")
	// ErrUnknownKey: no configured key has the token's key ID (or the Signer
	// is nil, so no key is configured at all).
	ErrUnknownKey = errors.New("ctxid: unknown signing key")
	// ErrBadSignature: the MAC does not match the token's content.
	ErrBadSignature = errors.New("ctxid: bad token signature")
	// ErrExpired: the token was issued more than MaxAge ago.
	ErrExpired = errors.New("ctxid: token expired")
	// ErrNotYetValid: the token was issued later than now plus MaxSkew,
	// which points at a clock problem or a forged timestamp.
	ErrNotYetValid = errors.New("ctxid: token issued in the future")
	// ErrTooManyHops: the token has travelled more hops than MaxHops allows.
	ErrTooManyHops = errors.New("ctxid: token travelled too many hops")
)

// VerifyError is the error type of [Signer.Verify] and [Signer.Accept].
// Use errors.Is with a reason sentinel (for example [ErrExpired]) or with
// [ErrUntrusted]; use errors.As to read the Detail.
type VerifyError struct {
	// Reason is one of the reason sentinels (ErrTooLong, ErrMalformed,
	// ErrInvalidOwner, ErrUnknownKey, ErrBadSignature, ErrExpired,
	// ErrNotYetValid, ErrTooManyHops).
	Reason error
	// Detail explains the rejection for logs. It never quotes untrusted
	// bytes beyond a key ID that passed the key ID syntax check.
	Detail string
}

// Error returns the reason's message followed by the detail.
func (e *VerifyError) Error() string {
	msg := ErrUntrusted.Error()
	if e.Reason != nil {
		msg = e.Reason.Error()
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the reason and [ErrUntrusted], so errors.Is matches both.
func (e *VerifyError) Unwrap() []error {
	if e.Reason == nil {
		return []error{ErrUntrusted}
	}
	return []error{e.Reason, ErrUntrusted}
}

// Code names the reason in a short stable form for logs, span attributes and error
// details: too_long, malformed, invalid_owner, unknown_key, bad_signature, expired,
// not_yet_valid, too_many_hops, or untrusted for an error without a known reason.
func (e *VerifyError) Code() string {
	switch e.Reason {
	case ErrTooLong:
		return "too_long"
	case ErrMalformed:
		return "malformed"
	case ErrInvalidOwner:
		return "invalid_owner"
	case ErrUnknownKey:
		return "unknown_key"
	case ErrBadSignature:
		return "bad_signature"
	case ErrExpired:
		return "expired"
	case ErrNotYetValid:
		return "not_yet_valid"
	case ErrTooManyHops:
		return "too_many_hops"
	}
	return "untrusted"
}

func reject(reason error, detail string) error {
	return &VerifyError{Reason: reason, Detail: detail}
}
