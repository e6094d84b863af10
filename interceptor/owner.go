package interceptor

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/guardkit/guardkit/ctxid"
)

// Values of the "reason" metadata of an ErrorInfo with ReasonOwnerRejected, and of the
// guard.reason attribute of the guard.owner_rejected span event, besides the codes of
// ctxid's verification errors (ctxid.VerifyError.Code).
const (
	rejectNoSigner      = "no_signer"      // the server has no WithSigner
	rejectSeveral       = "several_values" // the metadata key has more than one value
	rejectUntrustedPeer = "untrusted_peer" // WithTrustedPeer refused the caller
	rejectUntrusted     = "untrusted"      // a verification error without a known reason
)

// rejection is an inbound owner token that the server refused, and why. The token itself
// is never used: the RPC runs as a fresh owner.
type rejection struct {
	reason string // a reject* value, or the *ctxid.VerifyError's Code
	err    error  // matches ctxid.ErrUntrusted, and the ctxid reason when there is one
}

// accept returns ctx carrying the caller's owner, and the token that vouched for it, when
// the caller is trusted and sent exactly one token that verifies. Otherwise it returns
// ctx as it is, so that the lock is taken for a fresh owner, and, when the caller sent a
// token under the metadata key, why it was refused; that is also recorded as an event
// on the RPC's span.
func (s *server) accept(ctx context.Context) (context.Context, string, *rejection) {
	toks := metadata.ValueFromIncomingContext(ctx, s.o.mdKey)
	var rej *rejection
	switch {
	case len(toks) == 0:
		return ctx, "", nil
	case s.o.signer == nil:
		_, err := s.o.signer.Verify(toks[0]) // a nil Signer rejects every token
		rej = &rejection{reason: rejectNoSigner, err: fmt.Errorf("server has no signer (WithSigner): %w", err)}
	case len(toks) > 1:
		// Several values are refused rather than picked from: a proxy or client that adds
		// one must not make an RPC run as whichever owner it likes.
		rej = &rejection{reason: rejectSeveral,
			err: fmt.Errorf("%w: metadata %q has %d values, want one", ctxid.ErrUntrusted, s.o.mdKey, len(toks))}
	case s.o.trustedPeer != nil && !s.o.trustedPeer(ctx):
		rej = &rejection{reason: rejectUntrustedPeer,
			err: fmt.Errorf("%w: the caller is not a trusted peer (WithTrustedPeer)", ctxid.ErrUntrusted)}
	case toks[0] == "":
		// Accept takes an empty token for none; a value that is present but empty is
		// malformed.
		_, err := s.o.signer.Verify(toks[0])
		rej = verifyRejection(err)
	default:
		owned, _, err := s.o.signer.Accept(ctx, toks[0])
		if err == nil {
			return owned, toks[0], nil
		}
		rej = verifyRejection(err)
	}
	trace.SpanFromContext(ctx).AddEvent("guard.owner_rejected",
		trace.WithAttributes(attribute.String("guard.reason", rej.reason)))
	return ctx, "", rej
}

// verifyRejection names the reason of a ctxid verification error.
func verifyRejection(err error) *rejection {
	reason := rejectUntrusted
	var ve *ctxid.VerifyError
	if errors.As(err, &ve) {
		reason = ve.Code()
	}
	return &rejection{reason: reason, err: err}
}
