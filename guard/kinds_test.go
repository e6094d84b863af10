package guard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// kindInterval is one hold seen by a test: when it began and ended, its kind and token.
type kindInterval struct {
	enter, exit time.Time
	kind        guard.Kind
	token       int64
}

// sweep runs goroutines on lockers that take key with the option pick returns, hold it
// for a moment and record their intervals, rounds times each.
func sweep(t *testing.T, lockers []*guard.Locker, perLocker, rounds int, key string, pick func(r *rand.Rand) guard.Option) []kindInterval {
	t.Helper()
	ctx := ctxTimeout(t, 60*time.Second)
	var (
		mu  sync.Mutex
		out []kindInterval
		wg  sync.WaitGroup
	)
	for i, l := range lockers {
		for j := range perLocker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(i), uint64(j)))
				for range rounds {
					le, err := l.Acquire(ctx, key, pick(r))
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					enter := time.Now()
					time.Sleep(time.Duration(200+r.IntN(800)) * time.Microsecond)
					exit := time.Now()
					mustRelease(t, le)
					mu.Lock()
					out = append(out, kindInterval{enter, exit, le.Kind(), le.Token()})
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].enter.Before(out[j].enter) })
	return out
}

// maxOverlap returns the most intervals of in that were open at one time.
func maxOverlap(in []kindInterval) int {
	type edge struct {
		at   time.Time
		open int
	}
	var edges []edge
	for _, iv := range in {
		edges = append(edges, edge{iv.enter, 1}, edge{iv.exit, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].open < edges[j].open // an exit before an enter at the same instant
		}
		return edges[i].at.Before(edges[j].at)
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.open
		most = max(most, n)
	}
	return most
}

func twoLockers(t *testing.T, srv *redistest.Server, opts ...guard.Option) []*guard.Locker {
	opts = append([]guard.Option{guard.Retry(guard.MaxWait(-1, guard.Fixed(20*time.Millisecond, 20*time.Millisecond)))}, opts...)
	a, _ := newLocker(t, srv, opts...)
	b, _ := newLocker(t, srv, opts...)
	return []*guard.Locker{a, b}
}

// TestReadWriteExclusion: across two processes, a writer never holds together with
// anyone, readers do hold together, and every writer's token exceeds the token of every
// hold that ended before the writer began.
func TestReadWriteExclusion(t *testing.T) {
	srv := redistest.Start(t)
	got := sweep(t, twoLockers(t, srv), 12, 8, "rw", func(r *rand.Rand) guard.Option {
		if r.IntN(4) == 0 {
			return guard.Write()
		}
		return guard.Read()
	})
	var writes, reads []kindInterval
	for _, iv := range got {
		if iv.kind == guard.KindWrite {
			writes = append(writes, iv)
		} else {
			reads = append(reads, iv)
		}
	}
	if len(writes) == 0 || len(reads) == 0 {
		t.Fatalf("%d writes and %d reads: the sweep must have both", len(writes), len(reads))
	}
	for _, w := range writes {
		for _, o := range got {
			if o == w {
				continue
			}
			if o.enter.Before(w.exit) && w.enter.Before(o.exit) {
				t.Fatalf("a %s hold [%s, %s] overlapped a write hold [%s, %s]", o.kind,
					o.enter.Format(time.StampMicro), o.exit.Format(time.StampMicro), w.enter.Format(time.StampMicro), w.exit.Format(time.StampMicro))
			}
			if o.exit.Before(w.enter) && o.token >= w.token {
				t.Fatalf("a write's token %d does not exceed the token %d of an earlier %s hold", w.token, o.token, o.kind)
			}
		}
	}
	if n := maxOverlap(reads); n < 2 {
		t.Fatalf("readers never held together (at most %d at once)", n)
	}
	t.Logf("%d writes, %d reads, up to %d readers at once", len(writes), len(reads), maxOverlap(reads))
}

