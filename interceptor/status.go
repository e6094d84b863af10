package interceptor

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/keyfunc"
)

// The errdetails.ErrorInfo that the server interceptors attach to the statuses they
// make has Domain ErrorDomain, one of these Reasons, and the full method name under the
// metadata key "method". Clients use it to tell a busy lock (codes.Aborted, ReasonLocked)
// from a lost lease or from an Aborted of the application's own.
const (
	// ErrorDomain is the Domain of the ErrorInfo details.
	ErrorDomain = "guardkit"
	// ReasonLocked: another owner holds the lock (codes.Aborted, with RetryInfo; or
	// codes.DeadlineExceeded or codes.Canceled when the RPC's context ended the wait).
	ReasonLocked = "LOCKED"
	// ReasonLeaseLost: the lease was lost while the handler ran (codes.Aborted, or the
	// handler's own code when it returned a status error).
	ReasonLeaseLost = "LEASE_LOST"
	// ReasonUnavailable: Redis could not be reached (codes.Unavailable).
	ReasonUnavailable = "LOCK_UNAVAILABLE"
	// ReasonInvalidKey: the lock key could not be made from the request
	// (codes.InvalidArgument).
	ReasonInvalidKey = "INVALID_LOCK_KEY"
	// ReasonUpgradeRefused: the caller's owner holds the method's read-write lock for
	// reading and the method takes it for writing (codes.FailedPrecondition): release
	// the read lock first (guard.ErrUpgrade).
	ReasonUpgradeRefused = "LOCK_UPGRADE_REFUSED"
	// ReasonDeadlock: the call waited for the lock in a cycle of requests, each holding a
	// lock the next one waits for, and was the one chosen to fail so that the others go
	// on (codes.Aborted, without RetryInfo: waiting does not clear it; guard.ErrDeadlock).
	// The caller's locks are released as its handler returns; retrying the whole request
	// may succeed.
	ReasonDeadlock = "DEADLOCK"
	// ReasonOwnerRejected: the RPC carried an owner token that the server refused, so it
	// ran as a fresh owner and could not reenter the caller's locks. A busy status
	// (ReasonLocked) carries a second ErrorInfo with this Reason after its RetryInfo,
	// whose metadata key "reason" says why: no_signer (the server has no WithSigner),
	// several_values, untrusted_peer (WithTrustedPeer), too_long, malformed,
	// invalid_owner, unknown_key (the caller signs with a key ID the server does not
	// know), bad_signature (same key ID, another secret), too_many_hops, not_yet_valid
	// or expired (clocks apart, or a token older than ctxid.MaxAge).
	ReasonOwnerRejected = "OWNER_TOKEN_REJECTED"
)

// What a client reads in the status message: plain words, never the lock key, the owner,
// a token or a Redis address, which stay in the error chain (statusError's cause) for the
// server's logs and on the RPC's span. WithExposeKey adds the key.
const (
	textBusy        = "busy: another request holds the lock"
	textUnavailable = "unavailable: the lock service cannot be reached"
	textLeaseLost   = "lease lost: the lock was lost while the call ran"
	textInvalidKey  = "invalid key: the lock key cannot be made from the request"
	textUpgrade     = "the call holds this lock for reading and cannot take it for writing; release the read lock first"
	textInternal    = "internal error: the method's lock is misconfigured"
	textCanceled    = "canceled while waiting for the lock"
	textDeadline    = "deadline exceeded while waiting for the lock"
	textDeadlock    = "deadlock: the call waited for a lock in a cycle of requests and was chosen to fail"
)

// statusError is a gRPC status error that keeps its cause in the error chain, so that
// server-side code (an outer interceptor, a logger) can use errors.Is and errors.As on
// it while the client receives the status.
type statusError struct {
	st  *status.Status
	err error
}

func (e *statusError) Error() string {
	return fmt.Sprintf("rpc error: code = %s desc = %s: %v", e.st.Code(), e.st.Message(), e.err)
}

// GRPCStatus returns the status the client receives.
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the cause.
func (e *statusError) Unwrap() error { return e.err }

// mapping is how statuses are made: for which method, and whether the message names
// the key (WithExposeKey).
type mapping struct {
	method string
	key    string // "" unless exposed
}

// status returns an error with the given code and message, whose cause is cause, with an
// ErrorInfo for reason (when not empty) and further details.
func (m mapping) status(code codes.Code, msg string, cause error, reason string, details ...protoadapt.MessageV1) error {
	if m.key != "" {
		msg += fmt.Sprintf(" (key %q)", m.key)
	}
	st := status.New(code, msg)
	if reason != "" {
		details = append([]protoadapt.MessageV1{&errdetails.ErrorInfo{
			Reason:   reason,
			Domain:   ErrorDomain,
			Metadata: map[string]string{"method": m.method},
		}}, details...)
	}
	if len(details) > 0 {
		if withDetails, err := st.WithDetails(details...); err == nil {
			st = withDetails
		}
	}
	return &statusError{st: st, err: cause}
}

