package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

func TestAcquireRelease(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)

	le := mustAcquire(t, l, ctx, "order:1")
	if le.Token() <= 0 || le.Reentrant() || le.Key() != "order:1" || le.Err() != nil {
		t.Fatalf("lease: token %d reentrant %v key %q err %v", le.Token(), le.Reentrant(), le.Key(), le.Err())
	}
	if n := holdCount(t, c, "order:1", string(le.Owner())); n != 1 {
		t.Fatalf("hold count in Redis = %d, want 1", n)
	}
	_, err := l.TryAcquire(context.Background(), "order:1")
	var le2 *guard.LockedError
	if !errors.As(err, &le2) || !errors.Is(err, guard.ErrLocked) || le2.RetryAfter <= 0 || le2.Attempts != 1 {
		t.Fatalf("TryAcquire by another owner: %v (%+v)", err, le2)
	}
	mustRelease(t, le)
	if le.Context().Err() == nil || !errors.Is(context.Cause(le.Context()), guard.ErrReleased) {
		t.Fatalf("lease context after release: %v / %v", le.Context().Err(), context.Cause(le.Context()))
	}
	if lockHolder(t, c, lockName("order:1")) != "" {
		t.Fatalf("lock still in Redis after release")
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("second Release = %v, want the first result (nil)", err)
	}
}
