package guard_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestFenceAheadOfClock: the fence record's last token is far ahead of the server clock
// (a clock that stepped back). The release keeps that token in the record, so the next
// token still rises above it, and a retry of that release still finds its nonce.
func TestFenceAheadOfClock(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	pc := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = pc.Close() })
	l := lockerOn(t, pc)
	c := srv.Client(t)
	ctx := ctxTimeout(t, 10*time.Second)
	warmUp(t, l, c, ctx)

	le := mustAcquire(t, l, ctx, "long")
	// Push the hold's token and the record far ahead of the server clock, as tokens drawn
	// before the clock stepped back would be.
	const ahead = int64(8_000_000_000_000_000)
	if err := c.HSet(ctx, lockName("long"), "#t", ahead, "#f", ahead).Err(); err != nil {
		t.Fatal(err)
	}
	proxy.DropNextReply() // the client retries the release: the retry must report it done
	if err := le.Release(ctx); err != nil {
		t.Fatalf("retried release after the fence expired = %v, want nil", err)
	}
	fence, err := c.HGet(ctx, lockName("long"), "#f").Result()
	if err != nil || fence != strconv.FormatInt(ahead, 10) {
		t.Fatalf("fence after the release = %q, %v; want the lock's token %d", fence, err, ahead)
	}
	if x := c.HGet(ctx, lockName("long"), "#x").Val(); !strings.HasPrefix(x, ":") {
		t.Fatalf("release record after the release = %q; want the release nonce", x)
	}
	if ttl := c.PTTL(ctx, lockName("long")).Val(); ttl <= 0 {
		t.Fatalf("lock hash TTL = %s, want FenceRetention at least", ttl)
	}
	next := mustAcquire(t, l, ctx, "long")
	defer mustRelease(t, next)
	if next.Token() != ahead+1 {
		t.Fatalf("token after the release = %d, want %d", next.Token(), ahead+1)
	}
}

// TestTokenWidthChange: a fence whose token has fewer digits than the server clock in
// microseconds (written by hand, or by a counter from long ago) and one whose next token
// needs one digit more are both rewritten whole, keeping the undo marks after them.
func TestTokenWidthChange(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	lock := lockName("width")
	fence := func() string { return c.HGet(ctx, lock, "#f").Val() }

	c.HSet(ctx, lock, "#v", "5", "#f", "5:!x.1:!x.2")
	c.Expire(ctx, lock, time.Hour)
	le := mustAcquire(t, l, ctx, "width")
	now := time.Now().UnixMicro()
	if tok := le.Token(); tok < now-int64(time.Hour/time.Microsecond) || tok > now+int64(time.Hour/time.Microsecond) {
		t.Fatalf("token = %d, want about the server clock (%d µs)", tok, now)
	}
	if got := fence(); got != strconv.FormatInt(le.Token(), 10)+":!x.1:!x.2" {
		t.Fatalf("fence = %q, want the new token and the old undo marks", got)
	}
	mustRelease(t, le)

	c.HSet(ctx, lock, "#f", "9999999999999999:!x.3")
	le = mustAcquire(t, l, ctx, "width")
	defer mustRelease(t, le)
	if le.Token() != 10_000_000_000_000_000 {
		t.Fatalf("token = %d, want 10000000000000000", le.Token())
	}
	if got := fence(); got != "10000000000000000:!x.3" {
		t.Fatalf("fence = %q, want the 17-digit token and the old undo mark", got)
	}
}

// TestReleaseNonceHistory: final releases append their nonces to the release record
// (#x), newest last, and the list is trimmed to the newest ones, so it stays bounded
// however many owners take and free the lock; the fence record (#f) keeps the token
// alone, so an acquisition never reads the releases.
func TestReleaseNonceHistory(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 20*time.Second)
	fence := func() string { return c.HGet(ctx, lockName("hist"), "#x").Val() }

	longest, last := 0, ""
	for range 200 {
		mustRelease(t, mustAcquire(t, l, ctx, "hist"))
		f := fence()
		longest = max(longest, len(f))
		newest := f[strings.LastIndexByte(f, ':'):]
		if newest == last {
			t.Fatalf("fence %q: the release did not append its nonce at the end", f)
		}
		last = newest
	}
	if longest > 850 {
		t.Errorf("the release record grew to %d bytes, want it trimmed at about 800", longest)
	}
	if f := fence(); strings.Count(f, ":") < 15 {
		t.Fatalf("release record %q: want at least the last 15 nonces", f)
	}
	if f := c.HGet(ctx, lockName("hist"), "#f").Val(); strings.Contains(f, ":") {
		t.Fatalf("fence record %q: want the last token alone", f)
	}
}

