package guard_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestRetriedScriptsTakeEffectOnce makes go-redis send acquire and release twice (the
// first reply is dropped and the connection closed, so the client retries) and checks
// that hold counts and fencing tokens stay exact.
func TestRetriedScriptsTakeEffectOnce(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	pc := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = pc.Close() })
	a := lockerOn(t, pc)
	b, c := newLocker(t, srv)
	ctx, _ := ctxid.Ensure(ctxTimeout(t, 10*time.Second))
	warm := mustAcquire(t, a, ctx, "warm-up") // load scripts, so EVALSHA hits
	waitForceListening(t, c)                  // its reply is not the one dropped below
	mustRelease(t, warm)
	var section ctxid.ID // the section that holds "idem"
	holds := func() int { return holdCount(t, c, "idem", string(section)) }
	evalsha := func() int64 { return srv.CommandCalls(t)["evalsha"] }

	before := evalsha()
	proxy.DropNextReply()
	la := mustAcquire(t, a, ctx, "idem")
	section = la.Owner()
	if ran := evalsha() - before; ran != 2 {
		t.Fatalf("acquire ran %d times on the server, want 2 (the client's retry)", ran)
	}
	fence, _ := c.HGet(ctx, lockName("idem"), "#f").Result()
	if holds() != 1 || fence != strconv.FormatInt(la.Token(), 10) {
		t.Fatalf("after a retried acquire: holds %d, fence %q, token %d; want 1 and the token", holds(), fence, la.Token())
	}

	lb := mustAcquire(t, b, la.Context(), "idem") // inside the section, another Locker: Redis counts 2
	if holds() != 2 {
		t.Fatalf("holds = %d, want 2", holds())
	}
	before = evalsha()
	proxy.DropNextReply()
	mustRelease(t, la)
	if ran := evalsha() - before; ran != 2 || holds() != 1 {
		t.Fatalf("retried partial release ran %d times and left %d holds, want 2 and 1", ran, holds())
	}
	mustRelease(t, lb)

	la = mustAcquire(t, a, ctx, "idem")
	before = evalsha()
	proxy.DropNextReply()
	if err := la.Release(ctx); err != nil {
		t.Fatalf("retried final release = %v, want nil (the first run released)", err)
	}
	if ran := evalsha() - before; ran != 2 {
		t.Fatalf("final release ran %d times, want 2", ran)
	}
	if lockHolder(t, c, lockName("idem")) != "" {
		t.Fatal("lock left held after the final release")
	}
}

// TestAmbiguousAcquireCompensated: an acquire whose reply never arrives (and is not
// retried) is undone in the background, long before the TTL.
func TestAmbiguousAcquireCompensated(t *testing.T) {
	_, proxy, l, c, ctx := ambiguousRig(t)

	proxy.DropNextReply()
	_, err := l.TryAcquire(ctx, "ambiguous") // a single attempt: an Acquire would try again
	var re *guard.RedisError
	if !errors.Is(err, guard.ErrUnavailable) || !errors.As(err, &re) || re.Op != "acquire" {
		t.Fatalf("Acquire with a lost reply = %v, want a *RedisError (ErrUnavailable)", err)
	}
	waitUntil(t, 3*time.Second, "the compensating release", func() bool {
		return lockHolder(t, c, lockName("ambiguous")) == ""
	})
	// The fencing counter proves the lost acquire did take the lock before it was undone.
	if n, _ := c.HExists(ctx, lockName("ambiguous"), "#f").Result(); !n {
		t.Fatal("the acquire never ran on the server; the test proves nothing")
	}
}

// TestAbandonedAttemptOnStalledRedis: with Redis stopped mid-attempt, Acquire returns when
// its context ends (the client would wait out its 3s read timeout), and the attempt, once
// Redis answers, undoes the hold it took for nobody. On go-redis's auto-pipelining client
// too, where the attempt waits in a batch that a context cannot call back: the undo then
// waits for that batch, so that it does not overtake the attempt.
func TestAbandonedAttemptOnStalledRedis(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(map[bool]string{false: "client", true: "auto-pipelined"}[batched], func(t *testing.T) {
			srv := redistest.Start(t)
			c := srv.Client(t)
			var l *guard.Locker
			if batched {
				ap, err := c.AutoPipeline()
				if err != nil {
					t.Fatal(err)
				}
				l = lockerOn(t, ap, guard.TTL(time.Minute))
			} else {
				l = lockerOn(t, c, guard.TTL(time.Minute))
			}
			mustRelease(t, mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "warm-up"))

			srv.Pause(t)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := l.Acquire(ctx, "stalled")
			// Redis resumes only after Acquire returned: a call that ignored its deadline
			// would not return at all. The bound is loose for a loaded machine; how late
			// calls return is the chaos suite's to measure (I4).
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Acquire returned %s after start with a 200ms deadline", d)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want context.DeadlineExceeded in the chain", err)
			}
			time.Sleep(300 * time.Millisecond)
			srv.Resume(t)
			bg := context.Background()
			waitUntil(t, 3*time.Second, "the abandoned attempt to undo itself", func() bool {
				return lockHolder(t, c, lockName("stalled")) == ""
			})
			if n, _ := c.HExists(bg, lockName("stalled"), "#f").Result(); !n {
				t.Fatal("the stalled acquire never ran; the test proves nothing")
			}
		})
	}
}

