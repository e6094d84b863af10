package interceptor_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// visit is what a guarded handler saw.
type visit struct {
	owner     ctxid.ID
	hops      int
	reentrant bool
	token     int64
	md        metadata.MD
}

// chain is two services, A and B, each with its own Locker (two processes sharing one
// Redis). A.Hold holds account:{from_account} and calls B.Debit, guarded on the same
// key; B.Debit calls back A.Audit, guarded on it too, when labels.back is "1". A.Hold
// calls B without the client interceptor when labels.via is "plain".
type chain struct {
	a *grpc.ClientConn // the test's connection to A

	mu   sync.Mutex
	seen map[string]visit
}

func (c *chain) record(ctx context.Context, name string) {
	var v visit
	v.owner, _ = ctxid.FromContext(ctx)
	v.hops = ctxid.HopsFromContext(ctx)
	if le, ok := guard.LeaseFromContext(ctx); ok {
		v.reentrant, v.token = le.Reentrant(), le.Token()
	}
	v.md, _ = metadata.FromIncomingContext(ctx)
	c.mu.Lock()
	c.seen[name] = v
	c.mu.Unlock()
}

func (c *chain) visited(name string) (visit, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.seen[name]
	return v, ok
}

func label(req *dynamicpb.Message, k string) string {
	m := req.Get(transferDesc.Fields().ByName("labels")).Map()
	return m.Get(protoreflect.ValueOfString(k).MapKey()).String()
}

// startChain starts A and B; opts go to every interceptor, signer to the clients.
func startChain(t *testing.T, lockerA, lockerB *guard.Locker, signer *ctxid.Signer, opts ...interceptor.Option) *chain {
	c := &chain{seen: make(map[string]visit)}
	key := "account:{req.from_account}"
	serverOpts := append([]interceptor.Option{interceptor.WithSigner(signer)}, opts...)
	clientOpts := []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(signer, opts...)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(signer, opts...)),
	}
	var signedAB, plainAB, signedBA *grpc.ClientConn // set once both servers run

	hold := func(ctx context.Context, req *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		c.record(ctx, "A.Hold")
		conn := signedAB
		if label(req, "via") == "plain" {
			conn = plainAB
		}
		// Bounded, so that a call that waits for our own lock ends.
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		v, err := invoke(ctx, conn, mDebit, req)
		return wrapperspb.Int64(v), err
	}
	audit := func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		c.record(ctx, "A.Audit")
		return wrapperspb.Int64(0), nil
	}
	debit := func(ctx context.Context, req *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		c.record(ctx, "B.Debit")
		if label(req, "back") == "1" {
			v, err := invoke(ctx, signedBA, mAudit, req)
			return wrapperspb.Int64(v), err
		}
		return wrapperspb.Int64(0), nil
	}

	rulesA := interceptor.WithRules(
		interceptor.Rule{Method: mHold, Key: key},
		interceptor.Rule{Method: mAudit, Key: key, Options: []guard.Option{guard.Retry(guard.NoRetry())}},
	)
	addrA := serve(t, service(map[string]unaryFunc{"Hold": hold, "Audit": audit}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(lockerA, append(serverOpts, unregistered, rulesA)...)))
	// B waits for a busy lock as long as the default allows (5s); A's call to it has a
	// shorter deadline.
	rulesB := interceptor.WithRules(interceptor.Rule{Method: mDebit, Key: key})
	addrB := serve(t, service(map[string]unaryFunc{"Debit": debit}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(lockerB, append(serverOpts, unregistered, rulesB)...)))

	signedAB = dial(t, addrB, clientOpts...)
	plainAB = dial(t, addrB)
	signedBA = dial(t, addrA, clientOpts...)
	c.a = dial(t, addrA)
	return c
}

