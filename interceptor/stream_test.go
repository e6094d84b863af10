package interceptor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestStreamHoldsLockForItsLife: a guarded stream holds its lock, renewed, until the
// client cancels it; the stream's context carries the owner, the lease and the token;
// a stream opened with a propagated owner reenters.
func TestStreamHoldsLockForItsLife(t *testing.T) {
	srv := redistest.Start(t)
	locker, rdb := newLocker(t, srv)
	holder, _ := newLocker(t, srv)
	signer := newSigner(t, []ctxid.Key{keyCurrent})
	type streamVisit struct {
		key   string
		owner ctxid.ID
		token int64
		lease *guard.Lease
	}
	visits := make(chan streamVisit, 4)
	ended := make(chan error, 4)
	watch := func(_ *dynamicpb.Message, ss grpc.ServerStream) error {
		ctx := ss.Context()
		le, ok := guard.LeaseFromContext(ctx)
		if !ok {
			return status.Error(codes.Internal, "stream context carries no lease")
		}
		owner, _ := ctxid.FromContext(ctx)
		tok := le.Token()
		visits <- streamVisit{key: le.Key(), owner: owner, token: tok, lease: le}
		if err := ss.SendMsg(wrapperspb.Int64(tok)); err != nil {
			return err
		}
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return ctx.Err()
	}
	ttl := 300 * time.Millisecond
	rules := interceptor.WithRules(interceptor.Rule{Method: mWatch, Key: "watch:{md.x-account}",
		Options: []guard.Option{guard.TTL(ttl), guard.Retry(guard.NoRetry())}})
	addr := serve(t, service(nil, map[string]streamFunc{"Watch": watch}),
		grpc.ChainStreamInterceptor(interceptor.StreamServerInterceptor(locker, unregistered, rules, interceptor.WithSigner(signer))))
	conn := dial(t, addr)
	signed := dial(t, addr, grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(signer)))

	// open starts a Watch stream on account acct and waits for its first message.
	open := func(ctx context.Context, c *grpc.ClientConn, acct string) error {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-account", acct)
		s, err := c.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, mWatch)
		if err != nil {
			return err
		}
		if err := s.SendMsg(transfer("x")); err != nil {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		return s.RecvMsg(new(wrapperspb.Int64Value))
	}
	base := ctxTimeout(t, 10*time.Second)

	ctx1, cancel1 := context.WithCancel(base)
	defer cancel1()
	if err := open(ctx1, conn, "1"); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	v1 := <-visits
	if v1.key != "watch:1" || v1.owner == "" || v1.token != v1.lease.Token() || v1.lease.Reentrant() {
		t.Fatalf("stream context: %+v", v1)
	}

	// Over three TTLs later only renewal can have kept the lock.
	time.Sleep(4 * ttl)
	if err := v1.lease.Err(); err != nil {
		t.Fatalf("lease of a live stream ended: %v", err)
	}
	wantBusy(t, open(base, conn, "1"), mWatch, ttl)

	cancel1()
	if cause := <-ended; !errors.Is(cause, context.Canceled) {
		t.Fatalf("stream context ended with %v, want the client's cancellation", cause)
	}
	waitUntil(t, 5*time.Second, "the lock to be released", func() bool {
		return redistest.Holder(t, base, rdb, "guard:{watch:1}") == ""
	})
	ctx3, cancel3 := context.WithCancel(base)
	if err := open(ctx3, conn, "1"); err != nil {
		t.Fatalf("stream after release: %v", err)
	}
	if v3 := <-visits; v3.token <= v1.token {
		t.Fatalf("token %d after %d: not increasing", v3.token, v1.token)
	}
	cancel3()
	<-ended

	// A stream opened on behalf of an owner that holds the lock elsewhere reenters.
	owner := ctxid.New()
	le, err := holder.Acquire(ctxid.NewContext(base, owner), "watch:2")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	owner = le.Owner() // the stream is opened from inside the section that holds the lock
	defer le.Release(context.Background())
	ctx4, cancel4 := context.WithCancel(ctxid.NewContext(base, owner))
	defer cancel4()
	if err := open(ctx4, signed, "2"); err != nil {
		t.Fatalf("stream with the holder's owner: %v", err)
	}
	if v4 := <-visits; v4.owner != owner || !v4.lease.Reentrant() || v4.token != le.Token() {
		t.Fatalf("propagated stream saw %+v, want owner %s reentering token %d", v4, owner, le.Token())
	}
	cancel4()
	<-ended
}
