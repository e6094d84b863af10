package guard_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestRetryHint: a busy lock's RetryAfter is the holder's TTL left until a hold of the
// key or of its name has ended, then the mean hold time, never more than the holder's
// TTL left; the hold times of at most 1024 keys are kept, however many keys are locked.
func TestRetryHint(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv, guard.TTL(10*time.Second))
	ctx := context.Background()
	busyHint := func(key string, opts ...guard.Option) time.Duration {
		t.Helper()
		le, err := locker.TryAcquire(ctx, key, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer le.Release(ctx)
		_, err = locker.TryAcquire(ctx, key, opts...)
		var locked *guard.LockedError
		if !errors.As(err, &locked) {
			t.Fatalf("second TryAcquire of %q: %v, want a *guard.LockedError", key, err)
		}
		return locked.RetryAfter
	}
	if d := busyHint("hint:cold"); d < 9*time.Second || d > 10*time.Second {
		t.Fatalf("cold hint %s, want the holder's TTL left (≤ 10s)", d)
	}

	// Holds of key "hint:a" last about 20ms: the hint follows them.
	for range 4 {
		le, err := locker.Acquire(ctx, "hint:a")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if err := le.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if d := busyHint("hint:a"); d < 20*time.Millisecond || d > 5*time.Second {
		t.Fatalf("hint after holds of 20ms: %s, want about 20ms", d)
	}
	// A key never held, under a name whose holds were seen: the name's mean.
	named := guard.Name("hints")
	le, err := locker.Acquire(ctx, "hint:n1", named)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_ = le.Release(ctx)
	if d := busyHint("hint:n2", named); d < 20*time.Millisecond || d > 5*time.Second {
		t.Fatalf("hint of a new key of a known name: %s, want about 20ms", d)
	}

	// Bounded: 1100 keys leave at most 1024 remembered.
	for i := range 1100 {
		le, err := locker.Acquire(ctx, "hint:many:"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		_ = le.Release(ctx)
	}
	if keys, names := guard.HintsKept(locker); keys != 1024 || names > 256 {
		t.Fatalf("hold times kept for %d keys and %d names, want 1024 and at most 256", keys, names)
	}
}

// TestRetryHintFromHoldAge: after many fast holds of a key, a caller refused 0.5 s into
// a long hold is not told to come back in milliseconds: the hint is at least half the
// current hold's age (≥ 125 ms is what a client that obeys it needs not to hammer the
// server), and never above the holder's TTL left.
func TestRetryHintFromHoldAge(t *testing.T) {
	srv := redistest.Start(t)
	holder, _ := newLocker(t, srv)
	waiter, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	for range 20 { // fast holds, seen by the waiter's Locker
		le := mustAcquire(t, waiter, ctx, "hint:age")
		mustRelease(t, le)
	}
	le := mustAcquire(t, holder, ctx, "hint:age")
	defer mustRelease(t, le)
	time.Sleep(500 * time.Millisecond)
	_, err := waiter.TryAcquire(ctx, "hint:age")
	var locked *guard.LockedError
	if !errors.As(err, &locked) {
		t.Fatalf("TryAcquire of a held lock: %v, want a *guard.LockedError", err)
	}
	if locked.RetryAfter < 125*time.Millisecond || locked.RetryAfter > 30*time.Second {
		t.Fatalf("hint 0.5 s into a hold, after fast holds: %s, want ≥ 125ms and ≤ the TTL left", locked.RetryAfter)
	}
}