// TestQueuedLockerWokenAfterWaiterHeld: Lockers A, B and C take turns on one key; B and C
// queue in Redis behind A's hold. A's release wakes B; B, who waited, takes the lock, and
// its release must wake C, although nobody found B's hold busy. C's retry delay and the
// TTL are both a minute, so only that notification can get C the lock within the bound.
func TestQueuedLockerWokenAfterWaiterHeld(t *testing.T) {
	srv := redistest.Start(t)
	slow := guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0)))
	opts := []guard.Option{guard.TTL(time.Minute), slow}
	a, _ := newLocker(t, srv, opts...)
	b, _ := newLocker(t, srv, opts...)
	cl, c := newLocker(t, srv, opts...)
	ctx := ctxTimeout(t, 30*time.Second)
	for _, l := range []*guard.Locker{a, b, cl} {
		mustRelease(t, mustAcquire(t, l, ctx, "warm-up"))
	}
	queue := lockName("turns") + ":queue"

	la := mustAcquire(t, a, ctx, "turns")
	gotB := make(chan *guard.Lease, 1)
	go func() {
		le, err := b.Acquire(ctx, "turns")
		if err != nil {
			t.Errorf("B: %v", err)
		}
		gotB <- le
	}()
	waitUntil(t, 5*time.Second, "B queued", func() bool { return c.LLen(ctx, queue).Val() == 1 })
	gotC := make(chan error, 1)
	go func() {
		le, err := cl.Acquire(ctx, "turns")
		if err == nil {
			err = le.Release(context.Background())
		}
		gotC <- err
	}()
	waitUntil(t, 5*time.Second, "C queued", func() bool { return c.LLen(ctx, queue).Val() == 2 })
	mustRelease(t, la)
	lb := <-gotB
	if lb == nil {
		return
	}
	// B's release must wake C: with a minute of retry delay and of TTL, C would
	// otherwise sleep well past this test's bound.
	mustRelease(t, lb)
	select {
	case err := <-gotC:
		if err != nil {
			t.Fatalf("C: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("C was not woken by the release of B, who had waited for the lock")
	}
}

// TestRetriedReentryCountsOnce: a reentry through Redis (the owner holds the lock through
// another Locker) whose reply is lost and which the client retries counts one hold.
func TestRetriedReentryCountsOnce(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	pc := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = pc.Close() })
	lossy := lockerOn(t, pc)
	l, c := newLocker(t, srv)
	ctx, _ := ctxid.Ensure(ctxTimeout(t, 10*time.Second))
	warmUp(t, lossy, c, ctx)

	outer := mustAcquire(t, l, ctx, "re")
	owner := outer.Owner() // the section holding "re"
	proxy.DropNextReply()
	inner := mustAcquire(t, lossy, ctxid.NewContext(ctx, owner), "re")
	if n := holdCount(t, c, "re", string(owner)); n != 2 {
		t.Fatalf("holds after a retried reentry = %d, want 2", n)
	}
	if inner.Token() != outer.Token() || !inner.Reentrant() {
		t.Fatalf("reentry: token %d reentrant %v, want %d and true", inner.Token(), inner.Reentrant(), outer.Token())
	}
	mustRelease(t, inner)
	mustRelease(t, outer)
	if lockHolder(t, c, lockName("re")) != "" {
		t.Fatal("lock left after both releases")
	}
}

// laneCounter counts the script calls a client sends on their own and in the
// auto-pipeliner's batches. A batch runs under a context of its own, without the caller's
// values, and a batch of one command goes through ProcessHook: a call seen there with the
// callerMark value (every call in the test carries it) was sent on its own.
type laneCounter struct {
	mu              sync.Mutex
	direct, batched int
}

