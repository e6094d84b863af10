package httplock

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/guardkit/guardkit/ctxid"
)

// rejection is an inbound owner header that was not accepted, and why.
type rejection struct {
	reason string // a ctxid.Refused* value or a ctxid.VerifyError code
	err    error  // has the *ctxid.VerifyError in its chain
}

// Owner returns ctx with a lock owner: the one it carries already, else the caller's
// when header, the request's ctxid.Header values, holds a token signer verifies, else a
// fresh one. A token that does not verify is never used, since an owner is a capability
// to pass the lock; why it was refused is recorded as a "guard.owner_rejected" event on
// ctx's span and in the returned context under key, where [Rejected] finds it. Each
// middleware passes a key of its own.
func Owner(ctx context.Context, signer *ctxid.Signer, header []string, key any) context.Context {
	if _, ok := ctxid.FromContext(ctx); ok {
		return ctx
	}
	ctx, _, ref := signer.Inbound(ctx, ctxid.Header+" header", header)
	if ref == nil {
		ctx, _ = ctxid.Ensure(ctx) // the token's owner, or a fresh one without a token
		return ctx
	}
	rej := &rejection{reason: ref.Reason, err: ref}
	if ref.Reason == ctxid.RefusedNoSigner {
		rej.err = fmt.Errorf("LockConfig.Signer is nil: %w", ref)
	}
	trace.SpanFromContext(ctx).AddEvent("guard.owner_rejected",
		trace.WithAttributes(attribute.String("guard.reason", rej.reason)))
	ctx, _ = ctxid.Ensure(ctx)
	return context.WithValue(ctx, key, rej)
}

// Rejected returns why [Owner] did not accept the owner header of the request whose
// context is ctx, as Owner recorded it under key: reason is a ctxid.Refused* value or a
// ctxid.VerifyError code, and err, which has the *ctxid.VerifyError in its chain,
// explains it. Both are zero when nothing was recorded.
func Rejected(ctx context.Context, key any) (reason string, err error) {
	if rej, ok := ctx.Value(key).(*rejection); ok {
		return rej.reason, rej.err
	}
	return "", nil
}
