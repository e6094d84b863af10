package interceptor_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/keyfunc"
)

// recorder is an outer interceptor that hands over the error the guard interceptor
// returned, as a logging interceptor would see it.
type recorder chan error

func (r recorder) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	r <- err
	return resp, err
}

func (r recorder) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	err := h(srv, ss)
	r <- err
	return err
}

// next returns the next error the server returned.
func (r recorder) next(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the server returned nothing")
		return nil
	}
}

// ok is a handler that reports whether it ran under a lease.
func ok(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
	if _, held := guard.LeaseFromContext(ctx); held {
		return wrapperspb.Int64(1), nil
	}
	return wrapperspb.Int64(0), nil
}

func TestBusyStatus(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	ttl := 10 * time.Second
	holder, _ := newLocker(t, srv)
	le, err := holder.Acquire(ctxTimeout(t, 5*time.Second), "account:busy", guard.TTL(ttl))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer le.Release(context.Background())

	rec := make(recorder, 1)
	rules := interceptor.WithRules(
		interceptor.Rule{Method: mHold, Key: "account:{req.from_account}", Options: []guard.Option{guard.Retry(guard.NoRetry())}},
		interceptor.Rule{Method: mDebit, Key: "account:{req.from_account}", Options: []guard.Option{guard.Retry(guard.MaxWait(50*time.Millisecond, guard.Fixed(10*time.Millisecond, 0)))}},
		interceptor.Rule{Method: mAudit, Key: "account:{req.from_account}"},
	)
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Hold": ok, "Debit": ok, "Audit": ok}, nil),
		grpc.ChainUnaryInterceptor(rec.unary, interceptor.UnaryServerInterceptor(locker, unregistered, rules))))

	t.Run("no retry", func(t *testing.T) {
		_, err := invoke(ctxTimeout(t, 5*time.Second), conn, mHold, transfer("busy"))
		wantBusy(t, err, mHold, ttl)
		if msg := status.Convert(err).Message(); msg != "busy: another request holds the lock" {
			t.Fatalf("status message %q, want the plain busy text (the key stays on the server)", msg)
		}
		serverErr := rec.next(t)
		var locked *guard.LockedError
		if !errors.As(serverErr, &locked) || locked.Key != "account:busy" || locked.Attempts != 1 {
			t.Fatalf("server-side error %v: want a *guard.LockedError in the chain", serverErr)
		}
	})
	t.Run("max wait", func(t *testing.T) {
		_, err := invoke(ctxTimeout(t, 5*time.Second), conn, mDebit, transfer("busy"))
		wantBusy(t, err, mDebit, ttl)
		var locked *guard.LockedError
		if serverErr := rec.next(t); !errors.As(serverErr, &locked) || locked.Attempts < 2 {
			t.Fatalf("server-side error %v: want a LockedError after several attempts", serverErr)
		}
	})
	t.Run("deadline ends the wait", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := invoke(ctx, conn, mAudit, transfer("busy"))
		wantCode(t, err, codes.DeadlineExceeded)
		// The server sees its deadline pass or the client's cancellation, whichever
		// comes first.
		serverErr := rec.next(t)
		st := status.Convert(serverErr)
		wantReason(t, st, interceptor.ReasonLocked, mAudit)
		switch {
		case !errors.Is(serverErr, guard.ErrLocked):
			t.Fatalf("server-side error %v: want ErrLocked in the chain", serverErr)
		case st.Code() == codes.DeadlineExceeded && errors.Is(serverErr, context.DeadlineExceeded):
		case st.Code() == codes.Canceled && errors.Is(serverErr, context.Canceled):
		default:
			t.Fatalf("server-side error %v: want the context's error as code and cause", serverErr)
		}
	})
}

