package embedded

// These tests run the guard engine against the embedded server, one behaviour each, so
// that a command, script feature or Pub/Sub detail that miniredis lacks fails here
// rather than in an example.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// server starts an embedded server for one test.
func server(t *testing.T) *Redis {
	t.Helper()
	r, err := startEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// locker makes a Locker with a client of its own, as a separate process would have.
func locker(t *testing.T, r *Redis, opts ...guard.Option) *guard.Locker {
	t.Helper()
	c := newClient(r.Addr)
	l, err := guard.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		c.Close()
	})
	return l
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func lockName(key string) string { return "guard:{" + key + "}" }

// holder returns the owner holding key's exclusive lock on r (redistest.Holder) and its
// hold count, "" and 0 for none.
func holder(t *testing.T, r *Redis, key string) (string, int) {
	t.Helper()
	o := redistest.Holder(t, context.Background(), r.Client, lockName(key))
	if o == "" {
		return "", 0
	}
	n, _ := r.Client.HGet(context.Background(), lockName(key), "#n").Int()
	return o, n
}

func acquire(t *testing.T, l *guard.Locker, ctx context.Context, key string, opts ...guard.Option) *guard.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return le
}

func release(t *testing.T, le *guard.Lease) {
	t.Helper()
	if err := le.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", le.Key(), err)
	}
}

func TestEngineAcquireRelease(t *testing.T) {
	r := server(t)
	l := locker(t, r)
	ctx := ctxTimeout(t, 5*time.Second)

	le := acquire(t, l, ctx, "order:1")
	if le.Token() <= 0 || le.Reentrant() {
		t.Fatalf("lease: token %d, reentrant %v", le.Token(), le.Reentrant())
	}
	if o, n := holder(t, r, "order:1"); o != string(le.Owner()) || n != 1 {
		t.Fatalf("holder %q, hold count %d; want the lease's owner, 1", o, n)
	}
	until, _ := r.Client.HGet(ctx, lockName("order:1"), "#e").Int64()
	if left := time.Duration(until-r.Client.Time(ctx).Val().UnixMilli()) * time.Millisecond; left <= 0 || left > 30*time.Second {
		t.Fatalf("lease left in Redis = %s, want in (0, 30s]", left)
	}
	_, err := l.TryAcquire(ctx, "order:1") // a fresh owner
	var busy *guard.LockedError
	if !errors.As(err, &busy) || busy.RetryAfter <= 0 {
		t.Fatalf("TryAcquire by another owner = %v, want a *LockedError with RetryAfter > 0", err)
	}
	release(t, le)
	if o, _ := holder(t, r, "order:1"); o != "" {
		t.Fatal("lock still held after release")
	}
	le = acquire(t, l, ctx, "order:1")
	release(t, le)
}

func TestEngineReentrancyAcrossProcesses(t *testing.T) {
	r := server(t)
	a, b := locker(t, r), locker(t, r)
	ctx, _ := ctxid.Ensure(ctxTimeout(t, 5*time.Second))

	outer := acquire(t, a, ctx, "account:7")
	local := acquire(t, a, outer.Context(), "account:7")  // nested, same process: no Redis call
	remote := acquire(t, b, outer.Context(), "account:7") // nested, another process: counted in Redis
	if !local.Reentrant() || !remote.Reentrant() || remote.Token() != outer.Token() {
		t.Fatalf("reentrant: local %v, remote %v; tokens outer %d remote %d",
			local.Reentrant(), remote.Reentrant(), outer.Token(), remote.Token())
	}
	if o, n := holder(t, r, "account:7"); o != string(outer.Owner()) || n != 2 {
		t.Fatalf("hold count in Redis = %d, want 2 (one per process)", n)
	}
	if _, err := b.TryAcquire(context.Background(), "account:7"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("another owner's TryAcquire = %v, want ErrLocked", err)
	}
	if _, err := b.TryAcquire(ctx, "account:7"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("a sibling section's TryAcquire = %v, want ErrLocked (the call-chain check in the script)", err)
	}
	release(t, remote)
	release(t, local)
	if o, _ := holder(t, r, "account:7"); o == "" {
		t.Fatal("lock freed while the outer hold remains")
	}
	release(t, outer)
	if o, _ := holder(t, r, "account:7"); o != "" {
		t.Fatal("lock still held after the last release")
	}
}

