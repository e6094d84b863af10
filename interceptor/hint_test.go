package interceptor_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestRetryInfoFromHoldTimes: a method whose handler takes 300 ms, under the default TTL
// (30 s), answers a busy call with a RetryInfo of about 300 ms once holds have been seen
// to end — at most 2 s — instead of the holder's TTL left, which it says before.
func TestRetryInfoFromHoldTimes(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	hold := func(context.Context, *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		time.Sleep(300 * time.Millisecond)
		return wrapperspb.Int64(1), nil
	}
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Hold": hold}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
			interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "account:{req.from_account}",
				Options: []guard.Option{guard.Retry(guard.NoRetry())}})))))
	ctx := ctxTimeout(t, 30*time.Second)

	busyDelay := func(account string) time.Duration {
		t.Helper()
		le, err := locker.TryAcquire(ctx, "account:"+account) // another owner holds it
		if err != nil {
			t.Fatal(err)
		}
		defer le.Release(ctx)
		_, err = invoke(ctx, conn, mHold, transfer(account))
		st := wantCode(t, err, codes.Aborted)
		ri := retryInfo(st)
		if ri == nil {
			t.Fatalf("busy status %v has no RetryInfo", st)
		}
		return ri.GetRetryDelay().AsDuration()
	}
	if d := busyDelay("cold"); d < 20*time.Second {
		t.Fatalf("cold: RetryInfo %s, want the holder's TTL left (about 30s) before any hold ended", d)
	}
	for range 3 { // warm-up: holds of about 300 ms
		if _, err := invoke(ctx, conn, mHold, transfer("a1")); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
	}
	d := busyDelay("a1")
	t.Logf("RetryInfo after 3 holds of 300ms: %s", d)
	if d < 300*time.Millisecond || d > 2*time.Second {
		t.Fatalf("RetryInfo %s, want the observed hold time (about 300ms), at most 2s", d)
	}
}

// TestRetryInfoFromHoldAge: after many fast holds of a method, a call refused 0.5 s into
// a 3 s hold is not told to come back in milliseconds (a client that obeys that would
// hammer the server): its RetryInfo is at least half the current hold's age, 125 ms or
// more, and no more than the holder's TTL left.
func TestRetryInfoFromHoldAge(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	slow := make(chan struct{})
	hold := func(_ context.Context, m *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		if m.Get(m.Descriptor().Fields().ByName("from_account")).String() == "slow" {
			<-slow
		}
		return wrapperspb.Int64(1), nil
	}
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Hold": hold}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
			interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "account:{req.from_account}",
				Options: []guard.Option{guard.Retry(guard.NoRetry())}})))))
	ctx := ctxTimeout(t, 30*time.Second)
	for range 20 { // fast holds of the method's lock
		if _, err := invoke(ctx, conn, mHold, transfer("fast")); err != nil {
			t.Fatalf("warm-up: %v", err)
		}
	}
	held := make(chan error, 1)
	go func() {
		_, err := invoke(ctx, conn, mHold, transfer("slow"))
		held <- err
	}()
	time.AfterFunc(3*time.Second, func() { close(slow) })
	waitUntil(t, 2*time.Second, "the slow call to hold its lock", func() bool {
		st, err := locker.Inspect(ctx, "account:slow")
		return err == nil && len(st.Holders) == 1
	})
	time.Sleep(500 * time.Millisecond)
	_, err := invoke(ctx, conn, mHold, transfer("slow"))
	st := wantCode(t, err, codes.Aborted)
	ri := retryInfo(st)
	if ri == nil {
		t.Fatalf("busy status %v has no RetryInfo", st)
	}
	if d := ri.GetRetryDelay().AsDuration(); d < 125*time.Millisecond || d > 30*time.Second {
		t.Fatalf("RetryInfo %s 0.5 s into a hold after fast holds, want ≥ 125ms and ≤ the TTL left", d)
	}
	if err := <-held; err != nil {
		t.Fatalf("the slow call: %v", err)
	}
}