func (c *laneCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *laneCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			alone := ctx.Value(callerMark{}) != nil
			c.mu.Lock()
			if alone {
				c.direct++
			} else {
				c.batched++
			}
			c.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (c *laneCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		for _, cmd := range cmds {
			if cmd.Name() == "evalsha" {
				c.batched++
			}
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

type callerMark struct{}

func (c *laneCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.direct + c.batched
}

func (c *laneCounter) take() (direct, batched int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	direct, batched, c.direct, c.batched = c.direct, c.batched, 0, 0
	return direct, batched
}

// TestAutoPipelinedClientLanes: on go-redis's auto-pipelining client, first attempts and
// releases that nobody in the process waits for join the client's batches, while the
// steps of a handoff — the release that a waiter of this process is queued behind and the
// waiter's next attempt — are sent at once, outside the batches.
func TestAutoPipelinedClientLanes(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	lanes := &laneCounter{}
	c.AddHook(lanes)
	ap, err := c.AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	l := lockerOn(t, ap, guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0))))
	ctx := context.WithValue(ctxTimeout(t, 20*time.Second), callerMark{}, true)
	mustRelease(t, mustAcquire(t, l, ctx, "warm-up"))
	lanes.take()

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				le, err := l.TryAcquire(ctx, "own:"+strconv.Itoa(g))
				if err != nil {
					t.Errorf("TryAcquire: %v", err)
					return
				}
				if err := le.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if direct, batched := lanes.take(); direct != 0 || batched != 8*20*2 {
		t.Fatalf("uncontended pairs: %d script calls sent alone, %d batched; want 0 and %d", direct, batched, 8*20*2)
	}

	holder := mustAcquire(t, l, ctx, "handoff")
	got := make(chan *guard.Lease, 1)
	go func() {
		le, err := l.Acquire(ctx, "handoff") // another owner: waits
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- le
	}()
	// The waiter's first attempt finds the lock busy and queues it; it tries once more
	// when its subscription is up (a release may have come before), then sleeps. (On a
	// loaded machine the feed may confirm its subscription late and the waiter try once
	// more: every attempt after the first goes out alone all the same.)
	waitUntil(t, 5*time.Second, "the waiter's two attempts", func() bool { return lanes.total() >= 3 })
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waiter := <-got
	if waiter == nil {
		return
	}
	// The holder's first attempt and the waiter's first one were batched; the waiter's
	// second attempt, the release with the waiter behind it and the waiter's winning
	// attempt were not. With a minute of retry delay and TTL, only the release's wake-up
	// can have ended the wait.
	if direct, batched := lanes.take(); direct < 3 || batched != 2 {
		t.Fatalf("handoff: %d script calls sent alone, %d batched; want at least 3 and 2", direct, batched)
	}
	mustRelease(t, waiter)
}

// TestLeaseContextMadeLate: a Lease acquired without an owner in the context makes its
// context on the first call of Context, which then carries the owner Acquire made and the
// lease, and a lease that ended before that call hands out a context already cancelled
// with the lease's cause.
func TestLeaseContextMadeLate(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	le, err := l.Acquire(context.Background(), "late")
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := ctxid.FromContext(le.Context()); !ok || id != le.Owner() {
		t.Fatalf("lease context owner = %q, %v; want %q", id, ok, le.Owner())
	}
	inner, err := l.Acquire(le.Context(), "late")
	if err != nil || !inner.Reentrant() {
		t.Fatalf("nested Acquire with the lease's context = %v, reentrant %v; want a reentrant lease", err, inner != nil && inner.Reentrant())
	}
	mustRelease(t, inner)
	mustRelease(t, le)

	ended, err := l.Acquire(context.Background(), "late")
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, ended)
	ctx := ended.Context()
	if !errors.Is(context.Cause(ctx), guard.ErrReleased) || ctx.Err() == nil || !errors.Is(ended.Err(), guard.ErrReleased) {
		t.Fatalf("context of a released lease: err %v, cause %v, lease err %v; want it cancelled with ErrReleased", ctx.Err(), context.Cause(ctx), ended.Err())
	}
	if got, ok := guard.LeaseFromContext(ctx); !ok || got != ended {
		t.Fatal("the context made after the release does not carry the lease")
	}
}