func TestInvalidKeyStatus(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	rec := make(recorder, 1)
	rules := interceptor.WithRules(
		interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"},
		interceptor.Rule{Method: mDebit, Key: "tenant:{md.x-tenant}"},
		interceptor.Rule{Method: mAudit, Key: "to:{req.to.id}"},
	)
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Hold": ok, "Debit": ok, "Audit": ok}, nil),
		grpc.ChainUnaryInterceptor(rec.unary, interceptor.UnaryServerInterceptor(locker, unregistered, rules))))

	for _, tc := range []struct {
		name, method string
		req          *dynamicpb.Message
		md           []string
		cause        error
	}{
		{name: "field not set", method: mHold, req: transfer(""), cause: keyfunc.ErrMissing},
		{name: "nested message not set", method: mAudit, req: transfer("1"), cause: keyfunc.ErrMissing},
		{name: "metadata missing", method: mDebit, req: transfer("1"), cause: keyfunc.ErrMissing},
		{name: "metadata empty", method: mDebit, req: transfer("1"), md: []string{"x-tenant", ""}, cause: keyfunc.ErrEmpty},
		{name: "metadata twice", method: mDebit, req: transfer("1"), md: []string{"x-tenant", "a", "x-tenant", "b"}},
		{name: "key too long", method: mHold, req: transfer(strings.Repeat("x", 2000))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.AppendToOutgoingContext(ctxTimeout(t, 5*time.Second), tc.md...)
			_, err := invoke(ctx, conn, tc.method, tc.req)
			st := wantCode(t, err, codes.InvalidArgument)
			wantReason(t, st, interceptor.ReasonInvalidKey, tc.method)
			serverErr := rec.next(t)
			if !errors.Is(serverErr, guard.ErrInvalidKey) || tc.cause != nil && !errors.Is(serverErr, tc.cause) {
				t.Fatalf("server-side error %v: want guard.ErrInvalidKey and %v in the chain", serverErr, tc.cause)
			}
		})
	}
}

// TestRuleCannotReadRequest: a rule whose {req...} path the message type lacks, or a
// {req...} rule on a stream, fails the RPC with Internal: the server is misconfigured.
func TestRuleCannotReadRequest(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	rec := make(recorder, 1)
	rules := interceptor.WithRules(
		interceptor.Rule{Method: mPlain, Key: "p:{req.no_such_field}"},
		interceptor.Rule{Method: mWatch, Key: "w:{req.from_account}"},
	)
	var watched atomic.Bool
	watch := func(*dynamicpb.Message, grpc.ServerStream) error {
		watched.Store(true)
		return nil
	}
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Plain": ok}, map[string]streamFunc{"Watch": watch}),
		grpc.ChainUnaryInterceptor(rec.unary, interceptor.UnaryServerInterceptor(locker, unregistered, rules)),
		grpc.ChainStreamInterceptor(rec.stream, interceptor.StreamServerInterceptor(locker, unregistered, rules))))
	ctx := ctxTimeout(t, 5*time.Second)

	_, err := invoke(ctx, conn, mPlain, transfer("1"))
	if st := wantCode(t, err, codes.Internal); st.Message() != "internal error: the method's lock is misconfigured" {
		t.Fatalf("status message %q, want the plain text (the rule's mistake is for the server's log)", st.Message())
	}
	if serverErr := rec.next(t); !errors.Is(serverErr, guard.ErrInvalidConfig) || !strings.Contains(serverErr.Error(), `no field "no_such_field"`) {
		t.Fatalf("server-side error %v: want guard.ErrInvalidConfig naming the field", serverErr)
	}

	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, mWatch)
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	if err := stream.SendMsg(transfer("1")); err != nil {
		t.Fatalf("SendMsg: %v", err)
	}
	wantCode(t, stream.RecvMsg(new(wrapperspb.Int64Value)), codes.Internal)
	if serverErr := rec.next(t); !errors.Is(serverErr, guard.ErrInvalidConfig) || watched.Load() {
		t.Fatalf("server-side error %v (handler ran: %v): want guard.ErrInvalidConfig before the handler", serverErr, watched.Load())
	}
}

func TestUnavailableStatus(t *testing.T) {
	srv := redistest.Start(t)
	// Fail fast once the server is gone: one dial, no command retries.
	locker, err := guard.New(srv.Client(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 }))
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	rec := make(recorder, 1)
	rules := interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"})
	sd := service(map[string]unaryFunc{"Hold": ok}, nil)
	closed := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(rec.unary, interceptor.UnaryServerInterceptor(locker, unregistered, rules))))
	open := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered, rules, interceptor.WithFailOpen(true)))))
	ctx := ctxTimeout(t, 10*time.Second)
	if v, err := invoke(ctx, closed, mHold, transfer("1")); err != nil || v != 1 {
		t.Fatalf("before the fault: %d, %v", v, err)
	}
	if serverErr := rec.next(t); serverErr != nil {
		t.Fatalf("server-side error before the fault: %v", serverErr)
	}
	srv.Kill(t)

	_, err = invoke(ctx, closed, mHold, transfer("1"))
	st := wantCode(t, err, codes.Unavailable)
	wantReason(t, st, interceptor.ReasonUnavailable, mHold)
	if serverErr := rec.next(t); !errors.Is(serverErr, guard.ErrUnavailable) {
		t.Fatalf("server-side error %v: want guard.ErrUnavailable in the chain", serverErr)
	}
	if v, err := invoke(ctx, open, mHold, transfer("1")); err != nil || v != 0 {
		t.Fatalf("fail-open: %d, %v; want the handler to run without a lease", v, err)
	}
}

