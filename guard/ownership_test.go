package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestReleaseAfterTakeoverKeepsNewHolder: a lease whose lock was taken from it (an
// operator's ForceRelease, then another owner's Acquire) and that has not yet heard of
// it releases nothing of the new holder's: its Release reports the lock held by someone
// else, and the new holder keeps the lock.
func TestReleaseAfterTakeoverKeepsNewHolder(t *testing.T) {
	srv := redistest.Start(t)
	// Renewals a third of a minute apart: the old lease does not learn of the takeover
	// before its Release runs.
	l, c := newLocker(t, srv, guard.TTL(time.Minute))
	other, _ := newLocker(t, srv, guard.TTL(time.Minute))
	ctx := ctxTimeout(t, 30*time.Second)
	old := mustAcquire(t, l, ctx, "taken")
	if _, err := l.ForceRelease(ctx, "taken"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	next := mustAcquire(t, other, ctx, "taken")
	defer mustRelease(t, next)

	err := old.Release(ctx)
	if !errors.Is(err, guard.ErrNotHeld) && !errors.Is(err, guard.ErrLeaseLost) {
		t.Errorf("the former holder's Release = %v, want ErrNotHeld (or ErrLeaseLost had it heard of the loss)", err)
	}
	if lockHolder(t, c, lockName("taken")) != string(next.Owner()) {
		t.Fatal("the former holder's Release freed the new holder's lock in Redis")
	}
	if le, err := l.TryAcquire(ctx, "taken"); !errors.Is(err, guard.ErrLocked) {
		if le != nil {
			_ = le.Release(ctx)
		}
		t.Fatalf("TryAcquire while the new holder holds the lock = %v, want ErrLocked", err)
	}
}

// TestRenewalAfterTakeoverLeavesNewHolder: a lease whose lock was taken from it learns
// of the loss at its next renewal, and that renewal leaves the new holder's lock as it
// was: its TTL is not reset to the old lease's.
func TestRenewalAfterTakeoverLeavesNewHolder(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv, guard.TTL(3*time.Second), guard.Renewal(100*time.Millisecond, 0))
	other, _ := newLocker(t, srv, guard.TTL(time.Hour))
	ctx := ctxTimeout(t, 60*time.Second)
	old := mustAcquire(t, l, ctx, "renewed")
	defer func() { _ = old.Release(ctx) }()
	if _, err := l.ForceRelease(ctx, "renewed"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	next := mustAcquire(t, other, ctx, "renewed")
	defer mustRelease(t, next)

	// Wait for the old lease's loss (or long enough for many renewals), then look at the
	// new holder's lock before saying which went wrong.
	select {
	case <-old.Context().Done():
	case <-time.After(20 * time.Second):
	}
	if left := leaseLeft(t, c, "renewed"); left < 59*time.Minute {
		t.Fatalf("the new holder's lease has %s left in Redis, want about 1h: a renewal of the former holder reset it", left)
	}
	if !errors.Is(context.Cause(old.Context()), guard.ErrLeaseLost) {
		t.Fatalf("the former holder's lease was not lost within 20s of renewals every 100ms after another owner took its lock (cause %v)", context.Cause(old.Context()))
	}
}

// TestValidityWithinRedisExpiry: a lease never claims validity past the moment Redis
// expires its lock, after the acquisition or after any renewal: ValidUntil is at most
// the time its hold has left in Redis (#e), from now.
func TestValidityWithinRedisExpiry(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 3 * time.Second
	l, c := newLocker(t, srv, guard.TTL(ttl), guard.Renewal(200*time.Millisecond, 0))
	ctx := ctxTimeout(t, 60*time.Second)
	le := mustAcquire(t, l, ctx, "valid")
	defer mustRelease(t, le)

	check := func(when string) time.Time {
		t.Helper()
		vu := le.ValidUntil()
		pttl := leaseLeft(t, c, "valid")
		now := time.Now()
		// The lease left is counted in whole milliseconds of the server clock: 2ms cover
		// the rounding.
		if expiry := now.Add(pttl + 2*time.Millisecond); vu.After(expiry) {
			t.Fatalf("%s: ValidUntil is %s after Redis expires the lock (lease left %s, TTL %s)", when, vu.Sub(expiry), pttl, ttl)
		}
		if limit := now.Add(ttl); vu.After(limit) {
			t.Fatalf("%s: ValidUntil is %s beyond now + TTL", when, vu.Sub(limit))
		}
		return vu
	}
	first := check("after acquire")
	for i := range 3 {
		prev := le.ValidUntil()
		waitUntil(t, 20*time.Second, "a renewal to move ValidUntil", func() bool { return le.ValidUntil().After(prev) })
		check("after renewal " + string(rune('1'+i)))
	}
	if !le.ValidUntil().After(first) {
		t.Fatal("ValidUntil never moved")
	}
}

// TestReentryWithShorterTTLKeepsLock: a hold reentered through a Locker with a shorter
// TTL (a downstream service configured differently) and released again leaves the lock
// held for as long as the outer lease is valid: the reentry and its renewals never
// shorten the lock's life in Redis below the outer lease's, for every kind.
func TestReentryWithShorterTTLKeepsLock(t *testing.T) {
	srv := redistest.Start(t)
	short := 300 * time.Millisecond
	for _, tc := range []struct {
		name         string
		outer, other []guard.Option
	}{
		{"exclusive", nil, nil},
		{"read", []guard.Option{guard.Read()}, []guard.Option{guard.Write()}},
		{"write", []guard.Option{guard.Write()}, []guard.Option{guard.Write()}},
		{"semaphore", []guard.Option{guard.Permits(1)}, []guard.Option{guard.Permits(1)}},
		{"fair", []guard.Option{guard.Fair()}, []guard.Option{guard.Fair()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			long, _ := newLocker(t, srv, guard.TTL(time.Minute))
			downstream, _ := newLocker(t, srv, guard.TTL(short))
			other, _ := newLocker(t, srv)
			ctx := ctxTimeout(t, 60*time.Second)
			key := "mixed-ttl-" + tc.name
			outer := mustAcquire(t, long, ctx, key, tc.outer...)
			defer mustRelease(t, outer)
			in := mustAcquire(t, downstream, ctxid.NewContext(ctx, outer.Owner()), key, tc.outer...)
			if !in.Reentrant() {
				t.Fatal("the downstream acquisition did not reenter")
			}
			time.Sleep(2 * short) // the downstream Locker renews its hold with its short TTL
			mustRelease(t, in)
			time.Sleep(2 * short) // past the short TTL after the downstream hold ended
			if outer.Err() != nil {
				t.Fatalf("outer lease: %v", outer.Err())
			}
			if le, err := other.TryAcquire(ctx, key, tc.other...); !errors.Is(err, guard.ErrLocked) {
				if le != nil {
					_ = le.Release(ctx)
				}
				t.Fatalf("another owner's TryAcquire while the outer lease (TTL 1m) is valid = %v, want ErrLocked: the downstream Locker's TTL (%s) shortened the lock", err, short)
			}
		})
	}
}