// TestCrossServiceReentry: A holds account:N and calls B, guarded on account:N.
func TestCrossServiceReentry(t *testing.T) {
	srv := redistest.Start(t)
	lockerA, _ := newLocker(t, srv)
	lockerB, _ := newLocker(t, srv)
	signer := newSigner(t, []ctxid.Key{keyCurrent})

	t.Run("propagated owner reenters", func(t *testing.T) {
		c := startChain(t, lockerA, lockerB, signer)
		if _, err := invoke(ctxTimeout(t, 5*time.Second), c.a, mHold, transfer("1")); err != nil {
			t.Fatalf("A.Hold → B.Debit: %v", err)
		}
		a, _ := c.visited("A.Hold")
		b, ok := c.visited("B.Debit")
		if !ok || b.owner != a.owner || !b.reentrant || b.token != a.token || b.hops != 1 {
			t.Fatalf("B saw %+v, want A's owner %s and token %d, reentrant, 1 hop", b, a.owner, a.token)
		}
		if a.reentrant {
			t.Fatal("A's first hold reported reentrant")
		}
		if n := len(b.md.Get(interceptor.MetadataKey)); n != 1 {
			t.Fatalf("B received %d owner tokens, want 1", n)
		}
	})

	t.Run("without propagation B waits until A's deadline", func(t *testing.T) {
		c := startChain(t, lockerA, lockerB, signer)
		_, err := invoke(ctxTimeout(t, 5*time.Second), c.a, mHold, transfer("2", withLabel("via", "plain")))
		wantCode(t, err, codes.DeadlineExceeded)
		if _, ok := c.visited("B.Debit"); ok {
			t.Fatal("B's handler ran while A held the lock for another owner")
		}
	})

	t.Run("A to B to A reenters", func(t *testing.T) {
		c := startChain(t, lockerA, lockerB, signer)
		if _, err := invoke(ctxTimeout(t, 5*time.Second), c.a, mHold, transfer("3", withLabel("back", "1"))); err != nil {
			t.Fatalf("A.Hold → B.Debit → A.Audit: %v", err)
		}
		a, _ := c.visited("A.Hold")
		back, ok := c.visited("A.Audit")
		if !ok || back.owner != a.owner || !back.reentrant || back.token != a.token || back.hops != 2 {
			t.Fatalf("A.Audit saw %+v, want A's owner %s and token %d, reentrant, 2 hops", back, a.owner, a.token)
		}
	})

	t.Run("hop limit stops the token", func(t *testing.T) {
		oneHop := newSigner(t, []ctxid.Key{keyCurrent}, ctxid.MaxHops(1))
		c := startChain(t, lockerA, lockerB, oneHop)
		_, err := invoke(ctxTimeout(t, 5*time.Second), c.a, mHold, transfer("4", withLabel("back", "1")))
		// B reentered (1 hop); its call back to A would be hop 2, so it went without a
		// token and A.Audit (NoRetry) found its own request's lock busy.
		wantBusy(t, err, mAudit, 30*time.Second)
		if _, ok := c.visited("B.Debit"); !ok {
			t.Fatal("B did not reenter within the hop limit")
		}
		if _, ok := c.visited("A.Audit"); ok {
			t.Fatal("A.Audit reentered beyond the hop limit")
		}
	})

	t.Run("custom metadata key", func(t *testing.T) {
		c := startChain(t, lockerA, lockerB, signer, interceptor.WithMetadataKey("X-Lock-Owner"))
		if _, err := invoke(ctxTimeout(t, 5*time.Second), c.a, mHold, transfer("5")); err != nil {
			t.Fatalf("A.Hold → B.Debit: %v", err)
		}
		b, _ := c.visited("B.Debit")
		if !b.reentrant || len(b.md.Get("x-lock-owner")) != 1 || len(b.md.Get(interceptor.MetadataKey)) != 0 {
			t.Fatalf("B saw %+v, want reentry through x-lock-owner only", b)
		}
	})
}

