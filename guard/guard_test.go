package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestGuardRun: a Guard runs fn under the lock of the key given at each call, reports a
// busy lock without running fn, and lets fn's own error through unchanged.
func TestGuardRun(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	g, err := guard.NewGuard(guard.Use(l), guard.Retry(guard.NoRetry()), guard.TTL(5*time.Second))
	if err != nil {
		t.Fatalf("NewGuard: %v", err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	mine := errors.New("the work failed")
	err = g.Run(ctx, "job:1", func(ctx context.Context) error {
		le, ok := guard.LeaseFromContext(ctx)
		if !ok || le.Key() != "job:1" {
			t.Errorf("fn's context carries lease %v (%v), want one on job:1", le, ok)
		}
		if pttl := srv.Client(t).PTTL(ctx, lockName("job:1")).Val(); pttl <= 0 || pttl > 5*time.Second {
			t.Errorf("lock TTL %s in Redis, want the Guard's 5s", pttl)
		}
		// Held: another owner's Run is refused at once, without running its fn.
		err := g.Run(context.Background(), "job:1", func(context.Context) error {
			t.Error("fn ran while another owner held the lock")
			return nil
		})
		if !errors.Is(err, guard.ErrLocked) {
			t.Errorf("Run on a held lock: %v, want ErrLocked", err)
		}
		return mine
	})
	if err != mine {
		t.Fatalf("Run returned %v, want fn's own error unchanged", err)
	}
	if n := srv.Client(t).Exists(ctx, lockName("job:1")).Val(); n != 0 {
		t.Fatalf("lock still in Redis after Run returned")
	}
	if err := g.Run(ctx, "", func(context.Context) error { return nil }); !errors.Is(err, guard.ErrInvalidKey) {
		t.Fatalf("Run with an empty key: %v, want ErrInvalidKey", err)
	}
	var ce *guard.ConfigError
	if err := g.Run(ctx, "job:2", nil); !errors.As(err, &ce) || ce.Field != "fn" {
		t.Fatalf("Run with a nil fn: %v, want a *ConfigError on fn", err)
	}
}

// TestNewGuardRefusesKeys: the key is Run's argument, so NewGuard refuses the key
// options and SkipIf, naming them, and bad options as WrapE does.
func TestNewGuardRefusesKeys(t *testing.T) {
	for field, opt := range map[string]guard.Option{
		"Key":     guard.Key("order:{req.ID}"),
		"RawKey":  guard.RawKey("order:1"),
		"KeyFunc": guard.KeyFunc(func(context.Context, string) (string, error) { return "k", nil }),
		"SkipIf":  guard.SkipIf(func(context.Context, string) bool { return false }),
		"TTL":     guard.TTL(-time.Second),
	} {
		_, err := guard.NewGuard(opt)
		var ce *guard.ConfigError
		if !errors.As(err, &ce) || ce.Field != field || !errors.Is(err, guard.ErrInvalidConfig) {
			t.Errorf("NewGuard(%s): %v, want a *ConfigError naming %s", field, err, field)
		}
	}
}