// TestAbandonedAttemptThenSameRequest: an attempt abandoned when its context ended did take
// the lock, for a section nobody else can be inside. The same request acquiring again (a
// retrying caller) is another section: it waits for the attempt's undo, which finds its
// own nonce and frees the lock long before its TTL, and then holds the lock alone.
func TestAbandonedAttemptThenSameRequest(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	lossy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = lossy.Close() })
	first := lockerOn(t, lossy, guard.TTL(time.Minute))
	second, direct := newLocker(t, srv, guard.TTL(time.Minute))
	ctx, _ := ctxid.Ensure(ctxTimeout(t, 10*time.Second))
	warmUp(t, first, direct, ctx)

	proxy.DelayNextReply(700 * time.Millisecond)
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := first.Acquire(actx, "retry")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first Acquire = %v, want the deadline", err)
	}
	le := mustAcquire(t, second, ctx, "retry") // waits for the undo, not the TTL
	if n := holdCount(t, direct, "retry", string(le.Owner())); n != 1 {
		fields, _ := direct.HGetAll(ctx, lockName("retry")).Result()
		t.Fatalf("hash %v: want the second section's single hold", fields)
	}
	mustRelease(t, le)
	waitUntil(t, 3*time.Second, "the abandoned attempt's undo", func() bool {
		return lockHolder(t, direct, lockName("retry")) == ""
	})
}

// TestAbandonedAttemptQueuedInBatch: on go-redis's auto-pipelining client an attempt can
// wait in the client's queue while an earlier batch is in flight. Its caller's context
// ends there; the attempt is sent later and takes the lock. The undo must wait for it:
// sent at once on a connection of its own, it would find nothing to undo, and the lock
// would stay held for nobody until its TTL (a minute here).
func TestAbandonedAttemptQueuedInBatch(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	l := lockerOn(t, ap, guard.TTL(time.Minute))
	direct := srv.Client(t)
	warmUp(t, l, direct, ctxTimeout(t, 5*time.Second))
	bg := context.Background()

	// A batch in flight for 700ms: the first attempt on another key.
	proxy.DelayNextReply(700 * time.Millisecond)
	first := make(chan error, 1)
	go func() {
		le, err := l.TryAcquire(bg, "first")
		if err == nil {
			err = le.Release(bg)
		}
		first <- err
	}()
	waitUntil(t, 2*time.Second, "the first attempt to run", func() bool {
		return lockHolder(t, direct, lockName("first")) != ""
	})

	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, "queued"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded in the chain", err)
	}
	if n, _ := direct.HExists(bg, lockName("queued"), "#f").Result(); n {
		t.Fatal("the attempt ran before its caller gave up; the test proves nothing")
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 3*time.Second, "the queued attempt to run and be undone", func() bool {
		n, _ := direct.HExists(bg, lockName("queued"), "#f").Result()
		return n && lockHolder(t, direct, lockName("queued")) == ""
	})
}

// TestAmbiguousAttemptRetried: an Acquire whose first attempt took the lock but lost its
// reply tries again, as it waits out any outage, with the same nonce: it adopts the hold
// the first attempt made rather than counting a second one, so the lease holds the lock
// once, is not reentrant, and its release frees it.
func TestAmbiguousAttemptRetried(t *testing.T) {
	srv, proxy, l, c, ctx := ambiguousRig(t)

	before := srv.CommandCalls(t)["evalsha"]
	proxy.DropNextReply()
	le, err := l.Acquire(ctx, "ambiguous", guard.Retry(guard.MaxWait(5*time.Second, guard.Fixed(10*time.Millisecond, 0))))
	if err != nil {
		t.Fatalf("Acquire after a lost reply: %v", err)
	}
	if holds := holdCount(t, c, "ambiguous", string(le.Owner())); holds != 1 || le.Reentrant() {
		t.Fatalf("after a retried attempt Redis counts %d holds (reentrant %t), want 1 and a fresh lease", holds, le.Reentrant())
	}
	time.Sleep(200 * time.Millisecond) // time for a compensating release, were one sent
	if err := le.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
	mustRelease(t, le)
	if lockHolder(t, c, lockName("ambiguous")) != "" {
		t.Fatal("lock left held after the release")
	}
	// The attempt, its retry and the release: no compensating release was needed.
	if calls := srv.CommandCalls(t)["evalsha"] - before; calls != 3 {
		t.Fatalf("%d script calls for a retried attempt and a release, want 3 (no undo)", calls)
	}
}

// ambiguousRig starts a server and a Locker (TTL 1m) whose client reaches it through a
// fault proxy without go-redis retries, with its scripts loaded: a dropped reply is then
// an acquire of unknown outcome. c reaches the server directly.
func ambiguousRig(t *testing.T) (*redistest.Server, *redistest.Proxy, *guard.Locker, *redis.Client, context.Context) {
	t.Helper()
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	pc := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = pc.Close() })
	l := lockerOn(t, pc, guard.TTL(time.Minute))
	ctx := ctxTimeout(t, 10*time.Second)
	le := mustAcquire(t, l, ctx, "warm-up")
	// The Locker listens for force releases while it holds a lease, on a connection
	// through the proxy: wait for its subscription's reply, which must not be the one a
	// test drops.
	c := srv.Client(t)
	waitForceListening(t, c)
	mustRelease(t, le)
	return srv, proxy, l, c, ctx
}
