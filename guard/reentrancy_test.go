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
	mustRelease(t, mustAcquire(t, l, ctx, "warm-up")) // load the scripts: EVALSHA then hits

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
	if tok, ok := guard.TokenFromContext(inner.Context()); !ok || tok != outer.Token() {
		t.Fatalf("TokenFromContext = %d, %v", tok, ok)
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

// TestReentrancyAcrossLockers: a second Locker (another process) with the same owner ID
// reenters through Redis, and its release does not free the first one's hold.
func TestReentrancyAcrossLockers(t *testing.T) {
	srv := redistest.Start(t)
	a, c := newLocker(t, srv)
	b, _ := newLocker(t, srv)
	third, _ := newLocker(t, srv)
	ctx, owner := ctxid.Ensure(ctxTimeout(t, 10*time.Second))

	la := mustAcquire(t, a, ctx, "account:2")
	lb := mustAcquire(t, b, ctxid.NewContext(context.Background(), owner), "account:2")
	if !lb.Reentrant() || lb.Token() != la.Token() {
		t.Fatalf("downstream lease: reentrant %v, token %d, want true and %d", lb.Reentrant(), lb.Token(), la.Token())
	}
	if n, _ := c.HGet(ctx, lockName("account:2"), string(owner)).Int(); n != 2 {
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

// TestSameOwnerConcurrentAcquire: goroutines of one request acquiring the same key at once
// share one Redis acquisition.
func TestSameOwnerConcurrentAcquire(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	other, _ := newLocker(t, srv)
	ctx, owner := ctxid.Ensure(ctxTimeout(t, 10*time.Second))
	blocker := mustAcquire(t, other, context.Background(), "shared")

	leases := make(chan *guard.Lease, 8)
	for range 8 {
		go func() {
			le, err := l.Acquire(ctx, "shared")
			if err != nil {
				t.Errorf("Acquire: %v", err)
			}
			leases <- le
		}()
	}
	time.Sleep(50 * time.Millisecond)
	mustRelease(t, blocker)
	var got []*guard.Lease
	for range 8 {
		if le := <-leases; le != nil {
			got = append(got, le)
		}
	}
	if len(got) != 8 {
		t.FailNow()
	}
	if n, _ := c.HGet(ctx, lockName("shared"), string(owner)).Int(); n != 1 {
		t.Fatalf("Redis hold count = %d, want 1 (one acquisition shared by the goroutines)", n)
	}
	for _, le := range got {
		if le.Token() != got[0].Token() {
			t.Fatalf("tokens differ: %d vs %d", le.Token(), got[0].Token())
		}
		mustRelease(t, le)
	}
	if n, _ := c.Exists(ctx, lockName("shared")).Result(); n != 0 {
		t.Fatal("lock left in Redis after every hold was released")
	}
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
	if id, _ := ctxid.FromContext(bound); id != owner || ctxid.HopsFromContext(bound) != 3 {
		t.Fatalf("bound context: owner %v hops %d, want %v and 3", id, ctxid.HopsFromContext(bound), owner)
	}
	other, cancel2 := le.Bind(context.Background())
	defer cancel2()
	if id, _ := ctxid.FromContext(other); id != owner {
		t.Fatalf("Bind on a context without an owner: owner %v", id)
	}
}
