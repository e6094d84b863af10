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

func TestReentrancyInProcess(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(t, c)
	other, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	warmUp(t, l, c, ctx) // load the scripts (EVALSHA then hits) and open the force listening

	outer := mustAcquire(t, l, ctx, "account:1")
	counter.Reset()
	inner := mustAcquire(t, l, outer.Context(), "account:1")
	innermost, err := l.TryAcquire(inner.Context(), "account:1")
	if err != nil {
		t.Fatalf("nested TryAcquire: %v", err)
	}
	if n := counter.RoundTrips(); n != 0 {
		t.Fatalf("nested acquisitions made %d round trips, want 0", n)
	}
	if !inner.Reentrant() || !innermost.Reentrant() || inner.Token() != outer.Token() || inner.Owner() != outer.Owner() {
		t.Fatalf("nested lease: reentrant %v/%v token %d vs %d", inner.Reentrant(), innermost.Reentrant(), inner.Token(), outer.Token())
	}
	if tok, ok := tokenIn(inner.Context()); !ok || tok != outer.Token() {
		t.Fatalf("the token in the inner lease's context = %d, %v", tok, ok)
	}

	// Another owner is excluded, whichever Locker it uses.
	for _, lk := range []*guard.Locker{l, other} {
		if _, err := lk.TryAcquire(context.Background(), "account:1"); !errors.Is(err, guard.ErrLocked) {
			t.Fatalf("other owner TryAcquire = %v, want ErrLocked", err)
		}
	}
	mustRelease(t, innermost)
	mustRelease(t, inner)
	if inner.Context().Err() == nil {
		t.Fatal("inner lease context not ended by its release")
	}
	if outer.Err() != nil {
		t.Fatalf("outer lease ended by an inner release: %v", outer.Err())
	}
	if _, err := other.TryAcquire(context.Background(), "account:1"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("lock free before the outermost release: %v", err)
	}
	counter.Reset()
	mustRelease(t, outer)
	if n := counter.RoundTrips(); n != 1 {
		t.Fatalf("outermost release made %d round trips, want 1", n)
	}
	le := mustAcquire(t, other, ctx, "account:1")
	mustRelease(t, le)
}

// TestReentrancyAcrossLockers: a second Locker (another process) acting within the section
// that holds the lock reenters through Redis, and its release does not free the first
// one's hold.
func TestReentrancyAcrossLockers(t *testing.T) {
	srv := redistest.Start(t)
	a, c := newLocker(t, srv)
	b, _ := newLocker(t, srv)
	third, _ := newLocker(t, srv)
	ctx, _ := ctxid.Ensure(ctxTimeout(t, 10*time.Second))

	la := mustAcquire(t, a, ctx, "account:2")
	section := la.Owner()
	lb := mustAcquire(t, b, ctxid.NewContext(ctxTimeout(t, 10*time.Second), section), "account:2")
	if !lb.Reentrant() || lb.Token() != la.Token() || lb.Owner() != section {
		t.Fatalf("downstream lease: reentrant %v, token %d, owner %q, want true, %d, %q", lb.Reentrant(), lb.Token(), lb.Owner(), la.Token(), section)
	}
	if n := holdCount(t, c, "account:2", string(section)); n != 2 {
		t.Fatalf("Redis hold count = %d, want 2", n)
	}
	mustRelease(t, lb)
	if _, err := third.TryAcquire(context.Background(), "account:2"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("after the downstream release the lock must still be held: %v", err)
	}
	if la.Err() != nil {
		t.Fatalf("upstream lease ended: %v", la.Err())
	}
	mustRelease(t, la)
	le := mustAcquire(t, third, ctx, "account:2")
	mustRelease(t, le)
}

// TestSectionConcurrentAcquire: goroutines started inside one section, each taking a key
// the section does not hold, are sibling sections within it and take turns.
func TestSectionConcurrentAcquire(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx, _ := ctxid.Ensure(ctxTimeout(t, 10*time.Second))
	outer := mustAcquire(t, l, ctx, "outer")
	defer mustRelease(t, outer)

	tokens := make(chan int64, 8)
	for range 8 {
		go func() {
			le, err := l.Acquire(outer.Context(), "shared")
			if err != nil {
				t.Errorf("Acquire: %v", err)
				tokens <- 0
				return
			}
			tokens <- le.Token()
			mustRelease(t, le)
		}()
	}
	// Eight sibling sections within outer took turns: each its own hold and token.
	seen := map[int64]bool{}
	for range 8 {
		seen[<-tokens] = true
	}
	if len(seen) != 8 || seen[0] {
		t.Fatalf("%d distinct tokens, want 8", len(seen))
	}
	waitUntil(t, 5*time.Second, "the last release", func() bool {
		return lockHolder(t, c, lockName("shared")) == ""
	})
}

func TestForkExcludesSiblings(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx, _ := ctxid.Ensure(ctxTimeout(t, 5*time.Second))
	le := mustAcquire(t, l, ctx, "job")
	defer mustRelease(t, le)
	forked, _ := ctxid.Fork(ctx)
	if _, err := l.TryAcquire(forked, "job"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("forked owner TryAcquire = %v, want ErrLocked", err)
	}
}

// TestBindKeepsHops: binding a lease to a context that already carries its owner keeps the
// hop count the owner arrived with, so hop limits hold across guarded calls.
func TestBindKeepsHops(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("0123456789abcdef0123")}})
	if err != nil {
		t.Fatal(err)
	}
	owner := ctxid.New()
	token, err := signer.Sign(owner, 3)
	if err != nil {
		t.Fatal(err)
	}
	ctx, _, err := signer.Accept(context.Background(), token)
	if err != nil || ctxid.HopsFromContext(ctx) != 3 {
		t.Fatalf("Accept: %v, hops %d", err, ctxid.HopsFromContext(ctx))
	}
	le := mustAcquire(t, l, ctx, "hops")
	defer mustRelease(t, le)
	bound, cancel := le.Bind(ctx)
	defer cancel()
	if id, _ := ctxid.FromContext(bound); id != le.Owner() || !id.Within(owner) || ctxid.HopsFromContext(bound) != 3 {
		t.Fatalf("bound context: owner %v hops %d, want %v (within %v) and 3", id, ctxid.HopsFromContext(bound), le.Owner(), owner)
	}
	other, cancel2 := le.Bind(context.Background())
	defer cancel2()
	if id, _ := ctxid.FromContext(other); id != le.Owner() {
		t.Fatalf("Bind on a context without an owner: owner %v", id)
	}
}
