package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestRenewalKeepsLock holds a 500ms lease for over 5×TTL, then checks that no renewal is
// sent after release and that the watchdog goroutine is gone.
func TestRenewalKeepsLock(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(t, c, guard.TTL(500*time.Millisecond))
	other, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	before := goleak.IgnoreCurrent()

	le := mustAcquire(t, l, ctx, "long-job")
	counter.Reset()
	end := time.Now().Add(2600 * time.Millisecond)
	for time.Now().Before(end) {
		if le.Err() != nil {
			t.Fatalf("lease ended while work ran: %v", le.Err())
		}
		if _, err := other.TryAcquire(context.Background(), "long-job"); !errors.Is(err, guard.ErrLocked) {
			t.Fatalf("lock not held while work ran: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := counter.Calls("evalsha"); n < 5 {
		t.Fatalf("%d renewals in 2.6s with TTL 500ms, want ≥ 5", n)
	}
	mustRelease(t, le)
	counter.Reset()
	time.Sleep(time.Second)
	if n := counter.RoundTrips(); n != 0 {
		t.Fatalf("%d round trips after release, want 0", n)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines left after release: %v", err)
	}
}

// lostAfter acquires key with a short TTL, runs fault, and checks that the lease
// context ends with ErrLeaseLost, reporting when relative to the validity deadline.
func lostAfter(t *testing.T, l *guard.Locker, key string, fault func()) (lostAt, validUntil time.Time) {
	t.Helper()
	le := mustAcquire(t, l, ctxTimeout(t, 10*time.Second), key)
	noticed := make(chan time.Time, 1)
	context.AfterFunc(le.Context(), func() { noticed <- time.Now() })
	fault()
	validUntil = le.ValidUntil()
	select {
	case lostAt = <-noticed:
	case <-time.After(5 * time.Second):
		t.Fatalf("lease context not cancelled 5s after the fault")
	}
	cause := context.Cause(le.Context())
	var lost *guard.LeaseLostError
	if !errors.Is(cause, guard.ErrLeaseLost) || !errors.As(cause, &lost) || lost.Key != key {
		t.Fatalf("cause = %v, want a *LeaseLostError for %q", cause, key)
	}
	if err := le.Release(context.Background()); !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("Release of a lost lease = %v, want ErrLeaseLost", err)
	}
	return lostAt, validUntil
}

func TestLeaseLostWhenKeyDeleted(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv, guard.TTL(time.Second))
	lostAt, valid := lostAfter(t, l, "del-me", func() {
		c.Del(context.Background(), lockName("del-me"))
	})
	if !lostAt.Before(valid) {
		t.Fatalf("loss noticed %s after the validity deadline", lostAt.Sub(valid))
	}
}

func TestLeaseLostWhenTakenByOther(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv, guard.TTL(time.Second))
	lostAt, valid := lostAfter(t, l, "stolen", func() {
		c.Del(context.Background(), lockName("stolen"))
		until := time.Now().Add(time.Hour).UnixMilli()
		c.HSet(context.Background(), lockName("stolen"), "#v", "5", "#o", "intruder", "#e", until, "#n", 1, "#t", 1)
	})
	if !lostAt.Before(valid) {
		t.Fatalf("loss noticed %s after the validity deadline", lostAt.Sub(valid))
	}
}

func TestLeaseLostWhenRedisRestarts(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv, guard.TTL(3*time.Second))
	lostAt, valid := lostAfter(t, l, "restart", func() { srv.Restart(t) })
	if !lostAt.Before(valid) {
		t.Fatalf("loss noticed %s after the validity deadline", lostAt.Sub(valid))
	}
}

// TestLeaseLostWhenRedisPaused: with Redis stopped longer than the TTL, the validity clock
// alone ends the lease, no later than its deadline (plus scheduling slack).
func TestLeaseLostWhenRedisPaused(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv, guard.TTL(400*time.Millisecond))
	lostAt, valid := lostAfter(t, l, "paused", func() { srv.Pause(t) })
	srv.Resume(t)
	if late := lostAt.Sub(valid); late > 50*time.Millisecond {
		t.Fatalf("loss noticed %s after the validity deadline", late)
	}
}

func TestMaxHold(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv, guard.TTL(time.Second))
	start := time.Now()
	le := mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "capped", guard.MaxHold(300*time.Millisecond))
	waitEnded(t, le.Context(), 30*time.Second, "MaxHold(300ms) reached")
	var lost *guard.LeaseLostError
	if !errors.As(context.Cause(le.Context()), &lost) || lost.Reason != "hold time limit reached" {
		t.Fatalf("cause = %v", context.Cause(le.Context()))
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("lease ended after %s, before MaxHold", d)
	}
	_ = le.Release(context.Background())
}

// TestCancelledRequestStillReleases: Release ignores the caller's cancellation.
func TestCancelledRequestStillReleases(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	le := mustAcquire(t, l, ctx, "req")
	cancel()
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release with a cancelled context: %v", err)
	}
	if h := lockHolder(t, c, lockName("req")); h != "" {
		t.Fatal("lock left held in Redis")
	}
	if le.Context().Err() == nil {
		t.Fatal("lease context alive after release")
	}
}

func TestCloseLosesHeldLeases(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l, err := guard.New(c)
	if err != nil {
		t.Fatal(err)
	}
	le := mustAcquire(t, l, context.Background(), "closing")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(le.Err(), guard.ErrLeaseLost) {
		t.Fatalf("lease after Close: %v", le.Err())
	}
	if _, err := l.Acquire(context.Background(), "x"); !errors.Is(err, guard.ErrClosed) {
		t.Fatalf("Acquire after Close = %v, want ErrClosed", err)
	}
	_ = le.Release(context.Background())
}