func TestEngineWakeUpOnRelease(t *testing.T) {
	r := server(t)
	holder, waiter := locker(t, r), locker(t, r)
	ctx := ctxTimeout(t, 5*time.Second)
	le := acquire(t, holder, ctx, "job")

	// The waiter's backoff outlasts its context: only the release notification, sent by
	// release.lua with PUBLISH, can let it in before its context ends.
	got := make(chan error, 1)
	go func() {
		w, err := waiter.Acquire(ctx, "job", guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0))))
		if err == nil {
			err = w.Release(context.Background())
		}
		got <- err
	}()
	channel := lockName("job") + ":release"
	for r.Client.PubSubNumSub(ctx, channel).Val()[channel] == 0 {
		if ctx.Err() != nil {
			t.Fatal("the waiter never subscribed to the release channel")
		}
		time.Sleep(5 * time.Millisecond)
	}
	release(t, le)
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func TestEngineMutualExclusion(t *testing.T) {
	r := server(t)
	const workers, rounds = 4, 10
	ctx := ctxTimeout(t, 20*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for range workers {
		l := locker(t, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				errs <- guard.Do(ctx, func(ctx context.Context) error {
					// A read-modify-write that loses updates unless it is exclusive.
					n, err := r.Client.Get(ctx, "counter").Int()
					if err != nil && !errors.Is(err, redis.Nil) {
						return err
					}
					time.Sleep(time.Millisecond)
					return r.Client.Set(ctx, "counter", n+1, 0).Err()
				}, guard.Use(l), guard.Key("counter"))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := r.Client.Get(ctx, "counter").Int(); n != workers*rounds {
		t.Fatalf("counter = %d, want %d: an update was lost", n, workers*rounds)
	}
}

func TestEngineRenewalKeepsLockPastTTL(t *testing.T) {
	r := server(t)
	// The TTL leaves room for a busy machine: a renewal every 250ms may be late by up
	// to half a second before the lease is lost.
	l := locker(t, r, guard.TTL(750*time.Millisecond))
	ctx := ctxTimeout(t, 10*time.Second)
	le := acquire(t, l, ctx, "long")
	time.Sleep(2 * time.Second) // over two TTLs: the lock lives only if renewed
	if err := le.Err(); err != nil {
		t.Fatalf("lease lost while renewed: %v", err)
	}
	if o, _ := holder(t, r, "long"); o == "" {
		t.Fatal("lock gone from the server despite renewal")
	}
	release(t, le)
}

func TestEngineUnrenewedLockExpires(t *testing.T) {
	r := server(t)
	dead := locker(t, r, guard.TTL(time.Second))
	ctx := ctxTimeout(t, 10*time.Second)
	acquire(t, dead, ctx, "crashed")
	dead.Close() // as if the process died: no release, no renewal

	l := locker(t, r)
	if _, err := l.TryAcquire(ctx, "crashed"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("TryAcquire before the TTL ran out = %v, want ErrLocked", err)
	}
	// The waiter sleeps until the holder's lease runs out, as the busy reply tells.
	le := acquire(t, l, ctx, "crashed", guard.Retry(guard.MaxWait(5*time.Second, guard.Fixed(time.Minute, 0))))
	release(t, le)
}

func TestEngineLeaseLostWhenLockDeleted(t *testing.T) {
	r := server(t)
	l := locker(t, r, guard.TTL(300*time.Millisecond))
	ctx := ctxTimeout(t, 5*time.Second)
	le := acquire(t, l, ctx, "flushed")
	if err := r.Client.Del(ctx, lockName("flushed")).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-le.Context().Done():
	case <-ctx.Done():
		t.Fatal("the lease was not lost after its lock was deleted")
	}
	if err := le.Err(); !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("lease error = %v, want ErrLeaseLost", err)
	}
	if err := le.Release(ctx); !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("Release of a lost lease = %v, want ErrLeaseLost", err)
	}
}

func TestEngineScriptsReloadedAfterFlush(t *testing.T) {
	r := server(t)
	l := locker(t, r, guard.TTL(750*time.Millisecond))
	ctx := ctxTimeout(t, 10*time.Second)
	le := acquire(t, l, ctx, "a")
	// Renewal pipelines EVALSHA: after SCRIPT FLUSH it gets NOSCRIPT and must reload.
	if err := r.Client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // four renewals, all after the flush
	if err := le.Err(); err != nil {
		t.Fatalf("lease lost after SCRIPT FLUSH: %v", err)
	}
	release(t, le)
	if err := r.Client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	le = acquire(t, l, ctx, "b") // acquire falls back from EVALSHA to EVAL
	release(t, le)
}

