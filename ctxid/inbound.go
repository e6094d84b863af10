package ctxid

import (
	"context"
	"errors"
	"fmt"
)

// Reasons of a [Refusal] besides the codes of verification errors ([VerifyError.Code]).
const (
	RefusedNoSigner  = "no_signer"      // the service has no Signer
	RefusedSeveral   = "several_values" // the call carried more than one token
	RefusedUntrusted = "untrusted"      // a verification error without a known reason
)

// Refusal is an inbound owner token that a service did not accept, and why. The token
// is never used: the call runs as a fresh owner. It matches [ErrUntrusted], and the
// verification error's reason when there is one.
type Refusal struct {
	// Reason is a short code for logs, spans and responses: one of the Refused* values
	// or a [VerifyError.Code].
	Reason string
	// Err says what was wrong; it never carries the token.
	Err error
}

// Error says why the token was refused.
func (r *Refusal) Error() string { return "ctxid: owner token refused: " + r.Err.Error() }

// Unwrap returns the error behind the refusal.
func (r *Refusal) Unwrap() error { return r.Err }

// Inbound is the policy every transport applies to the owner tokens an inbound call
// carried under name (an HTTP header, a gRPC metadata key), in values. With none it
// returns ctx as it is, "" and nil. With exactly one that verifies it returns ctx
// carrying that token's owner and hop count, and the token. Otherwise it returns ctx as
// it is and why the tokens were refused: several values are refused rather than picked
// from (a proxy or client that adds one must not make a call run as whichever owner it
// likes); an empty value is malformed; a nil Signer refuses every token. A caller that
// gets a refusal runs the call as a fresh owner ([Ensure]).
func (s *Signer) Inbound(ctx context.Context, name string, values []string) (context.Context, string, *Refusal) {
	var err error
	switch {
	case len(values) == 0:
		return ctx, "", nil
	case s == nil:
		_, err = s.Verify(values[0]) // a nil Signer refuses every token
		return ctx, "", &Refusal{Reason: RefusedNoSigner, Err: fmt.Errorf("no Signer: %w", err)}
	case len(values) > 1:
		return ctx, "", &Refusal{Reason: RefusedSeveral, Err: &VerifyError{Reason: ErrMalformed,
			Detail: fmt.Sprintf("%d values of %s, want one", len(values), name)}}
	case values[0] == "":
		// Accept takes an empty token for none; a value that is present but empty is
		// malformed.
		_, err = s.Verify(values[0])
	default:
		var c Claims
		if c, err = s.Verify(values[0]); err == nil {
			return withOwner(ctx, c.Owner, c.Hops), values[0], nil
		}
	}
	reason := RefusedUntrusted
	var ve *VerifyError
	if errors.As(err, &ve) {
		reason = ve.Code()
	}
	return ctx, "", &Refusal{Reason: reason, Err: err}
}
