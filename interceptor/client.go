package interceptor

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/guardkit/guardkit/ctxid"
)

// UnaryClientInterceptor returns a client interceptor that sends the owner of the call's
// context to the server, signed by signer, so that a guarded method there reenters the
// locks the caller's request holds instead of waiting for them:
//
//	conn, err := grpc.NewClient(target, grpc.WithChainUnaryInterceptor(
//		interceptor.UnaryClientInterceptor(signer)))
//
// The token goes into the outgoing metadata key set by WithMetadataKey, replacing any
// value already there (such as one copied from the incoming metadata). It counts one
// more hop than the owner arrived with; when ctx has no owner, signer is nil, or the hop
// would exceed the signer's MaxHops, no token is sent and any value already there is
// removed, so the server runs the call as a fresh owner.
//
// Install it only on connections to services that share signer's keys: a token is a
// bearer credential for the owner until it expires (see ctxid, "Security").
//
// It panics when an option is invalid (a bad metadata key), with an error matching
// guard.ErrInvalidConfig.
func UnaryClientInterceptor(signer *ctxid.Signer, opts ...Option) grpc.UnaryClientInterceptor {
	key := mustClientKey(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		return invoker(outgoing(ctx, signer, key), method, req, reply, cc, callOpts...)
	}
}

// StreamClientInterceptor returns a client interceptor that sends the owner of the
// stream's context to the server, as UnaryClientInterceptor does for unary calls.
func StreamClientInterceptor(signer *ctxid.Signer, opts ...Option) grpc.StreamClientInterceptor {
	key := mustClientKey(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(outgoing(ctx, signer, key), desc, cc, method, callOpts...)
	}
}

func mustClientKey(opts []Option) string {
	o, err := evaluate(opts)
	if err != nil {
		panic(err)
	}
	return o.mdKey
}

// outgoing returns ctx with its outgoing metadata carrying the owner token under key,
// and only that one.
func outgoing(ctx context.Context, signer *ctxid.Signer, key string) context.Context {
	tok, send := signer.Outbound(ctx)
	md, had := metadata.FromOutgoingContext(ctx)
	if !send {
		if _, stale := md[key]; !stale {
			return ctx
		}
		delete(md, key)
		return metadata.NewOutgoingContext(ctx, md)
	}
	if !had {
		md = metadata.MD{}
	}
	md[key] = []string{tok}
	return metadata.NewOutgoingContext(ctx, md)
}
