package guard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestSiblingSectionsTakeTurns: goroutines that share only their request's context (the
// errgroup pattern) are sibling sections: they take the lock one at a time, each with a
// fencing token of its own.
func TestSiblingSectionsTakeTurns(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx, root := ctxid.Ensure(ctxTimeout(t, 20*time.Second))

	const n = 5
	var inside, most atomic.Int32
	tokens := make(chan int64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := guard.Do(ctx, func(ctx context.Context) error {
				now := inside.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				tok, _ := tokenIn(ctx)
				if id, _ := ctxid.FromContext(ctx); !id.Within(root) || id == root {
					t.Errorf("section %q is not a section of the request %q", id, root)
				}
				time.Sleep(10 * time.Millisecond) // stay inside while the others try to enter
				inside.Add(-1)
				tokens <- tok
				return nil
			}, guard.Key("batch:nightly"), guard.Use(l))
			if err != nil {
				t.Errorf("Do: %v", err)
			}
		}()
	}
	wg.Wait()
	close(tokens)
	seen := map[int64]bool{}
	for tok := range tokens {
		seen[tok] = true
	}
	if most.Load() != 1 || len(seen) != n {
		t.Fatalf("%d sibling sections inside at once, %d distinct tokens; want 1 and %d", most.Load(), len(seen), n)
	}
}

// TestNestedSectionReenters: a call made with the section's context, in the same goroutine
// or in one the section started, reenters at once with the section's token; a nested
// acquisition of another key is a section within it.
func TestNestedSectionReenters(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(t, c)
	ctx := ctxTimeout(t, 10*time.Second)

	outer := mustAcquire(t, l, ctx, "x")
	waitForceListening(t, c) // opened aside with the first lease: not counted below
	counter.Reset()
	done := make(chan *guard.Lease, 1)
	go func() { // a goroutine started inside the section, with its context
		le, err := l.TryAcquire(outer.Context(), "x")
		if err != nil {
			t.Errorf("TryAcquire inside the section: %v", err)
		}
		done <- le
	}()
	inner := <-done
	if inner == nil {
		t.FailNow()
	}
	if n := counter.RoundTrips(); n != 0 || !inner.Reentrant() || inner.Token() != outer.Token() {
		t.Fatalf("nested: %d round trips, reentrant %v, token %d; want 0, true, %d", n, inner.Reentrant(), inner.Token(), outer.Token())
	}
	y := mustAcquire(t, l, inner.Context(), "y")
	if p, _ := y.Owner().Parent(); p != outer.Owner() {
		t.Fatalf("nested section %q is not directly in %q", y.Owner(), outer.Owner())
	}
	again, err := l.TryAcquire(y.Context(), "x") // from deeper inside: still X's section
	if err != nil || again.Token() != outer.Token() {
		t.Fatalf("TryAcquire x from within y: %v", err)
	}
	for _, le := range []*guard.Lease{again, y, inner, outer} {
		mustRelease(t, le)
	}
}

