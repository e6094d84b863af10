package chaos_test

// Regression tests for engine faults the fault suite found, each reduced to one
// deterministic scene.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// warmLocker returns a Locker on client c, closed at cleanup, with its scripts loaded so
// that EVALSHA runs them at the first try.
func warmLocker(t *testing.T, c *redis.Client, opts ...guard.Option) *guard.Locker {
	t.Helper()
	l, err := guard.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	le, err := l.Acquire(context.Background(), "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	if err := le.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRetriedReleaseAfterHandoff: a release whose reply comes after the client's read
// timeout is sent again by go-redis. The first run freed the lock and a waiter took it
// before the retry arrived; the retry finds another owner, and must still report the
// release as done (it once reported ErrNotHeld, which guard.Wrap turns into ErrLeaseLost
// for a call that ran fully protected).
func TestRetriedReleaseAfterHandoff(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	slow := srv.Client(t, func(o *redis.Options) {
		o.Addr, o.ReadTimeout, o.ContextTimeoutEnabled = proxy.Addr(), 100*time.Millisecond, true
	})
	holder := warmLocker(t, slow)
	waiter := warmLocker(t, srv.Client(t))
	ctx := context.Background()

	le, err := holder.Acquire(ctx, "handoff")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *guard.Lease, 1)
	go func() {
		next, err := waiter.Acquire(ctx, "handoff", guard.Retry(guard.UntilCanceled(guard.Fixed(time.Minute, 0))))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- next
	}()
	time.Sleep(200 * time.Millisecond) // the waiter is parked on the release notification
	proxy.DelayNextReply(300 * time.Millisecond)
	err = le.Release(ctx)
	if next := <-got; next != nil {
		defer next.Release(ctx)
	}
	if err != nil {
		t.Fatalf("Release = %v; the first run released the lock (the waiter got it), its retry reported the new owner's state", err)
	}
}

// TestReleaseBoundedWhileRenewalStalls: a renewal of the lease is in flight on a stalled
// Redis when Release is called. Release must still return within ReleaseTimeout (it once
// waited for the renewal first, bounded only by the TTL: up to 35s with the defaults).
func TestReleaseBoundedWhileRenewalStalls(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	const releaseTimeout = 200 * time.Millisecond
	l := warmLocker(t, c, guard.TTL(3*time.Second), guard.RenewEvery(50*time.Millisecond), guard.ReleaseTimeout(releaseTimeout))
	le, err := l.Acquire(context.Background(), "stall")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	time.Sleep(120 * time.Millisecond) // a renewal is now waiting on the paused server
	start := time.Now()
	err = le.Release(context.Background())
	if took := time.Since(start); took > releaseTimeout+50*time.Millisecond {
		t.Fatalf("Release took %s (err %v), want ≤ ReleaseTimeout %s + 50ms", took.Round(time.Millisecond), err, releaseTimeout)
	}
}

// TestAcquireDeadlineWhileSubscribing: the first wait of a Locker opens its Pub/Sub
// connection, behind a slow link. Acquire must still return at its deadline, with a
// *LockedError (the subscription's dial and handshake once ran on the caller's time,
// bounded only by the client's timeouts).
func TestAcquireDeadlineWhileSubscribing(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	slow := srv.Client(t, func(o *redis.Options) { o.Addr, o.ContextTimeoutEnabled = proxy.Addr(), true })
	holder := warmLocker(t, srv.Client(t))
	waiter := warmLocker(t, slow)
	held, err := holder.Acquire(context.Background(), "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	proxy.SetLatency(400 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err = waiter.Acquire(ctx, "busy")
	if late := time.Since(deadline); late > 50*time.Millisecond || !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("Acquire returned %s after its deadline with %v, want ≤ 50ms and ErrLocked", late.Round(time.Millisecond), err)
	}
}