func TestEngineFencingTokensRise(t *testing.T) {
	r := server(t)
	l := locker(t, r)
	ctx := ctxTimeout(t, 5*time.Second)
	var last int64
	for i := range 5 {
		if i == 3 {
			// Tokens keep rising when the server loses its data: they start from TIME.
			if err := r.Client.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		le := acquire(t, l, ctx, "fenced")
		if le.Token() <= last {
			t.Fatalf("acquisition %d: token %d not above the previous %d", i, le.Token(), last)
		}
		last = le.Token()
		release(t, le)
	}
}

func TestEngineNestedDecoratedCalls(t *testing.T) {
	r := server(t)
	l := locker(t, r)
	ctx := ctxTimeout(t, 5*time.Second)
	var tokens []int64
	inner := guard.Wrap(func(ctx context.Context, id string) (int64, error) {
		le, _ := guard.LeaseFromContext(ctx)
		return le.Token(), nil
	}, guard.Use(l), guard.Key("order:{req}"))
	err := guard.Do(ctx, func(ctx context.Context) error {
		outer, _ := guard.LeaseFromContext(ctx)
		tok, err := inner(ctx, "9") // same key, same owner: reenters
		tokens = append(tokens, outer.Token(), tok)
		return err
	}, guard.Use(l), guard.RawKey("order:9"), guard.Retry(guard.NoRetry()))
	if err != nil {
		t.Fatal(err)
	}
	if tokens[0] <= 0 || tokens[0] != tokens[1] {
		t.Fatalf("tokens outer %d, inner %d: want one positive token", tokens[0], tokens[1])
	}
}

// TestEngineKinds runs every lock kind on the embedded server: readers share and keep a
// writer out, a writer downgrades, a reader cannot upgrade, a semaphore admits its
// permits, a fair lock goes to the owner that queued first, and each renews past its TTL.
func TestEngineKinds(t *testing.T) {
	r := server(t)
	a := locker(t, r, guard.TTL(300*time.Millisecond))
	b := locker(t, r, guard.TTL(300*time.Millisecond))
	ctx := ctxTimeout(t, 20*time.Second)

	r1 := acquire(t, a, ctx, "rw", guard.Read())
	r2 := acquire(t, b, ctx, "rw", guard.Read())
	if _, err := b.TryAcquire(ctx, "rw", guard.Write()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("writer with readers in: %v", err)
	}
	if _, err := a.Acquire(r1.Context(), "rw", guard.Write()); !errors.Is(err, guard.ErrUpgrade) {
		t.Fatalf("reader asking to write: %v", err)
	}
	time.Sleep(time.Second) // past the TTL: the watchdog renews every share
	release(t, r1)
	release(t, r2)
	w := acquire(t, a, ctx, "rw", guard.Write())
	down := acquire(t, b, w.Context(), "rw", guard.Read())
	release(t, w)
	release(t, down)

	p1 := acquire(t, a, ctx, "sem", guard.Permits(2))
	p2 := acquire(t, b, ctx, "sem", guard.Permits(2))
	if _, err := a.TryAcquire(ctx, "sem", guard.Permits(2)); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("third permit of two: %v", err)
	}
	if p1.Token() == p2.Token() {
		t.Fatalf("two permits share token %d", p1.Token())
	}
	release(t, p1)
	release(t, p2)

	f := acquire(t, a, ctx, "fair", guard.Fair())
	got := make(chan *guard.Lease, 1)
	go func() {
		le, err := b.Acquire(ctx, "fair", guard.Fair())
		if err != nil {
			t.Errorf("fair waiter: %v", err)
		}
		got <- le
	}()
	c := r.NewClient()
	defer c.Close()
	waitFor(t, func() bool { return c.LLen(ctx, lockName("fair")+":fair:owners").Val() == 1 })
	release(t, f)
	if _, err := a.TryAcquire(ctx, "fair", guard.Fair()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("a newcomer took the lock granted to the queued owner: %v", err)
	}
	select {
	case le := <-got:
		if le != nil {
			release(t, le)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued owner did not get the fair lock")
	}
}

// waitFor polls cond until it holds, for at most 5s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
	}
}
