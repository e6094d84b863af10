package chaos_test

// Regression tests for engine faults the fault suite found, each reduced to one
// deterministic scene.

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
		next, err := waiter.Acquire(ctx, "handoff", guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0))))
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
	l := warmLocker(t, c, guard.TTL(3*time.Second), guard.Renewal(50*time.Millisecond, 0), guard.ReleaseTimeout(releaseTimeout))
	le, err := l.Acquire(context.Background(), "stall")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	time.Sleep(120 * time.Millisecond) // a renewal is now waiting on the paused server
	start := time.Now()
	err = le.Release(context.Background())
	// Before the fix a release waited for the stalled renewal: TTL + ReleaseTimeout (3.2s).
	// The slack only absorbs a loaded test host.
	if took := time.Since(start); took > releaseTimeout+time.Second {
		t.Fatalf("Release took %s (err %v), want ≤ ReleaseTimeout %s + 1s, far below TTL", took.Round(time.Millisecond), err, releaseTimeout)
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
	// Before the fix the subscription's handshake ran on the caller's time: at least one
	// 400ms reply late. The slack only absorbs a loaded test host.
	if late := time.Since(deadline); late > 250*time.Millisecond || !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("Acquire returned %s after its deadline with %v, want ≤ 250ms and ErrLocked", late.Round(time.Millisecond), err)
	}
}

// TestReentryBehindLocalWaiters: an owner holds a lock through one Locker (service A)
// and reenters it through another (service B, reached with the owner's signed token),
// while B has a request of another owner waiting for that lock. The reentry must not
// queue behind that waiter, which waits for the very lock the owner holds (it once did,
// and failed with ErrLocked after 0 attempts at its deadline: the cross-service deadlock
// that owner propagation exists to prevent).
func TestReentryBehindLocalWaiters(t *testing.T) {
	srv := redistest.Start(t)
	a := warmLocker(t, srv.Client(t))
	b := warmLocker(t, srv.Client(t))
	ctx, _ := ctxid.Ensure(context.Background())
	held, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if le, err := b.Acquire(wctx, "k"); err == nil { // another owner, parked in b
			_ = le.Release(context.Background())
		}
	}()
	defer func() { <-waited }()
	defer cancel()
	time.Sleep(200 * time.Millisecond)

	rctx, rcancel := context.WithTimeout(ctxid.NewContext(context.Background(), held.Owner()), 2*time.Second)
	defer rcancel()
	in, err := b.Acquire(rctx, "k")
	if err != nil {
		t.Fatalf("the holder's reentry through another Locker: %v", err)
	}
	if !in.Reentrant() {
		t.Error("the reentry through another Locker is not reentrant")
	}
	_ = in.Release(ctx)
}

// TestAcquireAcrossOutage: an Acquire started while Redis is down can succeed through
// go-redis's retries once Redis is back, with its validity counted from the first send.
// When the outage outlasted the TTL, it must not hand out a lease whose validity deadline
// has already passed (it once did: lost on arrival, after the caller's work may have
// started under a context not yet cancelled).
func TestAcquireAcrossOutage(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	l := warmLocker(t, c, guard.TTL(500*time.Millisecond))
	srv.Kill(t)
	type result struct {
		le  *guard.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		le, err := l.Acquire(ctx, "outage")
		got <- result{le, err}
	}()
	time.Sleep(700 * time.Millisecond)
	srv.Restart(t)
	r := <-got
	if r.err != nil {
		return // refusing is fine; handing out a dead lease is not
	}
	defer r.le.Release(context.Background())
	if now := time.Now(); !r.le.ValidUntil().After(now) {
		t.Fatalf("Acquire returned a lease whose validity had ended %s before", now.Sub(r.le.ValidUntil()).Round(time.Millisecond))
	}
}

// TestLeaseContextDuringRelease: while Release waits for a stalled Redis, the lease's
// context must still end by its validity deadline (it once stayed alive until the
// release call returned, up to ReleaseTimeout later, so goroutines the work started
// under it ran on unprotected).
func TestLeaseContextDuringRelease(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	l := warmLocker(t, c, guard.TTL(300*time.Millisecond), guard.ReleaseTimeout(3*time.Second))
	le, err := l.Acquire(context.Background(), "releasing")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	released := make(chan struct{})
	go func() {
		defer close(released)
		_ = le.Release(context.Background())
	}()
	defer func() { <-released }()
	select {
	case <-le.Context().Done():
	case <-time.After(time.Until(le.ValidUntil()) + 50*time.Millisecond):
		t.Fatal("the lease's context is alive 50ms after its validity deadline while Release waits for Redis")
	}
}

// TestReleaseDeadlineWithoutContextTimeout: on a client built without
// ContextTimeoutEnabled, a release on a stalled Redis must still return within
// ReleaseTimeout (300ms here), not the client's read timeout (1s), as Acquire does.
func TestReleaseDeadlineWithoutContextTimeout(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ReadTimeout = time.Second })
	const releaseTimeout = 300 * time.Millisecond
	l := warmLocker(t, c, guard.TTL(2*time.Second), guard.ReleaseTimeout(releaseTimeout))
	le, err := l.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause(t)
	defer srv.Resume(t)
	start := time.Now()
	err = le.Release(context.Background())
	if took := time.Since(start); took > releaseTimeout+50*time.Millisecond {
		t.Fatalf("Release took %s (%v), want ≤ ReleaseTimeout %s + 50ms", took.Round(time.Millisecond), err, releaseTimeout)
	}
}
