package connectguard

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"github.com/guardkit/guardkit/ctxid"
)

// NewClientInterceptor returns a client interceptor that sends the owner of each call's
// context to the server, signed by signer, in the ctxid.Header ("Guardkit-Owner")
// header, so that a guarded procedure there (NewInterceptor with
// interceptor.WithSigner), or a guarded HTTP route (packages httpguard and
// middleware), reenters the locks the caller's request holds instead of waiting for
// them:
//
//	client := shopv1connect.NewPaymentsClient(httpClient, url,
//		connect.WithInterceptors(connectguard.NewClientInterceptor(signer)))
//
// A call whose context has no owner, or whose owner has used up signer's MaxHops, is
// sent without the header, and any value already there is removed. A token is a bearer
// credential for the owner until it expires (see ctxid, "Security"): install it only on
// clients of services that share the key. On a handler the interceptor does nothing.
//
// A connect client whose http.Client has an httpguard.Transport carries the owner
// already; the two together send one header.
func NewClientInterceptor(signer *ctxid.Signer) connect.Interceptor {
	return &client{signer: signer}
}

// client carries the owner on outgoing calls.
type client struct{ signer *ctxid.Signer }

// WrapUnary puts the owner token in a unary call's request headers.
func (c *client) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			c.carry(ctx, req.Header())
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient puts the owner token in a stream's request headers.
func (c *client) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		c.carry(ctx, conn.RequestHeader())
		return conn
	}
}

// WrapStreamingHandler leaves handlers as they are.
func (c *client) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// carry sets the owner token of ctx in h, and only that one.
func (c *client) carry(ctx context.Context, h http.Header) {
	if tok, ok := c.signer.Outbound(ctx); ok {
		h[ctxid.Header] = []string{tok}
		return
	}
	delete(h, ctxid.Header)
}
