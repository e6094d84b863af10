package interceptor

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/guardkit/guardkit/guard"
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

// statusError is a gRPC status error that keeps its cause in the error chain, so that
// server-side code (an outer interceptor, a logger) can use errors.Is and errors.As on
// it while the client receives the status.
type statusError struct {
	st  *status.Status
	err error
}

func (e *statusError) Error() string {
	return fmt.Sprintf("rpc error: code = %s desc = %s", e.st.Code(), e.st.Message())
}

// GRPCStatus returns the status the client receives.
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the cause.
func (e *statusError) Unwrap() error { return e.err }

// newStatusError returns an error with the given code whose status message is cause's
// text, with an ErrorInfo for reason (when not empty) and further details.
func newStatusError(code codes.Code, cause error, reason, method string, details ...protoadapt.MessageV1) error {
	st := status.New(code, cause.Error())
	if reason != "" {
		details = append([]protoadapt.MessageV1{&errdetails.ErrorInfo{
			Reason:   reason,
			Domain:   ErrorDomain,
			Metadata: map[string]string{"method": method},
		}}, details...)
	}
	if len(details) > 0 {
		if withDetails, err := st.WithDetails(details...); err == nil {
			st = withDetails
		}
	}
	return &statusError{st: st, err: cause}
}

// keyStatus maps a key template that could not be rendered.
func keyStatus(method string, r *rule, err error) error {
	if errors.Is(err, guard.ErrInvalidConfig) {
		// The rule, not the request, is wrong: a {req...} path that the message type
		// does not have, or a {req...} on a stream.
		return newStatusError(codes.Internal, fmt.Errorf("interceptor: %s: rule %q: template %q: %w",
			method, r.method, r.key.String(), err), "", method)
	}
	return newStatusError(codes.InvalidArgument, fmt.Errorf("interceptor: %s: %w: template %q: %w",
		method, guard.ErrInvalidKey, r.key.String(), err), ReasonInvalidKey, method)
}

// acquireStatus maps an error that kept the lock from being acquired. rej is the inbound
// owner token that was refused, if any: a busy lock is then likely the caller's own, so
// the busy status says why the token was refused.
func acquireStatus(method string, err error, rej *rejection) error {
	cause := fmt.Errorf("interceptor: %s: %w", method, err)
	var locked *guard.LockedError
	switch {
	case errors.As(err, &locked):
		code := codes.Aborted
		if locked.Err != nil {
			code = status.FromContextError(locked.Err).Code()
		}
		details := []protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(max(locked.RetryAfter, 0))}}
		if rej != nil {
			cause = fmt.Errorf("interceptor: %s: %w; owner token rejected (%s): %w", method, err, rej.reason, rej.err)
			details = append(details, &errdetails.ErrorInfo{
				Reason:   ReasonOwnerRejected,
				Domain:   ErrorDomain,
				Metadata: map[string]string{"method": method, "reason": rej.reason},
			})
		}
		return newStatusError(code, cause, ReasonLocked, method, details...)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return newStatusError(status.FromContextError(err).Code(), cause, "", method)
	case errors.Is(err, guard.ErrUnavailable), errors.Is(err, guard.ErrClosed):
		return newStatusError(codes.Unavailable, cause, ReasonUnavailable, method)
	case errors.Is(err, guard.ErrInvalidKey):
		return newStatusError(codes.InvalidArgument, cause, ReasonInvalidKey, method)
	case errors.Is(err, guard.ErrUpgrade):
		return newStatusError(codes.FailedPrecondition, cause, ReasonUpgradeRefused, method)
	}
	return newStatusError(codes.Internal, cause, "", method)
}

// lostStatus maps a lease lost while the handler ran. err is guard.Wrap's error, which
// holds the loss and the handler's error herr, if any. The RPC fails even when herr is
// nil: the handler may have run without exclusivity. A status code of the handler's own
// is kept; one that only echoes the cancellation of its context becomes Aborted.
func lostStatus(method string, err, herr error) error {
	code := codes.Aborted
	if st, ok := status.FromError(herr); ok && herr != nil {
		switch st.Code() {
		case codes.OK, codes.Unknown, codes.Canceled, codes.DeadlineExceeded:
		default:
			code = st.Code()
		}
	}
	return newStatusError(code, fmt.Errorf("interceptor: %s: %w", method, err), ReasonLeaseLost, method)
}
