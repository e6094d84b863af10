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