// TestReadersShareWritersWait: readers of two processes hold at once; a writer waits for
// all of them, and while it waits, new readers wait behind it (writers go first).
func TestReadersShareWritersWait(t *testing.T) {
	srv := redistest.Start(t)
	ls := twoLockers(t, srv, guard.Retry(guard.MaxWait(-1, guard.Fixed(10*time.Millisecond, 10*time.Millisecond))))
	ctx := ctxTimeout(t, 30*time.Second)
	r1 := mustAcquire(t, ls[0], ctx, "acct", guard.Read())
	r2 := mustAcquire(t, ls[1], ctx, "acct", guard.Read())
	if _, err := ls[0].TryAcquire(ctx, "acct", guard.Write()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("TryAcquire(Write) with readers in: %v, want ErrLocked", err)
	}
	writer := make(chan *guard.Lease, 1)
	go func() {
		le, err := ls[1].Acquire(ctx, "acct", guard.Write())
		if err != nil {
			t.Errorf("writer: %v", err)
		}
		writer <- le
	}()
	c := srv.Client(t)
	waitUntil(t, 5*time.Second, "the writer's mark", func() bool {
		return c.HExists(ctx, "guard:{acct}:rw", "#ww").Val()
	})
	if _, err := ls[0].TryAcquire(ctx, "acct", guard.Read()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("new reader while a writer waits: %v, want ErrLocked", err)
	}
	// An owner already reading reenters, writer waiting or not.
	again := mustAcquire(t, ls[0], r1.Context(), "acct", guard.Read())
	mustRelease(t, again)
	mustRelease(t, r1)
	select {
	case <-writer:
		t.Fatal("the writer got in while a reader held")
	case <-time.After(50 * time.Millisecond):
	}
	mustRelease(t, r2)
	var w *guard.Lease
	select {
	case w = <-writer:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer did not get in after the readers left")
	}
	if w.Kind() != guard.KindWrite || w.Token() <= r2.Token() || w.Token() <= r1.Token() {
		t.Fatalf("writer lease kind %s token %d; readers' tokens %d, %d", w.Kind(), w.Token(), r1.Token(), r2.Token())
	}
	mustRelease(t, w)
	mustRelease(t, mustAcquire(t, ls[0], ctx, "acct", guard.Read()))
}

