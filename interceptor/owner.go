package interceptor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/guardkit/guardkit/ctxid"
)

// A value of the "reason" metadata of an ErrorInfo with ReasonOwnerRejected, and of the
// guard.reason attribute of the guard.owner_rejected span event, besides ctxid's
// (ctxid.Refusal's Reason).
const rejectUntrustedPeer = "untrusted_peer" // WithTrustedPeer refused the caller

// rejection is an inbound owner token that the server refused, and why. The token itself
// is never used: the RPC runs as a fresh owner.
type rejection struct {
	reason string // rejectUntrustedPeer, or the *ctxid.Refusal's Reason
	err    error  // matches ctxid.ErrUntrusted, and the ctxid reason when there is one
}

// accept returns ctx carrying the caller's owner and the token's hop count when the
// caller is trusted and sent exactly one token that verifies. Otherwise it returns ctx
// as it is, so that the lock is taken for a fresh owner, and, when the caller sent a
// token under the metadata key, why it was refused; that is also recorded as an event
// on the RPC's span. A token is read here once per RPC, whatever its hop count.
func (s *server) accept(ctx context.Context) (context.Context, *rejection) {
	toks := metadata.ValueFromIncomingContext(ctx, s.o.mdKey)
	var rej *rejection
	if len(toks) > 0 && s.o.trustedPeer != nil && !s.o.trustedPeer(ctx) {
		// An untrusted peer's tokens are not even read.
		rej = &rejection{reason: rejectUntrustedPeer,
			err: fmt.Errorf("%w: the caller is not a trusted peer (WithTrustedPeer)", ctxid.ErrUntrusted)}
	} else {
		owned, _, ref := s.o.signer.Inbound(ctx, fmt.Sprintf("metadata %q", s.o.mdKey), toks)
		if ref == nil {
			return owned, nil
		}
		rej = &rejection{reason: ref.Reason, err: ref}
		if ref.Reason == ctxid.RefusedNoSigner {
			rej.err = fmt.Errorf("the server has no signer (WithSigner): %w", ref)
		}
	}
	trace.SpanFromContext(ctx).AddEvent("guard.owner_rejected",
		trace.WithAttributes(attribute.String("guard.reason", rej.reason)))
	return ctx, rej
}
