package interceptor_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/interceptor"
)

// sent runs the client interceptors around a call made with ctx and returns the
// outgoing metadata each one passed on.
func sent(t *testing.T, signer *ctxid.Signer, ctx context.Context, opts ...interceptor.Option) (unary, stream metadata.MD) {
	t.Helper()
	ui := interceptor.UnaryClientInterceptor(signer, opts...)
	err := ui(ctx, "/x.S/M", nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		unary, _ = metadata.FromOutgoingContext(ctx)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	si := interceptor.StreamClientInterceptor(signer, opts...)
	_, err = si(ctx, &grpc.StreamDesc{}, nil, "/x.S/M", func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
		stream, _ = metadata.FromOutgoingContext(ctx)
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return unary, stream
}

func TestClientSendsSignedOwner(t *testing.T) {
	signer := newSigner(t, []ctxid.Key{keyCurrent}, ctxid.MaxHops(3))
	owner := ctxid.New()
	key := interceptor.MetadataKey

	// The owner goes out signed, one hop further, beside the caller's own metadata and
	// in place of a token copied from the incoming request.
	ctx := metadata.AppendToOutgoingContext(ctxid.NewContext(context.Background(), owner), "x-tenant", "acme", key, "stale")
	for _, md := range func() []metadata.MD { u, s := sent(t, signer, ctx); return []metadata.MD{u, s} }() {
		toks := md.Get(key)
		if len(toks) != 1 || md.Get("x-tenant")[0] != "acme" {
			t.Fatalf("outgoing metadata %v: want one token beside x-tenant", md)
		}
		c, err := signer.Verify(toks[0])
		if err != nil || c.Owner != owner || c.Hops != 1 {
			t.Fatalf("token claims %+v, %v; want owner %s after 1 hop", c, err, owner)
		}
	}

	// An owner that arrived after 2 hops leaves with 3; one that arrived with the
	// maximum is not sent on, and a stale token is removed.
	tok, _ := signer.Sign(owner, 2)
	arrived, _, err := signer.Accept(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := sent(t, signer, arrived)
	if c, err := signer.Verify(u.Get(key)[0]); err != nil || c.Hops != 3 {
		t.Fatalf("token after 2 hops: %+v, %v; want 3 hops", c, err)
	}
	tok, _ = signer.Sign(owner, 3)
	atMax, _, _ := signer.Accept(context.Background(), tok)
	u, s := sent(t, signer, metadata.AppendToOutgoingContext(atMax, key, "stale"))
	if len(u.Get(key)) != 0 || len(s.Get(key)) != 0 {
		t.Fatalf("token sent beyond MaxHops: %v / %v", u, s)
	}

	// No owner, or no signer: nothing is sent, and nothing stale either.
	stale := metadata.AppendToOutgoingContext(context.Background(), key, "stale")
	for _, tc := range []struct {
		name   string
		signer *ctxid.Signer
		ctx    context.Context
	}{
		{"no owner", signer, stale},
		{"nil signer", nil, ctxid.NewContext(stale, owner)},
	} {
		u, s := sent(t, tc.signer, tc.ctx)
		if len(u.Get(key)) != 0 || len(s.Get(key)) != 0 {
			t.Fatalf("%s: sent %v / %v", tc.name, u, s)
		}
	}

	// A configured key is used instead of the default.
	u, _ = sent(t, signer, ctxid.NewContext(context.Background(), owner), interceptor.WithMetadataKey("X-Lock-Owner"))
	if len(u.Get("x-lock-owner")) != 1 || len(u.Get(key)) != 0 {
		t.Fatalf("custom key: sent %v", u)
	}
}
