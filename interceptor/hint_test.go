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