// TestTokenOpensOnlyItsSection: a token signed inside section X carries X's path, so the
// service that receives it (here another Locker on the same Redis, as another process)
// reenters X, through Redis, and is refused Y, held by a sibling section of the same
// request.
func TestTokenOpensOnlyItsSection(t *testing.T) {
	srv := redistest.Start(t)
	a, c := newLocker(t, srv)
	b, _ := newLocker(t, srv)
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("0123456789abcdef0123")}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := ctxid.Ensure(ctxTimeout(t, 10*time.Second))
	x := mustAcquire(t, a, req, "x")
	y := mustAcquire(t, a, req, "y") // a sibling section of the same request

	tok, ok := signer.Outbound(x.Context())
	if !ok {
		t.Fatal("no token for the section")
	}
	remote, owner, err := signer.Accept(ctxTimeout(t, 10*time.Second), tok)
	if err != nil || owner != x.Owner() {
		t.Fatalf("Accept: %v, owner %q, want %q", err, owner, x.Owner())
	}
	rx, err := b.TryAcquire(remote, "x")
	if err != nil || !rx.Reentrant() || rx.Token() != x.Token() || rx.Owner() != x.Owner() {
		t.Fatalf("remote TryAcquire x = %v (lease %+v), want a reentry of %q with token %d", err, rx, x.Owner(), x.Token())
	}
	if n := holdCount(t, c, "x", string(x.Owner())); n != 2 {
		t.Fatalf("Redis hold count of the section = %d, want 2", n)
	}
	for _, l := range []*guard.Locker{b, a} {
		if _, err := l.TryAcquire(remote, "y"); !errors.Is(err, guard.ErrLocked) {
			t.Fatalf("TryAcquire y with X's token = %v, want ErrLocked", err)
		}
	}
	// Deeper on the remote side: a section within X, then X again from there (the
	// remote Locker's own table now knows X's hold).
	z := mustAcquire(t, b, rx.Context(), "z")
	rx2, err := b.TryAcquire(z.Context(), "x")
	if err != nil || rx2.Token() != x.Token() {
		t.Fatalf("TryAcquire x from a section within it: %v", err)
	}
	for _, le := range []*guard.Lease{rx2, z, rx} {
		mustRelease(t, le)
	}
	if _, err := b.TryAcquire(context.Background(), "x"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("x free before its section released it: %v", err)
	}
	mustRelease(t, y)
	mustRelease(t, x)
	mustRelease(t, mustAcquire(t, b, req, "x"))
}

// TestSectionsAndKinds: a read nested in the write section reenters it (a downgrade, as
// for one owner), a sibling section's read waits for the writer, and a semaphore's permit
// is reentered by a section within its holder without taking a second one.
func TestSectionsAndKinds(t *testing.T) {
	srv := redistest.Start(t)
	a, _ := newLocker(t, srv)
	b, _ := newLocker(t, srv)
	req, _ := ctxid.Ensure(ctxTimeout(t, 10*time.Second))

	w := mustAcquire(t, a, req, "doc", guard.Write())
	r := mustAcquire(t, b, w.Context(), "doc", guard.Read()) // through Redis
	if _, err := b.TryAcquire(req, "doc", guard.Read()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("sibling read under the writer = %v, want ErrLocked", err)
	}
	mustRelease(t, r)
	mustRelease(t, w)

	p := mustAcquire(t, a, req, "pool", guard.Permits(2))
	in := mustAcquire(t, b, p.Context(), "pool", guard.Permits(2))
	if !in.Reentrant() || in.Owner() != p.Owner() {
		t.Fatalf("permit within its holder's section: reentrant %v owner %q", in.Reentrant(), in.Owner())
	}
	second := mustAcquire(t, b, req, "pool", guard.Permits(2)) // a sibling takes the other permit
	if _, err := a.TryAcquire(req, "pool", guard.Permits(2)); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("third section = %v, want ErrLocked (2 permits)", err)
	}
	for _, le := range []*guard.Lease{second, in, p} {
		mustRelease(t, le)
	}
}

// TestSectionDepthLimit: sections nest ctxid.MaxDepth deep; an acquisition that would
// need a deeper one fails with ctxid.ErrTooDeep.
func TestSectionDepthLimit(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx, _ := ctxid.Ensure(ctxTimeout(t, 10*time.Second))
	var leases []*guard.Lease
	for i := range ctxid.MaxDepth {
		le := mustAcquire(t, l, ctx, "depth:"+string(rune('a'+i)))
		leases = append(leases, le)
		ctx = le.Context()
	}
	if _, err := l.TryAcquire(ctx, "depth:deepest"); !errors.Is(err, ctxid.ErrTooDeep) {
		t.Fatalf("acquisition past MaxDepth = %v, want ctxid.ErrTooDeep", err)
	}
	if _, err := l.TryAcquire(ctx, "depth:a"); err != nil { // reentry needs no new section
		t.Fatalf("reentry at MaxDepth: %v", err)
	}
	for i := len(leases) - 1; i >= 0; i-- {
		_ = leases[i].Release(context.Background())
	}
}