// TestDowngradeAndUpgrade: a writer may read (and keeps reading after its write hold
// ends, while others may then read too but not write); a reader asking to write fails
// at once with ErrUpgrade.
func TestDowngradeAndUpgrade(t *testing.T) {
	srv := redistest.Start(t)
	ls := twoLockers(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	w := mustAcquire(t, ls[0], ctx, "doc", guard.Write())
	r := mustAcquire(t, ls[0], w.Context(), "doc", guard.Read())
	if _, err := ls[1].TryAcquire(ctx, "doc", guard.Read()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("other reader while written: %v, want ErrLocked", err)
	}
	// The same owner through another process (a downstream service) reads too.
	r2 := mustAcquire(t, ls[1], w.Context(), "doc", guard.Read())
	mustRelease(t, r2)
	mustRelease(t, w)
	other := mustAcquire(t, ls[1], ctx, "doc", guard.Read())
	if _, err := ls[1].TryAcquire(ctx, "doc", guard.Write()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("writer while two read: %v, want ErrLocked", err)
	}
	start := time.Now()
	_, err := ls[0].Acquire(r.Context(), "doc", guard.Write())
	if !errors.Is(err, guard.ErrUpgrade) {
		t.Fatalf("reader asking to write: %v, want ErrUpgrade", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("ErrUpgrade took %s: it must not wait", d)
	}
	mustRelease(t, r)
	mustRelease(t, other)
	mustRelease(t, mustAcquire(t, ls[1], ctx, "doc", guard.Write()))
}

// TestReaderCrashFreesItsShare: a reader process killed mid-hold stops renewing; its
// share is dropped after its TTL while another reader keeps renewing its own, and a
// writer gets in once the survivor leaves.
func TestReaderCrashFreesItsShare(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 600 * time.Millisecond
	crashed := startHolder(t, srv, "ledger", holderSpec{Kind: "read", TTL: ttl})
	crashed.await(t, 10*time.Second)
	l, c := newLocker(t, srv, guard.TTL(ttl))
	ctx := ctxTimeout(t, 30*time.Second)
	survivor := mustAcquire(t, l, ctx, "ledger", guard.Read())
	crashed.kill(t)
	killed := time.Now()
	waitUntil(t, 3*ttl, "the crashed reader's share to be dropped", func() bool {
		// Expired shares are dropped by the next script that looks: the survivor's
		// renewals do not, so ask as a writer would.
		_, _ = l.TryAcquire(ctx, "ledger", guard.Write())
		return c.HGet(ctx, "guard:{ledger}:rw", "#c").Val() == "1" // the shares the hash records

	})
	if d := time.Since(killed); d < ttl-100*time.Millisecond {
		t.Fatalf("the crashed share went %s after the kill, before its TTL (%s)", d, ttl)
	}
	time.Sleep(2 * ttl) // the survivor keeps renewing its own share
	if err := survivor.Context().Err(); err != nil {
		t.Fatalf("the surviving reader lost its lease: %v", context.Cause(survivor.Context()))
	}
	if _, err := l.TryAcquire(ctx, "ledger", guard.Write()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("writer with the survivor reading: %v, want ErrLocked", err)
	}
	mustRelease(t, survivor)
	mustRelease(t, mustAcquire(t, l, ctx, "ledger", guard.Write()))
}

// TestSemaphoreLimit: across two processes never more than N hold, N do hold together,
// and every permit has its own token.
func TestSemaphoreLimit(t *testing.T) {
	srv := redistest.Start(t)
	const n = 3
	got := sweep(t, twoLockers(t, srv), 8, 6, "exports", func(*rand.Rand) guard.Option { return guard.Permits(n) })
	if most := maxOverlap(got); most != n {
		t.Fatalf("at most %d held at once, want exactly %d", most, n)
	}
	seen := map[int64]bool{}
	for _, iv := range got {
		if iv.kind != guard.KindSemaphore || seen[iv.token] {
			t.Fatalf("permit of kind %s with token %d (seen before: %t)", iv.kind, iv.token, seen[iv.token])
		}
		seen[iv.token] = true
	}
}

// TestSemaphoreCrashAndLimits: a killed holder's permit frees after its TTL; a call
// with a lower limit waits while that many hold, one with a higher limit gets in.
func TestSemaphoreCrashAndLimits(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 600 * time.Millisecond
	crashed := startHolder(t, srv, "jobs", holderSpec{Kind: "semaphore", Permits: 2, TTL: ttl})
	crashed.await(t, 10*time.Second)
	l, _ := newLocker(t, srv, guard.TTL(ttl))
	ctx := ctxTimeout(t, 30*time.Second)
	a := mustAcquire(t, l, ctx, "jobs", guard.Permits(2))
	if _, err := l.TryAcquire(ctx, "jobs", guard.Permits(2)); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("third holder with 2 permits: %v, want ErrLocked", err)
	}
	if _, err := l.TryAcquire(ctx, "jobs", guard.Permits(1)); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("lower limit: %v, want ErrLocked", err)
	}
	b := mustAcquire(t, l, ctx, "jobs", guard.Permits(3))
	mustRelease(t, b)
	crashed.kill(t)
	killed := time.Now()
	c := mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "jobs", guard.Permits(2))
	if d := time.Since(killed); d < ttl-100*time.Millisecond || d > 3*ttl {
		t.Fatalf("the crashed permit freed %s after the kill; TTL %s", d, ttl)
	}
	mustRelease(t, a)
	mustRelease(t, c)
}

// fairWaiter starts an Acquire of key for a fresh owner, which reports its name on got
// when it holds the lock and releases it a moment later. The test's end stops it.
func fairWaiter(ctx context.Context, t *testing.T, l *guard.Locker, key string, got chan<- string, name string) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		le, err := l.Acquire(ctx, key, guard.Fair())
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("%s: %v", name, err)
			}
			return
		}
		got <- name
		time.Sleep(2 * time.Millisecond)
		mustRelease(t, le)
	}()
}

// queueLen is the length of a fair lock's owner queue.
func queueLen(ctx context.Context, c *redis.Client, key string) int64 {
	return c.LLen(ctx, lockName(key)+":fair:owners").Val()
}

