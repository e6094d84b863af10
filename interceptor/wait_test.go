package interceptor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// defaultMaxWait is how long guard's entry points wait for a busy lock when no Retry is
// given, on the rule or on guard.New.
const defaultMaxWait = 5 * time.Second

// TestDefaultWaitWithoutDeadline: a rule without a Retry option, on a Locker without
// one, waits for a busy lock at most defaultMaxWait, so that an RPC without a
// deadline is answered busy (Aborted, RetryInfo) instead of waiting for as long as the
// holder keeps the lock.
func TestDefaultWaitWithoutDeadline(t *testing.T) {
	srv := redistest.Start(t)
	holder, _ := newLocker(t, srv)
	locker, _ := newLocker(t, srv)
	ttl := 30 * time.Second
	// One lock per RPC: waiters of one key in one process take turns at the attempts.
	for _, key := range []string{"account:held", "watch:held"} {
		le, err := holder.Acquire(ctxTimeout(t, 5*time.Second), key, guard.TTL(ttl))
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		defer le.Release(context.Background())
	}

	rec := make(recorder, 2)
	ran := make(chan string, 2)
	hold := func(context.Context, *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		ran <- mHold
		return wrapperspb.Int64(0), nil
	}
	watch := func(*dynamicpb.Message, grpc.ServerStream) error {
		ran <- mWatch
		return nil
	}
	rules := interceptor.WithRules(
		interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"},
		interceptor.Rule{Method: mWatch, Key: "watch:{md.x-account}"},
	)
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Hold": hold}, map[string]streamFunc{"Watch": watch}),
		grpc.ChainUnaryInterceptor(rec.unary, interceptor.UnaryServerInterceptor(locker, unregistered, rules)),
		grpc.ChainStreamInterceptor(rec.stream, interceptor.StreamServerInterceptor(locker, unregistered, rules))))

	// No deadline: only the test's end cancels these calls.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	unary := make(chan error, 1)
	go func() {
		_, err := invoke(ctx, conn, mHold, transfer("held"))
		unary <- err
	}()
	stream := make(chan error, 1)
	go func() {
		s, err := conn.NewStream(metadata.AppendToOutgoingContext(ctx, "x-account", "held"), &grpc.StreamDesc{ServerStreams: true}, mWatch)
		if err == nil {
			err = s.SendMsg(transfer("held"))
		}
		if err == nil {
			err = s.RecvMsg(new(wrapperspb.Int64Value))
		}
		stream <- err
	}()

	// Generous: the default wait, with room for a loaded machine.
	bound := time.After(3 * defaultMaxWait)
	for _, c := range []struct {
		method string
		errc   chan error
	}{{mHold, unary}, {mWatch, stream}} {
		select {
		case err := <-c.errc:
			wantBusy(t, err, c.method, ttl)
		case <-bound:
			t.Fatalf("%s without a deadline still waits after %s; want busy after at most %s",
				c.method, 3*defaultMaxWait, defaultMaxWait)
		}
	}
	for range 2 {
		var locked *guard.LockedError
		if serverErr := rec.next(t); !errors.As(serverErr, &locked) || locked.Attempts < 2 || locked.Err != nil {
			t.Fatalf("server-side error %v: want a *guard.LockedError after several attempts, not ended by the context", serverErr)
		}
	}
	select {
	case m := <-ran:
		t.Fatalf("%s ran while another owner held its lock", m)
	default:
	}
}

// TestBudgetWhileFrozen: a rule's wait budget bounds the RPC while Redis is frozen
// (SIGSTOP: connections accepted, nothing answered), whatever the client's own timeouts
// and retries: an RPC without a deadline is answered Unavailable within the budget plus
// half a second, and its handler does not run.
func TestBudgetWhileFrozen(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	if err := locker.Ping(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	const budget = 2 * time.Second
	ran := make(chan struct{}, 1)
	hold := func(context.Context, *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		ran <- struct{}{}
		return wrapperspb.Int64(0), nil
	}
	rules := interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "account:{req.from_account}",
		Options: []guard.Option{guard.Retry(guard.MaxWait(budget, nil))}})
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Hold": hold}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered, rules))))
	if _, err := invoke(ctxTimeout(t, 5*time.Second), conn, mHold, transfer("warm")); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	<-ran
	srv.Pause(t)
	defer srv.Resume(t)
	start := time.Now()
	_, err := invoke(context.Background(), conn, mHold, transfer("frozen"))
	took := time.Since(start)
	wantCode(t, err, codes.Unavailable)
	if took > budget+500*time.Millisecond {
		t.Fatalf("answered after %s on a frozen Redis, want within the budget %s + 500ms", took, budget)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran while Redis was frozen")
	default:
	}
}