// TestLeaseLostStatus: when the lock vanishes from Redis while the handler runs, the
// handler's context is cancelled with ErrLeaseLost, and the RPC fails even if the
// handler returns OK.
func TestLeaseLostStatus(t *testing.T) {
	srv := redistest.Start(t)
	locker, rdb := newLocker(t, srv)
	rec := make(recorder, 1)
	entered := make(chan struct{}, 1)
	causes := make(chan error, 1)
	hold := func(ctx context.Context, req *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		entered <- struct{}{}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			return nil, status.Error(codes.Internal, "lease never lost")
		}
		causes <- context.Cause(ctx)
		switch label(req, "ret") {
		case "ctx":
			return nil, ctx.Err()
		case "code":
			return nil, status.Error(codes.FailedPrecondition, "ledger moved on")
		}
		return wrapperspb.Int64(1), nil
	}
	rules := interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "lost:{req.from_account}",
		Options: []guard.Option{guard.TTL(300 * time.Millisecond)}})
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Hold": hold}, nil),
		grpc.ChainUnaryInterceptor(rec.unary, interceptor.UnaryServerInterceptor(locker, unregistered, rules))))

	for _, tc := range []struct {
		ret  string
		code codes.Code
	}{{"ok", codes.Aborted}, {"ctx", codes.Aborted}, {"code", codes.FailedPrecondition}} {
		t.Run(tc.ret, func(t *testing.T) {
			acct := "acct-" + tc.ret
			ctx := ctxTimeout(t, 10*time.Second)
			errc := make(chan error, 1)
			go func() {
				_, err := invoke(ctx, conn, mHold, transfer(acct, withLabel("ret", tc.ret)))
				errc <- err
			}()
			<-entered
			if err := rdb.Del(ctx, "guard:{lost:"+acct+"}").Err(); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if cause := <-causes; !errors.Is(cause, guard.ErrLeaseLost) {
				t.Fatalf("handler context cause %v, want ErrLeaseLost", cause)
			}
			err := <-errc
			st := wantCode(t, err, tc.code)
			wantReason(t, st, interceptor.ReasonLeaseLost, mHold)
			if !strings.Contains(st.Message(), "lease lost") {
				t.Fatalf("status message %q does not carry the cause", st.Message())
			}
			serverErr := rec.next(t)
			var lost *guard.LeaseLostError
			if !errors.As(serverErr, &lost) || lost.Key != "lost:"+acct {
				t.Fatalf("server-side error %v: want a *guard.LeaseLostError in the chain", serverErr)
			}
			if tc.ret == "code" && !strings.Contains(st.Message(), "ledger moved on") {
				t.Fatalf("status message %q lost the handler's own error", st.Message())
			}
		})
	}
}

// TestHandlerErrorPassesThrough: the handler's own status reaches the client as it was,
// and the lock is released.
func TestHandlerErrorPassesThrough(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	notFound := func(context.Context, *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		return nil, status.Error(codes.NotFound, "no such account")
	}
	rules := interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"})
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Hold": notFound}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered, rules))))
	ctx := ctxTimeout(t, 5*time.Second)
	_, err := invoke(ctx, conn, mHold, transfer("7"))
	st := wantCode(t, err, codes.NotFound)
	if st.Message() != "no such account" || len(st.Details()) != 0 {
		t.Fatalf("status %v changed on its way out", st)
	}
	le, err := locker.TryAcquire(ctx, "account:7")
	if err != nil {
		t.Fatalf("lock not released after the handler failed: %v", err)
	}
	_ = le.Release(ctx)
}