// TestFairOrder: owners waiting on three Lockers get the lock in the order they queued.
func TestFairOrder(t *testing.T) {
	srv := redistest.Start(t)
	var ls []*guard.Locker
	for range 3 {
		l, _ := newLocker(t, srv, guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Second, time.Second))))
		ls = append(ls, l)
	}
	c := srv.Client(t)
	ctx := ctxTimeout(t, 60*time.Second)
	first := mustAcquire(t, ls[0], ctx, "payments", guard.Fair())
	got := make(chan string, 16)
	var want []string
	for i := range 9 {
		name := string(rune('a' + i))
		fairWaiter(ctx, t, ls[(i+1)%3], "payments", got, name)
		want = append(want, name)
		waitUntil(t, 5*time.Second, "waiter "+name+" to queue", func() bool {
			return queueLen(ctx, c, "payments") == int64(i+1)
		})
	}
	mustRelease(t, first)
	for i, w := range want {
		select {
		case name := <-got:
			if name != w {
				t.Fatalf("grant %d went to %s, want %s (queue order %v)", i, name, w, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("grant %d (%s) did not come", i, w)
		}
	}
	if n := queueLen(ctx, c, "payments"); n != 0 {
		t.Fatalf("queue holds %d owners after every grant", n)
	}
}

// TestFairAbandonedWaiters: a waiter that gives up leaves the queue at once; one whose
// process dies loses its place after its TTL, and a grant to it is not left stuck.
func TestFairAbandonedWaiters(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 600 * time.Millisecond
	l, c := newLocker(t, srv, guard.TTL(ttl), guard.Retry(guard.MaxWait(-1, guard.Fixed(50*time.Millisecond, 50*time.Millisecond))))
	ctx := ctxTimeout(t, 60*time.Second)
	holder := mustAcquire(t, l, ctx, "q", guard.Fair())

	quitter, quit := context.WithCancel(ctx)
	got := make(chan string, 4)
	fairWaiter(quitter, t, l, "q", got, "quitter")
	waitUntil(t, 5*time.Second, "the quitter to queue", func() bool { return queueLen(ctx, c, "q") == 1 })
	dead := startHolder(t, srv, "q", holderSpec{Kind: "fair", TTL: ttl})
	waitUntil(t, 10*time.Second, "the doomed process to queue", func() bool { return queueLen(ctx, c, "q") == 2 })
	fairWaiter(ctx, t, l, "q", got, "last")
	waitUntil(t, 5*time.Second, "the last waiter to queue", func() bool { return queueLen(ctx, c, "q") == 3 })

	quit()
	waitUntil(t, time.Second, "the quitter to leave the queue", func() bool { return queueLen(ctx, c, "q") == 2 })
	dead.kill(t)
	time.Sleep(ttl + 100*time.Millisecond) // the dead waiter's place lapses
	mustRelease(t, holder)
	select {
	case name := <-got:
		if name != "last" {
			t.Fatalf("the lock went to %s", name)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the live waiter behind a dead one did not get the lock")
	}
	waitUntil(t, 2*time.Second, "an empty queue", func() bool { return queueLen(ctx, c, "q") == 0 })
}

// TestFairGrantToDeadWaiter: the lock granted to a waiter that dies before claiming it
// passes on after that waiter's TTL, not never (a lost wake-up must not strand the queue).
func TestFairGrantToDeadWaiter(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 600 * time.Millisecond
	l, c := newLocker(t, srv, guard.TTL(ttl))
	ctx := ctxTimeout(t, 60*time.Second)
	holder := mustAcquire(t, l, ctx, "g", guard.Fair())
	dead := startHolder(t, srv, "g", holderSpec{Kind: "fair", TTL: 2 * time.Second, Owner: "doomed"})
	waitUntil(t, 10*time.Second, "the doomed process to queue", func() bool { return queueLen(ctx, c, "g") == 1 })
	got := make(chan string, 1)
	fairWaiter(ctx, t, l, "g", got, "next")
	waitUntil(t, 5*time.Second, "the next waiter to queue", func() bool { return queueLen(ctx, c, "g") == 2 })
	// Freeze the doomed waiter, then release: the grant goes to it and is never claimed.
	if err := dead.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, holder)
	waitUntil(t, time.Second, "the grant to the frozen waiter", func() bool {
		return strings.HasPrefix(c.HGet(ctx, lockName("g")+":fair", "#g").Val(), "doomed/")
	})
	dead.kill(t)
	granted := time.Now()
	select {
	case <-got:
		if d := time.Since(granted); d > 2*time.Second+time.Second {
			t.Fatalf("the grant passed on after %s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the unclaimed grant never passed on")
	}
}

// TestKindsReenterAndLose: for every kind, the owner reenters its hold through another
// Locker (a downstream service), and a hold deleted from Redis is lost: the lease's
// context ends with ErrLeaseLost.
func TestKindsReenterAndLose(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 300 * time.Millisecond
	a, c := newLocker(t, srv, guard.TTL(ttl))
	b, _ := newLocker(t, srv, guard.TTL(ttl))
	for _, k := range []struct {
		opt  guard.Option
		kind guard.Kind
		name string // the hash of the lock
	}{
		{guard.Read(), guard.KindRead, ":rw"},
		{guard.Write(), guard.KindWrite, ":rw"},
		{guard.Permits(2), guard.KindSemaphore, ":sem"},
		{guard.Fair(), guard.KindFair, ":fair"},
	} {
		t.Run(k.kind.String(), func(t *testing.T) {
			ctx := ctxTimeout(t, 10*time.Second)
			key := "re-" + k.kind.String()
			le := mustAcquire(t, a, ctx, key, k.opt)
			if le.Kind() != k.kind {
				t.Fatalf("lease kind %s, want %s", le.Kind(), k.kind)
			}
			again := mustAcquire(t, b, le.Context(), key, k.opt)
			if !again.Reentrant() || again.Token() != le.Token() {
				t.Fatalf("the owner through another Locker: reentrant %t, token %d (first %d)", again.Reentrant(), again.Token(), le.Token())
			}
			mustRelease(t, again)
			if err := c.Del(ctx, lockName(key)+k.name).Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-le.Context().Done():
				if !errors.Is(context.Cause(le.Context()), guard.ErrLeaseLost) {
					t.Fatalf("cause %v, want ErrLeaseLost", context.Cause(le.Context()))
				}
			case <-time.After(2 * ttl):
				t.Fatal("the deleted hold was not lost")
			}
			_ = le.Release(ctx)
		})
	}
}

// TestWriterGivingUpLetsReadersIn: a writer that stops waiting clears its mark at once,
// so new readers do not wait out its TTL.
func TestWriterGivingUpLetsReadersIn(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv, guard.TTL(10*time.Second))
	ctx := ctxTimeout(t, 10*time.Second)
	r := mustAcquire(t, l, ctx, "stmt", guard.Read())
	_, err := l.Acquire(ctx, "stmt", guard.Write(), guard.Retry(guard.MaxWait(200*time.Millisecond, nil)))
	if !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("writer behind a reader: %v, want ErrLocked", err)
	}
	waitUntil(t, 2*time.Second, "the writer's mark to go", func() bool {
		return !c.HExists(ctx, "guard:{stmt}:rw", "#ww").Val()
	})
	mustRelease(t, mustAcquire(t, l, ctx, "stmt", guard.Read(), guard.Retry(guard.NoRetry())))
	mustRelease(t, r)
}