// TestQuorumSections: on a quorum Locker too, a second process acting inside the section
// that holds a lock reenters it with its token (exclusive and read-write), its release
// leaves the section's hold in place, and a sibling section is refused.
func TestQuorumSections(t *testing.T) {
	r := startQuorum(t, 3, false)
	a, b := r.locker(t, guard.RestartDelay(0)), r.locker(t, guard.RestartDelay(0))
	req, _ := ctxid.Ensure(ctxTimeout(t, 10*time.Second))
	for _, kind := range []guard.Option{guard.TTL(30 * time.Second), guard.Write()} {
		x := mustAcquire(t, a, req, "q", kind)
		in, err := b.TryAcquire(ctxid.NewContext(req, x.Owner()), "q", kind)
		if err != nil || !in.Reentrant() || in.Token() != x.Token() || in.Owner() != x.Owner() {
			t.Fatalf("reentry through the quorum: %v", err)
		}
		if _, err := b.TryAcquire(req, "q", kind); !errors.Is(err, guard.ErrLocked) {
			t.Fatalf("sibling section = %v, want ErrLocked", err)
		}
		mustRelease(t, in)
		if _, err := b.TryAcquire(context.Background(), "q", kind); !errors.Is(err, guard.ErrLocked) {
			t.Fatalf("free after the reentrant release: %v", err)
		}
		if x.Err() != nil {
			t.Fatalf("section's lease ended: %v", x.Err())
		}
		mustRelease(t, x)
	}
	w := mustAcquire(t, a, req, "doc", guard.Write())
	rd := mustAcquire(t, b, w.Context(), "doc", guard.Read()) // a read within the writer
	mustRelease(t, rd)
	mustRelease(t, w)
}

// TestSectionsAcrossProcesses: the call-chain rule between OS processes, where only
// Redis knows the holds. Two holder processes take x and y as sibling sections of one
// request; this process, acting for the same request, is a sibling of both and waits
// its turn; with a token signed inside x's section it reenters x (through Redis, with
// the holder's fencing token) and is refused y.
func TestSectionsAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("0123456789abcdef0123")}})
	if err != nil {
		t.Fatal(err)
	}
	req := ctxid.New()
	px := startHolder(t, srv, "x", holderSpec{TTL: 10 * time.Second, Owner: string(req)})
	py := startHolder(t, srv, "y", holderSpec{TTL: 10 * time.Second, Owner: string(req)})
	tx, _ := px.await(t, 20*time.Second), py.await(t, 20*time.Second)
	sx, sy := ctxid.ID(px.owner), ctxid.ID(py.owner)
	if xp, _ := sx.Parent(); xp != req || sx == sy {
		t.Fatalf("holder sections %q and %q, want two sections directly in request %q", sx, sy, req)
	}
	if yp, _ := sy.Parent(); yp != req {
		t.Fatalf("holder sections %q and %q, want two sections directly in request %q", sx, sy, req)
	}

	sibling := ctxid.NewContext(ctxTimeout(t, 10*time.Second), req)
	for _, key := range []string{"x", "y"} {
		if _, err := l.TryAcquire(sibling, key); !errors.Is(err, guard.ErrLocked) {
			t.Fatalf("TryAcquire %s by the request's new section = %v, want ErrLocked", key, err)
		}
	}

	tok, ok := signer.Outbound(ctxid.NewContext(context.Background(), sx))
	if !ok {
		t.Fatal("no token for x's section")
	}
	inX, owner, err := signer.Accept(ctxTimeout(t, 10*time.Second), tok)
	if err != nil || owner != sx {
		t.Fatalf("Accept: %v, owner %q, want %q", err, owner, sx)
	}
	rx, err := l.TryAcquire(inX, "x")
	if err != nil || !rx.Reentrant() || rx.Token() != tx || rx.Owner() != sx {
		t.Fatalf("TryAcquire x with x's token = %v (lease %+v), want a reentry of %q with token %d", err, rx, sx, tx)
	}
	if _, err := l.TryAcquire(inX, "y"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("TryAcquire y with x's token = %v, want ErrLocked", err)
	}
	mustRelease(t, rx)
	if _, err := l.TryAcquire(context.Background(), "x"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("x free after the reentry's release, its holder process still in: %v", err)
	}
}
