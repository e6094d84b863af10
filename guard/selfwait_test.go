package guard_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSelfWaitNamed: by-hand code that acquires a lock twice with the same ctx — the
// second call a sibling section of the first, which waits for it — is told so: one WARN
// naming both sections and the fix, and an error that says "held by another section of
// this request" instead of "another owner". The nested call through the lease's context
// reenters at once. A wait for a lock held by another request says "another owner".
func TestSelfWaitNamed(t *testing.T) {
	var logs syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer slog.SetDefault(prev)

	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	le := mustAcquire(t, l, ctx, "self")
	defer mustRelease(t, le)

	nested := mustAcquire(t, l, le.Context(), "self")
	if !nested.Reentrant() {
		t.Fatal("the nested call through the lease's context did not reenter")
	}
	mustRelease(t, nested)

	_, err := l.Acquire(ctx, "self", guard.Retry(guard.MaxWait(2500*time.Millisecond, nil)))
	if !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("second Acquire with the same ctx = %v, want ErrLocked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "another section of this request") || !strings.Contains(msg, le.Owner().String()) {
		t.Fatalf("error %q does not say that a section of this request (%s) holds the lock", msg, le.Owner())
	}
	out := logs.String()
	if n := strings.Count(out, "another section of this request"); n != 1 {
		t.Fatalf("%d WARNs about the self-wait, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "holder="+le.Owner().String()) || !strings.Contains(out, "Context()") {
		t.Fatalf("the WARN does not name the holding section and the fix:\n%s", out)
	}

	// Another request's wait is not a self-wait.
	_, err = l.Acquire(context.Background(), "self", guard.Retry(guard.MaxWait(1500*time.Millisecond, nil)))
	if !errors.Is(err, guard.ErrLocked) || strings.Contains(err.Error(), "section of this request") {
		t.Fatalf("another request's Acquire = %v, want ErrLocked blaming another owner", err)
	}
}