// TestFairLostWakeUp: the grant's announcement is lost (the waiter's Pub/Sub connection
// is killed just before the release, and the waiter would sleep for a minute on its
// backoff): the grantee still claims the lock within a third of its TTL — a fair waiter
// asks again at least that often, and sooner when its subscription is confirmed again —
// and nobody else takes it meanwhile.
func TestFairLostWakeUp(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 900 * time.Millisecond
	holderL, c := newLocker(t, srv, guard.TTL(ttl))
	waiterL, _ := newLocker(t, srv, guard.TTL(ttl), guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0))))
	ctx := ctxTimeout(t, 30*time.Second)
	held := mustAcquire(t, holderL, ctx, "lost", guard.Fair())
	got := make(chan string, 1)
	fairWaiter(ctx, t, waiterL, "lost", got, "waiter")
	waitUntil(t, 5*time.Second, "the waiter to queue and subscribe", func() bool {
		n, _ := c.PubSubNumSub(ctx, lockName("lost")+":fair:release").Result()
		return queueLen(ctx, c, "lost") == 1 && n[lockName("lost")+":fair:release"] == 1
	})
	if err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	released := time.Now()
	mustRelease(t, held)
	if _, err := holderL.TryAcquire(ctx, "lost", guard.Fair()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("a newcomer while the grant waits for its claim: %v, want ErrLocked", err)
	}
	select {
	case <-got:
		if d := time.Since(released); d > ttl/3+500*time.Millisecond {
			t.Fatalf("claimed %s after the release; a fair waiter asks within TTL/3 (%s)", d, ttl/3)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the grantee never claimed the lock after its wake-up was lost")
	}
}

