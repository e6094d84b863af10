//go:build chaosbugs

// Reproductions of engine faults the fault suite found that are not fixed yet. They fail
// until the engine is fixed, so they stay out of `make test` and `make chaos`; run them
// with `go test -race -tags chaosbugs -run . ./chaos/`. Once one passes, it moves to
// regress_test.go.

package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestRetriedReleaseAfterManyHandoffs: TestRetriedReleaseAfterHandoff with a busy key.
// release.lua recognises a retry of a final release by its nonce among the last 8 kept
// beside the fencing token; when more than 8 other owners took and released the lock
// before go-redis's retry arrived, the retry reports ErrNotHeld or ErrExpired although
// the release took effect (and guard.Wrap reports ErrLeaseLost for a protected call).
func TestRetriedReleaseAfterManyHandoffs(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	slow := srv.Client(t, func(o *redis.Options) {
		o.Addr, o.ReadTimeout, o.ContextTimeoutEnabled = proxy.Addr(), 100*time.Millisecond, true
	})
	holder := warmLocker(t, slow)
	churn := warmLocker(t, srv.Client(t))
	ctx := context.Background()
	le, err := holder.Acquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan int)
	for range 4 {
		go func() {
			n := 0
			for {
				select {
				case <-stop:
					done <- n
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				x, err := churn.Acquire(cctx, "busy")
				cancel()
				if err == nil {
					n++
					_ = x.Release(ctx)
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the churners are parked on the holder's lock
	proxy.DelayNextReply(300 * time.Millisecond)
	err = le.Release(ctx)
	close(stop)
	handoffs := 0
	for range 4 {
		handoffs += <-done
	}
	if err != nil {
		t.Fatalf("Release = %v after taking effect (%d handoffs meanwhile)", err, handoffs)
	}
}

// TestAcquireAcrossOutage: an Acquire started while Redis is down succeeds through
// go-redis's retries once Redis is back. Its validity is measured from the first send,
// so when the outage outlasted the TTL, Acquire returns a lease whose validity deadline
// has already passed: it is lost the moment it is handed out (M2), after the caller's
// work may have started under a context that was not yet cancelled.
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

// TestLeaseContextDuringRelease: Release stops the validity timer, then calls Redis, and
// cancels the lease's context only when that call returns. With Redis stalled, the
// context stays alive past the validity deadline for up to ReleaseTimeout, so goroutines
// the work started under it keep running unprotected (M2).
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

// TestReentryBehindLocalWaiters: an owner holds a lock through one Locker (service A)
// and reenters it through another (service B, reached with the owner's signed token),
// while B has a request of another owner waiting for that lock. The reentry queues behind
// B's waiter, which waits for the lock the reentering owner holds: neither moves until
// the reentry's deadline, and it then fails with ErrLocked after 0 attempts — a
// reentrant acquisition reported as busy, the cross-service deadlock that owner
// propagation exists to prevent. (Since waiters queue behind the process's waiters
// instead of barging.)
func TestReentryBehindLocalWaiters(t *testing.T) {
	srv := redistest.Start(t)
	a := warmLocker(t, srv.Client(t))
	b := warmLocker(t, srv.Client(t))
	ctx, owner := ctxid.Ensure(context.Background())
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

	rctx, rcancel := context.WithTimeout(ctxid.NewContext(context.Background(), owner), 2*time.Second)
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

// TestReleaseDeadlineWithoutContextTimeout: on a client built without
// ContextTimeoutEnabled, a release on a stalled Redis lasts the client's read timeout
// (1s here) instead of ReleaseTimeout (300ms); Acquire on the same client returns at its
// deadline. (A release once returned at its deadline on such clients too.)
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