// keyStatus maps a key template of r, tpl, that could not be rendered.
func (m mapping) keyStatus(r *rule, tpl *keyfunc.Template[*call], err error) error {
	if errors.Is(err, guard.ErrInvalidConfig) {
		// The rule, not the request, is wrong: a {req...} path that the message type
		// does not have, or a {req...} on a stream.
		return m.status(codes.Internal, textInternal, fmt.Errorf("interceptor: %s: rule %q: template %q: %w",
			m.method, r.method, tpl.String(), err), "")
	}
	msg := textInvalidKey
	var re *keyfunc.RenderError
	if errors.As(err, &re) { // the template's placeholder, not the request's value
		msg += fmt.Sprintf(" ({%s} is missing or empty)", re.Placeholder)
	}
	return m.status(codes.InvalidArgument, msg, fmt.Errorf("interceptor: %s: %w: template %q: %w",
		m.method, guard.ErrInvalidKey, tpl.String(), err), ReasonInvalidKey)
}

// acquireStatus maps an error that kept the lock from being acquired. rej is the inbound
// owner token that was refused, if any: a busy lock is then likely the caller's own, so
// the busy status says why the token was refused.
func (m mapping) acquireStatus(err error, rej *rejection) error {
	cause := fmt.Errorf("interceptor: %s: %w", m.method, err)
	var locked *guard.LockedError
	switch {
	case errors.As(err, &locked):
		code, msg := codes.Aborted, textBusy
		if locked.Err != nil {
			code = status.FromContextError(locked.Err).Code()
		}
		details := []protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(max(locked.RetryAfter, 0))}}
		if rej != nil {
			cause = fmt.Errorf("interceptor: %s: %w; owner token rejected (%s): %w", m.method, err, rej.reason, rej.err)
			msg += fmt.Sprintf("; owner token rejected (%s)", rej.reason)
			details = append(details, &errdetails.ErrorInfo{
				Reason:   ReasonOwnerRejected,
				Domain:   ErrorDomain,
				Metadata: map[string]string{"method": m.method, "reason": rej.reason},
			})
		}
		return m.status(code, msg, cause, ReasonLocked, details...)
	case errors.Is(err, guard.ErrDeadlock):
		return m.status(codes.Aborted, textDeadlock, cause, ReasonDeadlock)
	case errors.Is(err, context.Canceled):
		return m.status(codes.Canceled, textCanceled, cause, "")
	case errors.Is(err, context.DeadlineExceeded):
		return m.status(codes.DeadlineExceeded, textDeadline, cause, "")
	case errors.Is(err, guard.ErrUnavailable), errors.Is(err, guard.ErrClosed):
		return m.status(codes.Unavailable, textUnavailable, cause, ReasonUnavailable)
	case errors.Is(err, guard.ErrInvalidKey):
		return m.status(codes.InvalidArgument, textInvalidKey, cause, ReasonInvalidKey)
	case errors.Is(err, guard.ErrUpgrade):
		return m.status(codes.FailedPrecondition, textUpgrade, cause, ReasonUpgradeRefused)
	}
	return m.status(codes.Internal, textInternal, cause, "")
}

// lostStatus maps a lease lost while the handler ran. err is guard.Wrap's error, which
// holds the loss and the handler's error herr, if any. The RPC fails even when herr is
// nil: the handler may have run without exclusivity. A status code of the handler's own
// is kept, with its message; one that only echoes the cancellation of its context
// becomes Aborted.
func (m mapping) lostStatus(err, herr error) error {
	code, msg := codes.Aborted, textLeaseLost
	if st, ok := status.FromError(herr); ok && herr != nil {
		switch st.Code() {
		case codes.OK, codes.Unknown, codes.Canceled, codes.DeadlineExceeded:
		default:
			code = st.Code()
			msg += "; " + st.Message()
		}
	}
	return m.status(code, msg, fmt.Errorf("interceptor: %s: %w", m.method, err), ReasonLeaseLost)
}

// Status returns the status error that the server interceptors answer for err, a guard
// error, so that a handler can answer as they do for a guarded call it makes itself
// (guard.Wrap, guard.Do, Locker.Acquire): a busy lock is codes.Aborted with RetryInfo
// (or codes.Canceled or codes.DeadlineExceeded when the context ended the wait), a
// deadlock's victim codes.Aborted without RetryInfo, a lost lease codes.Aborted, Redis unavailable codes.Unavailable, an invalid key
// codes.InvalidArgument, a refused upgrade codes.FailedPrecondition, each with the
// ErrorInfo of its Reason; the message is plain words (see the package documentation)
// and err stays in the returned error's chain for the server's logs. ctx is the RPC's
// context: its method (grpc.Method) goes into the ErrorInfo. An error that is not
// guard's is returned unchanged, and nil as nil.
func Status(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	method, _ := grpc.Method(ctx)
	m := mapping{method: method}
	switch {
	case errors.Is(err, guard.ErrLeaseLost):
		return m.lostStatus(err, nil)
	case errors.Is(err, guard.ErrLocked), errors.Is(err, guard.ErrUnavailable), errors.Is(err, guard.ErrClosed),
		errors.Is(err, guard.ErrInvalidKey), errors.Is(err, guard.ErrUpgrade), errors.Is(err, guard.ErrDeadlock):
		return m.acquireStatus(err, nil)
	}
	return err
}
