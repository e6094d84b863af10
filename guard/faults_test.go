package guard_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestErrReadsDeadline: a holder process stopped (SIGSTOP) past its lease's validity is
// told the lease is lost by the first thing it asks on resuming — Err and its lease
// Context — before its validity timer has had a chance to run.
func TestErrReadsDeadline(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 500 * time.Millisecond
	h := startHolder(t, srv, "frozen", holderSpec{TTL: ttl, Freeze: true})
	h.await(t, 10*time.Second)
	line := func(what string) string {
		select {
		case l := <-h.lines:
			return l
		case <-time.After(10 * time.Second):
			_ = h.cmd.Process.Signal(syscall.SIGQUIT)
			time.Sleep(time.Second)
			t.Fatalf("the holder did not say %q", what)
			return ""
		}
	}
	if l := line("spinning"); l != "spinning" {
		t.Fatalf("holder said %q, want spinning", l)
	}
	pid := h.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl) // well past the validity, and the TTL in Redis
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if l := line("resumed"); l != "resumed lost=true ctx=true" {
		t.Fatalf("after resuming past its validity the holder said %q, want the lease lost in Err and in its Context", l)
	}
}

// TestWrapLateReleaseIsNotLost: fn returns with validity to spare, and then Redis stalls
// so that the release is answered after the lease's validity — or not at all within
// ReleaseTimeout. The lock was held while fn ran: the call's error is a *ReleaseError
// (ErrExpired, ErrUnavailable), never ErrLeaseLost, and fn's own error stays in it.
func TestWrapLateReleaseIsNotLost(t *testing.T) {
	const ttl = 600 * time.Millisecond
	fnErr := errors.New("fn's own error")
	for _, tc := range []struct {
		name    string
		stall   time.Duration
		want    error
		returns error
	}{
		{"answered late", 2 * ttl, guard.ErrExpired, nil},
		{"answered late, fn failed", 2 * ttl, guard.ErrExpired, fnErr},
		{"not answered in time", 4 * ttl, guard.ErrUnavailable, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled, o.ReadTimeout = true, 10*time.Second })
			l := lockerOn(t, c, guard.TTL(ttl), guard.ReleaseTimeout(3*ttl))
			resumed := make(chan struct{})
			err := guard.Do(ctxTimeout(t, 10*time.Second), func(ctx context.Context) error {
				srv.Pause(t)
				go func() {
					defer close(resumed)
					time.Sleep(tc.stall)
					srv.Resume(t)
				}()
				return tc.returns
			}, guard.Use(l), guard.RawKey("late"))
			<-resumed
			var re *guard.ReleaseError
			if errors.Is(err, guard.ErrLeaseLost) || !errors.As(err, &re) || !errors.Is(err, tc.want) {
				t.Fatalf("Do = %v, want a *ReleaseError matching %v and not ErrLeaseLost", err, tc.want)
			}
			if tc.returns != nil && !errors.Is(err, tc.returns) {
				t.Fatalf("Do = %v, want fn's error in the chain", err)
			}
		})
	}
}

// TestAcquireUnansweredIsUnavailable: an acquisition whose context ends while Redis does
// not answer fails with ErrUnavailable, with the context's error in the chain — for a
// client that gives up at the deadline and for one that does not.
func TestAcquireUnansweredIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	for _, deadlines := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%t", deadlines), func(t *testing.T) {
			c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = deadlines })
			l := lockerOn(t, c)
			mustRelease(t, mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "warm-up"))
			srv.Pause(t)
			defer srv.Resume(t)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := l.Acquire(ctx, "unanswered")
			var re *guard.RedisError
			if !errors.Is(err, guard.ErrUnavailable) || !errors.As(err, &re) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, guard.ErrLocked) {
				t.Fatalf("Acquire on a stalled Redis = %v, want a *RedisError (ErrUnavailable) with context.DeadlineExceeded in its chain", err)
			}
		})
	}
}

// TestWaitOutages: a waiter with budget waits out a Redis that refuses connections and
// is granted once it is back; TryAcquire and WaitOutages(false) fail at once with
// ErrUnavailable; a budget that runs out during the outage ends with ErrUnavailable.
func TestWaitOutages(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	l := lockerOn(t, c)
	ctx := ctxTimeout(t, 30*time.Second)
	mustRelease(t, mustAcquire(t, l, ctx, "warm-up"))
	srv.Kill(t)
	backoff := guard.Fixed(50*time.Millisecond, 0)

	for name, call := range map[string]func() error{
		"TryAcquire": func() error { return second(l.TryAcquire(ctx, "down")) },
		"WaitOutages(false)": func() error {
			return second(l.Acquire(ctx, "down", guard.WaitOutages(false), guard.Retry(guard.MaxWait(time.Minute, backoff))))
		},
		"MaxWait(300ms)": func() error {
			return second(l.Acquire(ctx, "down", guard.Retry(guard.MaxWait(300*time.Millisecond, backoff))))
		},
	} {
		err := call()
		var re *guard.RedisError
		if !errors.Is(err, guard.ErrUnavailable) || !errors.As(err, &re) || ctx.Err() != nil {
			t.Fatalf("%s with Redis down = %v, want a *RedisError (ErrUnavailable)", name, err)
		}
	}

	out := make(chan waitOutcome, 1)
	go func() {
		le, err := l.Acquire(ctx, "down", guard.Retry(guard.MaxWait(20*time.Second, backoff)))
		out <- waitOutcome{le, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // several refused attempts
	srv.Restart(t)
	back := time.Now()
	o := <-out
	if o.err != nil {
		t.Fatalf("a waiter with budget left gave up during the outage: %v", o.err)
	}
	t.Logf("granted %s after Redis came back", o.at.Sub(back))
	mustRelease(t, o.lease)
}

// TestDistinctKeysLeaveNothing: locks on distinct keys (keys from requests: order ids,
// account ids) leave nothing in Redis once their hash has outlived the lease it was
// granted for and the fence retention after the release, so that memory follows what was
// held lately, not every key ever locked. GUARDKIT_DISTINCT_KEYS sets how many (default
// 5,000); the numbers are logged.
func TestDistinctKeysLeaveNothing(t *testing.T) {
	n := envInt("GUARDKIT_DISTINCT_KEYS", 5000)
	srv := redistest.Start(t)
	const ttl, retention = 2 * time.Second, time.Second
	l, c := newLocker(t, srv, guard.TTL(ttl), guard.FenceRetention(retention))
	ctx := ctxTimeout(t, 10*time.Minute)
	base := srv.Stat(t, "used_memory")
	start := time.Now()
	parallel(t, n, func(i int) error {
		le, err := l.TryAcquire(ctx, fmt.Sprintf("order:%d", i))
		if err == nil {
			err = le.Release(ctx)
		}
		return err
	})
	took := time.Since(start)
	size, used := c.DBSize(ctx).Val(), srv.Stat(t, "used_memory")
	t.Logf("%d distinct keys locked and released in %s: DBSIZE %d, used_memory +%d B (%d B a key) right after",
		n, took.Round(time.Millisecond), size, used-base, (used-base)/max(int64(n), 1))
	if size > int64(n) {
		t.Fatalf("DBSIZE %d after %d distinct keys: more than one record a key", size, n)
	}
	waitUntil(t, max(ttl, retention)+15*time.Second, "the fence records' expiry", func() bool { return c.DBSize(ctx).Val() == 0 })
	t.Logf("DBSIZE 0 and used_memory +%d B %s after the last release (TTL %s, FenceRetention %s)",
		srv.Stat(t, "used_memory")-base, (time.Since(start) - took).Round(time.Millisecond), ttl, retention)
}
