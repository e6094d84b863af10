//go:build chaosbugs

package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestRetriedReleaseAfterHandoff: a release whose reply is late is retried by the
// client; the first run freed the lock and a waiter took it before the retry arrived.
// The retry must still report the release as done.
func TestRetriedReleaseAfterHandoff(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = slow.Close() })
	fast := srv.Client(t)
	holder, err := guard.New(slow)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close() })
	waiter, err := guard.New(fast)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })
	ctx := context.Background()
	warm, err := holder.Acquire(ctx, "warm-up") // load the scripts, so that EVALSHA runs them
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	le, err := holder.Acquire(ctx, "handoff")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *guard.Lease, 1)
	go func() {
		next, err := waiter.Acquire(ctx, "handoff", guard.Retry(guard.UntilCanceled(guard.Fixed(time.Minute, 0))))
		t.Logf("waiter acquired at %s", time.Now().Format("15:04:05.000"))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- next
	}()
	time.Sleep(200 * time.Millisecond) // the waiter is parked on the release notification
	proxy.DelayNextReply(300 * time.Millisecond)
	before := srv.CommandCalls(t)
	start := time.Now()
	t.Logf("release starts at %s", start.Format("15:04:05.000"))
	err = le.Release(ctx)
	after := srv.CommandCalls(t)
	t.Logf("release took %s, err %v, evalsha %d, eval %d", time.Since(start), err, after["evalsha"]-before["evalsha"], after["eval"]-before["eval"])
	next := <-got
	if next != nil {
		defer next.Release(ctx)
	}
	if err != nil {
		t.Fatalf("Release = %v; the lock was released (the waiter got it), the retry only reported it wrong", err)
	}
}
