package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestLockerRun: Run runs fn under the lock its options name and reports that fn ran,
// lets fn's own error through unchanged, and reports a busy lock, a bad key or a nil fn
// without running fn.
func TestLockerRun(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	mine := errors.New("the work failed")
	ran, err := l.Run(ctx, func(ctx context.Context) error {
		le, ok := guard.LeaseFromContext(ctx)
		if !ok || le.Key() != "job:1" {
			t.Errorf("fn's context carries lease %v (%v), want one on job:1", le, ok)
		}
		if left := leaseLeft(t, srv.Client(t), "job:1"); left <= 0 || left > 5*time.Second {
			t.Errorf("lease %s left in Redis, want the call's 5s", left)
		}
		// Held: another owner's Run is refused at once, without running its fn.
		ran, err := l.Run(context.Background(), func(context.Context) error {
			t.Error("fn ran while another owner held the lock")
			return nil
		}, guard.RawKey("job:1"), guard.Retry(guard.NoRetry()))
		if ran || !errors.Is(err, guard.ErrLocked) {
			t.Errorf("Run on a held lock: %v, %v, want false, ErrLocked", ran, err)
		}
		return mine
	}, guard.RawKey("job:1"), guard.Retry(guard.NoRetry()), guard.TTL(5*time.Second))
	if !ran || err != mine {
		t.Fatalf("Run returned %v, %v, want true and fn's own error unchanged", ran, err)
	}
	if h := lockHolder(t, srv.Client(t), lockName("job:1")); h != "" {
		t.Fatalf("lock still held in Redis after Run returned, by %s", h)
	}
	if ran, err := l.Run(ctx, func(context.Context) error { return nil }, guard.Key("job:2")); !ran || err != nil {
		t.Fatalf("Run with a Key template without placeholders: %v, %v, want true, nil", ran, err)
	}
	if ran, err := l.Run(ctx, func(context.Context) error { return nil }, guard.RawKey("")); ran || !errors.Is(err, guard.ErrInvalidKey) {
		t.Fatalf("Run with an empty key: %v, %v, want false, ErrInvalidKey", ran, err)
	}
	var ce *guard.ConfigError
	if ran, err := l.Run(ctx, nil, guard.RawKey("job:2")); ran || !errors.As(err, &ce) || ce.Field != "fn" {
		t.Fatalf("Run with a nil fn: %v, %v, want false and a *ConfigError on fn", ran, err)
	}
}

// TestLockerRunRefuses: Run has no request and runs on its own Locker, so it refuses
// KeyFunc, SkipIf, a template with placeholders, a missing key and a Use naming another
// Locker, and bad options as WrapE does, naming each; with a context already done it
// reports them, or else the context's error, without calling Redis.
func TestLockerRunRefuses(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(t, c)
	other, _ := newLocker(t, srv)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	counter.Reset()
	fn := func(context.Context) error {
		t.Error("fn ran")
		return nil
	}
	for _, tc := range []struct {
		field string
		opts  []guard.Option
	}{
		{"Key", []guard.Option{guard.Key("order:{req.ID}")}},
		{"Key", nil},
		{"KeyFunc", []guard.Option{guard.KeyFunc(func(context.Context, string) (string, error) { return "k", nil })}},
		{"SkipIf", []guard.Option{guard.RawKey("k"), guard.SkipIf(func(context.Context, string) bool { return false })}},
		{"Use", []guard.Option{guard.RawKey("k"), guard.Use(other)}},
		{"TTL", []guard.Option{guard.RawKey("k"), guard.TTL(-time.Second)}},
		{"Prefix", []guard.Option{guard.RawKey("k"), guard.Prefix("other:")}},
	} {
		for _, ctx := range []context.Context{context.Background(), done} {
			ran, err := l.Run(ctx, fn, tc.opts...)
			var ce *guard.ConfigError
			if ran || !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, guard.ErrInvalidConfig) {
				t.Errorf("Run(%s): %v, %v, want false and a *ConfigError naming %s", tc.field, ran, err, tc.field)
			}
		}
	}
	if ran, err := l.Run(done, fn, guard.RawKey("")); ran || !errors.Is(err, guard.ErrInvalidKey) {
		t.Errorf("Run(done, empty key): %v, %v, want false, ErrInvalidKey", ran, err)
	}
	if ran, err := l.Run(done, fn, guard.RawKey("k"), guard.Use(l), guard.TTL(time.Second)); ran || !errors.Is(err, context.Canceled) || errors.Is(err, guard.ErrInvalidConfig) {
		t.Errorf("Run(done) with good options: %v, %v, want false and context.Canceled", ran, err)
	}
	if n := counter.Commands(); n != 0 {
		t.Errorf("refused calls made %d Redis calls, want none", n)
	}
}