// TestSemaphoreTakesTurns: goroutines of one process contending for a single permit take
// turns: one that releases does not take the permit straight back while others wait.
func TestSemaphoreTakesTurns(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	const workers, rounds = 6, 8
	var (
		mu    sync.Mutex
		turns []int
		wg    sync.WaitGroup
	)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				le, err := l.Acquire(ctx, "turns", guard.Permits(1))
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				mu.Lock()
				turns = append(turns, i)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mustRelease(t, le)
			}
		}()
	}
	wg.Wait()
	longest, run := 1, 1
	for i := workers; i < len(turns)-2*rounds; i++ { // the first and last turns excepted
		if turns[i] == turns[i-1] {
			run++
			longest = max(longest, run)
		} else {
			run = 1
		}
	}
	if longest > 2 {
		t.Fatalf("one goroutine held the permit %d times in a row while %d others waited: %v", longest, workers-1, turns)
	}
}

// TestFenceRecordKeptAfterRelease: for every kind, the lock hash, which keeps the fence
// record (the last token, the undo marks, the release record), lives the fence retention
// at least after the last hold's release, whether the lease was shorter than the
// retention or longer.
func TestFenceRecordKeptAfterRelease(t *testing.T) {
	srv := redistest.Start(t)
	const retention = time.Minute
	kinds := []struct {
		name   string
		opts   []guard.Option
		suffix string
	}{
		{"exclusive", nil, ""},
		{"read", []guard.Option{guard.Read()}, ":rw"},
		{"write", []guard.Option{guard.Write()}, ":rw"},
		{"semaphore", []guard.Option{guard.Permits(2)}, ":sem"},
		{"fair", []guard.Option{guard.Fair()}, ":fair"},
	}
	for _, ttl := range []time.Duration{10 * time.Second, 2 * time.Minute} {
		l, c := newLocker(t, srv, guard.TTL(ttl), guard.FenceRetention(retention))
		ctx := ctxTimeout(t, 10*time.Second)
		for _, k := range kinds {
			key := fmt.Sprintf("kept-%s-%s", k.name, ttl)
			mustRelease(t, mustAcquire(t, l, ctx, key, k.opts...))
			if left := c.PTTL(ctx, lockName(key)+k.suffix).Val(); left < retention-time.Second {
				t.Errorf("%s, TTL %s: the lock hash lives %s after the release, want the fence retention %s at least", k.name, ttl, left, retention)
			}
		}
	}
}

// TestKindsPairCommands: what an uncontended pair of each kind asks of the server (data
// layout 4: every hold in the lock hash). A read or a permit: acquire HMGET, TIME, HSET,
// PEXPIRE; release HMGET, HDEL (the share's fields), HSET. A write: the same without the
// HDEL (the writer's fields are overwritten by the next writer). Nothing reads the whole
// hash (HGETALL: only a writer's attempt among readers, a full semaphore, or a release
// someone waits for need to know who else holds), and no key but the lock hash is
// written.
func TestKindsPairCommands(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	watched := []string{"evalsha", "eval", "hmget", "time", "hset", "pexpire", "hdel", "hgetall", "pttl", "zadd", "del", "lpop"}
	for _, tc := range []struct {
		name string
		opt  guard.Option
		want map[string]int64
	}{
		{"read", guard.Read(), map[string]int64{"evalsha": 2, "hmget": 2, "time": 1, "hset": 2, "pexpire": 1, "hdel": 1}},
		{"write", guard.Write(), map[string]int64{"evalsha": 2, "hmget": 2, "time": 1, "hset": 2, "pexpire": 1}},
		{"semaphore", guard.Permits(3), map[string]int64{"evalsha": 2, "hmget": 2, "time": 1, "hset": 2, "pexpire": 1, "hdel": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The first pair loads the scripts and leaves the hash (its fence record).
			mustRelease(t, mustAcquire(t, l, ctx, "lean-"+tc.name, tc.opt))
			before := srv.CommandCalls(t)
			mustRelease(t, mustAcquire(t, l, ctx, "lean-"+tc.name, tc.opt))
			after := srv.CommandCalls(t)
			for _, cmd := range watched {
				if got := after[cmd] - before[cmd]; got != tc.want[cmd] {
					t.Errorf("%s pair: %d %s, want %d", tc.name, got, cmd, tc.want[cmd])
				}
			}
		})
	}
}