// TestUnguardedMethod: a method without a rule runs without a lock, but takes a trusted
// owner along so that it can pass it on.
func TestUnguardedMethod(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	signer := newSigner(t, []ctxid.Key{keyCurrent})
	seen := make(chan visit, 1)
	plain := func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		var v visit
		v.owner, _ = ctxid.FromContext(ctx)
		v.hops = ctxid.HopsFromContext(ctx)
		_, v.reentrant = guard.LeaseFromContext(ctx) // here: whether a lease is present
		seen <- v
		return wrapperspb.Int64(0), nil
	}
	rules := interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"})
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Plain": plain}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered, rules, interceptor.WithSigner(signer)))))

	if _, err := invoke(ctxTimeout(t, 5*time.Second), conn, mPlain, transfer("1")); err != nil {
		t.Fatalf("Plain: %v", err)
	}
	if v := <-seen; v.owner != "" || v.reentrant {
		t.Fatalf("unguarded method without a token saw %+v, want no owner and no lease", v)
	}

	owner := ctxid.New()
	tok, _ := signer.Sign(owner, 3)
	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t, 5*time.Second), interceptor.MetadataKey, tok)
	if _, err := invoke(ctx, conn, mPlain, transfer("1")); err != nil {
		t.Fatalf("Plain: %v", err)
	}
	if v := <-seen; v.owner != owner || v.hops != 3 || v.reentrant {
		t.Fatalf("unguarded method with a token saw %+v, want owner %s after 3 hops, no lease", v, owner)
	}
}

// TestInvalidKeyInProcess: a key that renders empty, or that is longer than the
// Locker's MaxKeyLen, is guard.ErrInvalidKey in the chain of the error the interceptors
// return, with codes.InvalidArgument, and never guard.ErrInvalidConfig: the request is
// wrong, not the server. The handler does not run.
func TestInvalidKeyInProcess(t *testing.T) {
	srv := redistest.Start(t)
	const maxKeyLen = 32
	locker, _ := newLocker(t, srv, guard.MaxKeyLen(maxKeyLen))
	rules := interceptor.WithRules(
		interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"},
		interceptor.Rule{Method: mDebit, Key: "{req.memo}"},
		interceptor.Rule{Method: mAudit, Key: "{md.x-tenant}"},
		interceptor.Rule{Method: mWatch, Key: "{md.x-tenant}"},
	)
	ui := interceptor.UnaryServerInterceptor(locker, unregistered, rules)
	si := interceptor.StreamServerInterceptor(locker, unregistered, rules)
	withMemo := func(memo string) func(*dynamicpb.Message) {
		return func(m *dynamicpb.Message) {
			m.Set(transferDesc.Fields().ByName("memo"), protoreflect.ValueOfMessage(wrapperspb.String(memo).ProtoReflect()))
		}
	}
	account := func(n int) string { return strings.Repeat("a", n-len("account:")) }

	for _, tc := range []struct {
		name, method string
		req          *dynamicpb.Message // nil: a stream
		md           []string
		valid        bool
	}{
		{name: "request field renders empty", method: mDebit, req: transfer("1", withMemo(""))},
		{name: "metadata renders empty", method: mAudit, req: transfer("1"), md: []string{"x-tenant", ""}},
		{name: "stream metadata renders empty", method: mWatch, md: []string{"x-tenant", ""}},
		{name: "one byte over MaxKeyLen", method: mHold, req: transfer(account(maxKeyLen + 1))},
		{name: "far over MaxKeyLen", method: mHold, req: transfer(account(10 * maxKeyLen))},
		{name: "stream key over MaxKeyLen", method: mWatch, md: []string{"x-tenant", strings.Repeat("t", maxKeyLen+1)}},
		{name: "exactly MaxKeyLen", method: mHold, req: transfer(account(maxKeyLen)), valid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.NewIncomingContext(ctxTimeout(t, 5*time.Second), metadata.Pairs(tc.md...))
			ran := false
			var err error
			if tc.req != nil {
				_, err = ui(ctx, tc.req, &grpc.UnaryServerInfo{FullMethod: tc.method}, func(context.Context, any) (any, error) {
					ran = true
					return nil, nil
				})
			} else {
				err = si(nil, &ctxStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: tc.method, IsServerStream: true},
					func(any, grpc.ServerStream) error {
						ran = true
						return nil
					})
			}
			if tc.valid {
				if err != nil || !ran {
					t.Fatalf("key of MaxKeyLen bytes: handler ran %v, %v", ran, err)
				}
				return
			}
			if ran {
				t.Fatal("the handler ran without a valid key")
			}
			if !errors.Is(err, guard.ErrInvalidKey) || errors.Is(err, guard.ErrInvalidConfig) {
				t.Fatalf("error %v: want guard.ErrInvalidKey in the chain, and not guard.ErrInvalidConfig", err)
			}
			st := wantCode(t, err, codes.InvalidArgument)
			wantReason(t, st, interceptor.ReasonInvalidKey, tc.method)
		})
	}
}
