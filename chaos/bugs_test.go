//go:build chaosbugs

// Reproductions of engine defects the fault suite found. They fail until the engine is
// fixed, so they stay out of `make test` and `make chaos`; run them with
// `go test -race -tags chaosbugs -run . ./chaos/`.

package chaos_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// bugLocker returns a Locker on client c, closed at cleanup, with its scripts loaded so
// that EVALSHA runs them at the first try.
func bugLocker(t *testing.T, c *redis.Client, opts ...guard.Option) *guard.Locker {
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
// before the retry arrived; the retry then finds another owner (or no lock, once that
// owner released too) and Release reports ErrNotHeld (or ErrExpired), although it
// released the lock. guard.Wrap turns that into ErrLeaseLost for a call that ran fully
// protected. (release.lua recognises its own retry only while the fence key still ends
// with its nonce, and the next acquire overwrites the fence key.)
func TestRetriedReleaseAfterHandoff(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	slow := srv.Client(t, func(o *redis.Options) {
		o.Addr, o.ReadTimeout, o.ContextTimeoutEnabled = proxy.Addr(), 100*time.Millisecond, true
	})
	holder := bugLocker(t, slow)
	waiter := bugLocker(t, srv.Client(t))
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

// TestReleaseBoundedWhileRenewalStalls: Release waits for a renewal of its lease that is
// in flight before it sends its own call, and a renewal on a stalled Redis is bounded by
// the TTL, not by ReleaseTimeout. Release then takes up to TTL + ReleaseTimeout (35s
// with the defaults) instead of ReleaseTimeout.
func TestReleaseBoundedWhileRenewalStalls(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	const releaseTimeout = 200 * time.Millisecond
	l := bugLocker(t, c, guard.TTL(3*time.Second), guard.RenewEvery(50*time.Millisecond), guard.ReleaseTimeout(releaseTimeout))
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
// connection with context.WithoutCancel, so the dial and handshake are bounded by the
// client's timeouts, not by the caller's deadline. Behind a slow link, Acquire returns
// that long after its context ended.
func TestAcquireDeadlineWhileSubscribing(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	slow := srv.Client(t, func(o *redis.Options) { o.Addr, o.ContextTimeoutEnabled = proxy.Addr(), true })
	holder := bugLocker(t, srv.Client(t))
	waiter := bugLocker(t, slow)
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

// TestAmbiguousAcquireThenRetry: an acquire whose reply is lost took the lock in Redis;
// its compensating release is sent in the background. If the same owner acquires again
// before the compensation lands (a retrying caller, or a downstream service holding the
// owner's token), that acquire reenters the hold the lost attempt left, and the
// compensation then finds a newer nonce and undoes nothing. The new lease claims to be
// reentrant, Redis counts two holds, and after the lease is released the lock stays
// held by nobody until its TTL runs out.
func TestAmbiguousAcquireThenRetry(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	lossy := srv.Client(t, func(o *redis.Options) { o.Addr, o.MaxRetries, o.ContextTimeoutEnabled = proxy.Addr(), -1, true })
	direct := srv.Client(t)
	first := bugLocker(t, lossy, guard.TTL(10*time.Second))
	second := bugLocker(t, direct, guard.TTL(10*time.Second))
	ctx, owner := ctxid.Ensure(context.Background())

	// The acquire runs in Redis; its reply is held, and the partition then also holds
	// the compensating release.
	proxy.DelayNextReply(time.Second)
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	go func() {
		time.Sleep(50 * time.Millisecond)
		proxy.Blackhole(true)
	}()
	_, err := first.Acquire(actx, "ambiguous")
	cancel()
	if err == nil {
		t.Fatal("the first acquire succeeded; the test needs it to time out")
	}
	le, err := second.Acquire(ctx, "ambiguous")
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(false)
	time.Sleep(300 * time.Millisecond) // the compensation lands
	holds, _ := direct.HGet(ctx, "guard:{ambiguous}", string(owner)).Int()
	reentrant := le.Reentrant()
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	left, _ := direct.Exists(ctx, "guard:{ambiguous}").Result()
	if reentrant || holds != 1 || left != 0 {
		t.Fatalf("after a lost acquire and a retry by the same owner: lease reentrant %v, Redis holds %d (want false, 1); lock left after release: %v",
			reentrant, holds, left == 1)
	}
}
