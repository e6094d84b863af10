package guard

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

// TestReleaseContext: a release's context keeps the caller's values, not its
// cancellation, ends with context.DeadlineExceeded at ReleaseTimeout and with
// context.Canceled when stopped first, as context.WithTimeout over
// context.WithoutCancel does.
func TestReleaseContext(t *testing.T) {
	l := &Locker{cfg: settings{releaseTimeout: 30 * time.Millisecond}}
	caller, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
	cause := errors.New("the caller's cause")
	cancel(cause) // the caller gave up before releasing

	c := l.releaseCtx(caller)
	defer c.stop()
	if c.Value(ctxKey{}) != "v" {
		t.Fatal("the caller's value is lost")
	}
	if err := c.Err(); err != nil {
		t.Fatalf("Err = %v before the timeout, want nil (the caller's cancellation does not reach it)", err)
	}
	if got := context.Cause(c); got != nil {
		t.Fatalf("context.Cause = %v before the timeout, want nil, not the caller's cause", got)
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) > 30*time.Millisecond {
		t.Fatalf("Deadline = %v, %v; want ReleaseTimeout from now", d, ok)
	}
	// A context made from it ends with it.
	child, stopChild := context.WithCancel(c)
	defer stopChild()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not done 5s after a 30ms timeout")
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, Cause = %v after the timeout; want DeadlineExceeded", c.Err(), context.Cause(c))
	}
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a context made from it did not end with it")
	}
	c.stop() // stopping an ended context changes nothing
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v after stop, want DeadlineExceeded still", c.Err())
	}

	stopped := l.releaseCtx(context.Background())
	stopped.stop()
	select {
	case <-stopped.Done():
	default:
		t.Fatal("not done once stopped")
	}
	if !errors.Is(stopped.Err(), context.Canceled) {
		t.Fatalf("Err = %v once stopped, want Canceled", stopped.Err())
	}
}