// A hand-made token with 0 hops is an owner like one the client interceptor sends
// (1 hop): the handler runs in the lease's section, within the token's owner, and a
// guarded call of its own on the rule's key reenters, over a unary and a streaming RPC.
// The server once re-accepted a 0-hop token inside the handler, replacing the lease's
// section with the token's owner, which does not hold the lock, so that call was busy.
func TestZeroHopTokenReenters(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	signer := newSigner(t, []ctxid.Key{keyCurrent})

	type inside struct {
		owner, section ctxid.ID // the handler's owner, the lease's section
		hops           int
		nested         error // guard.Do on the rule's key from the handler
		nestedReenters bool
	}
	seen := make(chan inside, 1)
	look := func(ctx context.Context, key string) {
		var in inside
		in.owner, _ = ctxid.FromContext(ctx)
		in.hops = ctxid.HopsFromContext(ctx)
		if le, ok := guard.LeaseFromContext(ctx); ok {
			in.section = le.Owner()
		}
		in.nested = guard.Do(ctx, func(ctx context.Context) error {
			le, ok := guard.LeaseFromContext(ctx)
			in.nestedReenters = ok && le.Reentrant()
			return nil
		}, guard.Use(locker), guard.Key(key), guard.Retry(guard.NoRetry()))
		seen <- in
	}
	hold := func(ctx context.Context, req *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		look(ctx, "account:"+req.Get(transferDesc.Fields().ByName("from_account")).String())
		return wrapperspb.Int64(0), nil
	}
	watch := func(_ *dynamicpb.Message, ss grpc.ServerStream) error {
		look(ss.Context(), "watch:"+mWatch)
		return nil
	}
	opts := []interceptor.Option{unregistered, interceptor.WithSigner(signer), interceptor.WithRules(
		interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"},
		interceptor.Rule{Method: mWatch, Key: "watch:{method}"},
	)}
	addr := serve(t, service(map[string]unaryFunc{"Hold": hold}, map[string]streamFunc{"Watch": watch}),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, opts...)),
		grpc.ChainStreamInterceptor(interceptor.StreamServerInterceptor(locker, opts...)))
	conn := dial(t, addr) // no client interceptor: the caller puts its token in by hand

	check := func(t *testing.T, caller ctxid.ID, hops int, in inside) {
		t.Helper()
		if in.nested != nil || !in.nestedReenters {
			t.Errorf("guard.Do on the rule's key inside the handler: %v (reentrant %v), want a reentry", in.nested, in.nestedReenters)
		}
		if in.section == "" || !in.section.Within(caller) || in.owner != in.section {
			t.Errorf("handler's owner %q, lease's section %q: want the lease's section, within the caller %q", in.owner, in.section, caller)
		}
		if in.hops != hops {
			t.Errorf("handler's hop count %d, want the token's %d", in.hops, hops)
		}
	}
	for _, hops := range []int{0, 1} {
		t.Run(fmt.Sprintf("%d hops", hops), func(t *testing.T) {
			caller := ctxid.New()
			tok, err := signer.Sign(caller, hops)
			if err != nil {
				t.Fatal(err)
			}
			ctx := metadata.AppendToOutgoingContext(ctxTimeout(t, 10*time.Second), interceptor.MetadataKey, tok)

			t.Run("unary", func(t *testing.T) {
				if _, err := invoke(ctx, conn, mHold, transfer("zero-hop")); err != nil {
					t.Fatalf("Hold: %v", err)
				}
				check(t, caller, hops, <-seen)
			})
			t.Run("stream", func(t *testing.T) {
				stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, mWatch)
				if err != nil {
					t.Fatal(err)
				}
				if err := stream.SendMsg(transfer("zero-hop")); err != nil {
					t.Fatal(err)
				}
				if err := stream.CloseSend(); err != nil {
					t.Fatal(err)
				}
				if err := stream.RecvMsg(&wrapperspb.Int64Value{}); err != io.EOF {
					t.Fatalf("Watch ended with %v, want io.EOF", err)
				}
				check(t, caller, hops, <-seen)
			})
		})
	}
}
