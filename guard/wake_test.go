package guard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// A backoff so long that only a release notification can explain a prompt acquisition.
var sleepy = guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0)))

// startWaiter acquires key through l in the background, then releases it, and reports
// the outcome.
func startWaiter(ctx context.Context, l *guard.Locker, key string, opts ...guard.Option) <-chan error {
	got := make(chan error, 1)
	go func() {
		le, err := l.Acquire(ctx, key, opts...)
		if err == nil {
			err = le.Release(ctx)
		}
		got <- err
	}()
	return got
}

// expectAcquired fails the test unless the waiter from startWaiter acquired within 5s,
// saying stranded when it did not.
func expectAcquired(t *testing.T, got <-chan error, stranded string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal(stranded)
	}
}

// TestWakeOnRelease: a waiter in another process acquires right after the release.
func TestWakeOnRelease(t *testing.T) {
	srv := redistest.Start(t)
	holder, c := newLocker(t, srv)
	waiter, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)

	held := mustAcquire(t, holder, ctx, "wake")
	got := startWaiter(ctx, waiter, "wake", sleepy)
	waitQueued(t, c, "wake", waiter) // it failed, subscribed and sleeps
	mustRelease(t, held)
	expectAcquired(t, got, "waiter did not wake on the release (backoff 1m, holder TTL 30s)")
}

// TestWakeLocalWaiters: many goroutines of one process waiting on one key all get it in
// turn, woken by releases alone.
func TestWakeLocalWaiters(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	other, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	held := mustAcquire(t, other, ctx, "queue")

	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			le, err := l.Acquire(ctx, "queue", sleepy)
			if err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			time.Sleep(time.Millisecond)
			if err := le.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		}()
	}
	waitQueued(t, c, "queue", l)
	mustRelease(t, held)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(8 * time.Second):
		t.Fatal("local waiters stranded")
	}
}

// TestWakeAfterPubSubKilled: with the Pub/Sub connection killed, waiters still acquire,
// through resubscription or their backoff.
func TestWakeAfterPubSubKilled(t *testing.T) {
	srv := redistest.Start(t)
	holder, c := newLocker(t, srv)
	waiter, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)

	held := mustAcquire(t, holder, ctx, "pubsub")
	got := startWaiter(ctx, waiter, "pubsub", guard.Retry(guard.MaxWait(-1, guard.Fixed(300*time.Millisecond, 0))))
	waitUntil(t, 3*time.Second, "a Pub/Sub subscriber", func() bool {
		n, _ := c.PubSubNumSub(ctx, lockName("pubsub")+":release").Result()
		return n[lockName("pubsub")+":release"] == 1
	})
	if err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("CLIENT KILL TYPE pubsub: %v", err)
	}
	mustRelease(t, held)
	expectAcquired(t, got, "waiter stranded after its Pub/Sub connection was killed")
}

// TestWakeOnExpiry: a holder that vanished without releasing frees the lock after its TTL,
// and the waiter sleeps no longer than that TTL.
func TestWakeOnExpiry(t *testing.T) {
	srv := redistest.Start(t)
	ghost, _ := newLocker(t, srv, guard.TTL(500*time.Millisecond))
	waiter, waiterClient := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	mustAcquire(t, ghost, ctx, "ghost")
	_ = ghost.Close() // stops renewing without releasing: the lock expires in Redis
	if lockHolder(t, waiterClient, lockName("ghost")) == "" {
		t.Fatal("closing the Locker released the lock; it must only stop renewing it")
	}
	start := time.Now()
	got := mustAcquire(t, waiter, ctx, "ghost", sleepy)
	mustRelease(t, got)
	if d := time.Since(start); d > 3*time.Second || d < 300*time.Millisecond {
		t.Fatalf("waiter took %s for a lock with 500ms TTL left", d)
	}
}

// TestCancelDuringWait: cancelling the context ends the wait promptly, with
// context.Canceled in the chain.
func TestCancelDuringWait(t *testing.T) {
	srv := redistest.Start(t)
	holder, c := newLocker(t, srv)
	waiter, _ := newLocker(t, srv)
	held := mustAcquire(t, holder, ctxTimeout(t, 5*time.Second), "cancel")
	defer mustRelease(t, held)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "cancel", sleepy)
		got <- err
	}()
	waitQueued(t, c, "cancel", waiter)
	cancelled := time.Now()
	cancel()
	err := <-got
	// The waiter's backoff is a minute and the lock stays held: only the cancellation
	// can end the wait. The bound is loose so that a loaded machine does not fail it;
	// the chaos suite measures how late calls return (I4).
	if d := time.Since(cancelled); d > 5*time.Second {
		t.Fatalf("Acquire returned %s after cancel, want it at once (its backoff is a minute)", d)
	}
	var le *guard.LockedError
	if !errors.Is(err, context.Canceled) || !errors.Is(err, guard.ErrLocked) || !errors.As(err, &le) || le.Attempts < 1 {
		t.Fatalf("err = %v, want a *LockedError wrapping context.Canceled", err)
	}
}

func TestRetryPolicies(t *testing.T) {
	srv := redistest.Start(t)
	holder, _ := newLocker(t, srv)
	waiter, _ := newLocker(t, srv)
	held := mustAcquire(t, holder, ctxTimeout(t, 5*time.Second), "busy")
	defer mustRelease(t, held)

	_, err := waiter.Acquire(context.Background(), "busy", guard.Retry(guard.Attempts(3, guard.Fixed(10*time.Millisecond, 0))))
	var le *guard.LockedError
	if !errors.As(err, &le) || le.Attempts != 3 || le.Err != nil {
		t.Fatalf("Attempts(3): %v", err)
	}
	start := time.Now()
	_, err = waiter.Acquire(context.Background(), "busy", guard.Retry(guard.MaxWait(200*time.Millisecond, guard.Fixed(10*time.Millisecond, 10*time.Millisecond))))
	if !errors.As(err, &le) || le.Err != nil || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("MaxWait(200ms): %v after %s", err, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = waiter.Acquire(ctx, "busy")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("context deadline: %v", err)
	}

	// A negative MaxWait waits until the context ends, over a Locker whose own default
	// gives up after 50ms.
	impatient, _ := newLocker(t, srv, guard.Retry(guard.MaxWait(50*time.Millisecond, nil)))
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = impatient.Acquire(ctx, "busy", guard.Retry(guard.MaxWait(-1, guard.Fixed(10*time.Millisecond, 0))))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &le) || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("MaxWait(-1): %v after %s, want a *LockedError wrapping the context's deadline", err, time.Since(start))
	}
}

// switchedSub is a client whose Pub/Sub connections come from another client, which a
// test can switch.
type switchedSub struct {
	*redis.Client
	sub atomic.Pointer[redis.Client]
}

func (s *switchedSub) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return s.sub.Load().Subscribe(ctx, channels...)
}

// TestSilentPubSubReplaced: a Pub/Sub connection that goes silent (a black-holed path: no
// error, no data) is pinged, then replaced, and notifications flow again. The waiter's
// backoff is a minute and the holder's TTL 30s, so only a notification explains a prompt
// acquisition.
func TestSilentPubSubReplaced(t *testing.T) {
	// Restored at cleanup, after the Lockers below have closed (cleanups run last first).
	t.Cleanup(guard.SetPubSubTiming(50*time.Millisecond, 100*time.Millisecond, 300*time.Millisecond))
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { _ = viaProxy.Close() })
	client := &switchedSub{Client: srv.Client(t)}
	client.sub.Store(viaProxy)
	waiter := lockerOn(t, client)
	holder, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)

	held := mustAcquire(t, holder, ctx, "silent")
	got := startWaiter(ctx, waiter, "silent", sleepy)
	waitUntil(t, 3*time.Second, "the waiter's subscription", func() bool {
		n, _ := c.PubSubNumSub(ctx, lockName("silent")+":release").Result()
		return n[lockName("silent")+":release"] == 1
	})
	proxy.Blackhole(true) // the subscribed connection now hears nothing, and says nothing
	client.sub.Store(srv.Client(t))
	time.Sleep(600 * time.Millisecond) // past the replacement deadline
	mustRelease(t, held)
	expectAcquired(t, got, "waiter stranded behind a silent Pub/Sub connection")
}

// TestNoBargingPastLocalWaiters: a goroutine that releases a lock and asks for it again
// at once, while another goroutine of the process waits, goes behind the waiter.
func TestNoBargingPastLocalWaiters(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	first := mustAcquire(t, l, ctx, "turns")
	var (
		mu    sync.Mutex
		order []string
	)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		le, err := l.Acquire(ctx, "turns", sleepy)
		if err != nil {
			t.Errorf("waiter: %v", err)
			return
		}
		mu.Lock()
		order = append(order, "waiter")
		mu.Unlock()
		_ = le.Release(ctx)
	}()
	waitQueued(t, c, "turns", l) // the waiter has failed once and queued
	mustRelease(t, first)
	again := mustAcquire(t, l, ctx, "turns", sleepy) // a new request of the same goroutine
	mu.Lock()
	order = append(order, "barger")
	mu.Unlock()
	mustRelease(t, again)
	<-waited
	if len(order) != 2 || order[0] != "waiter" {
		t.Fatalf("order %v: the newcomer went ahead of the queued waiter", order)
	}
}

// TestReentryPastLocalWaiters: an owner holding a lock through one Locker reenters it
// through another (a downstream service) even while that Locker has waiters of another
// owner queued for the key.
func TestReentryPastLocalWaiters(t *testing.T) {
	srv := redistest.Start(t)
	a, c := newLocker(t, srv)
	b, _ := newLocker(t, srv)
	ctx, _ := ctxid.Ensure(ctxTimeout(t, 60*time.Second))
	held := mustAcquire(t, a, ctx, "shared-down")
	owner := held.Owner() // the downstream call is made from inside the holding section
	go func() {
		// Another request waiting at the downstream service; it gets the lock at the end.
		if le, err := b.Acquire(ctxTimeout(t, 60*time.Second), "shared-down", sleepy); err == nil {
			_ = le.Release(context.Background())
		}
	}()
	waitQueued(t, c, "shared-down", b)
	in, err := b.Acquire(ctxid.NewContext(ctxTimeout(t, 2*time.Second), owner), "shared-down")
	if err != nil || !in.Reentrant() {
		t.Fatalf("reentry through the downstream Locker: %v", err)
	}
	mustRelease(t, in)
	mustRelease(t, held)
}

// TestProcessesTakeTurns: workers in eight Lockers (eight processes) contend for one key.
// Each release wakes only the Locker first in the key's Redis wait queue, so attempts per
// acquisition stay flat however many processes wait, and every worker gets its turns.
func TestProcessesTakeTurns(t *testing.T) {
	srv := redistest.Start(t)
	const lockers, rounds = 8, 15
	counter := redistest.NewCounter()
	var ls []*guard.Locker
	for range lockers {
		c := srv.Client(t)
		c.AddHook(counter)
		ls = append(ls, lockerOn(t, c, sleepy))
	}
	ctx := ctxTimeout(t, 30*time.Second)
	for _, l := range ls { // load the scripts on every client, then count from zero
		mustRelease(t, mustAcquire(t, l, ctx, "warm-up"))
	}
	counter.Reset()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		turns []int // which Locker held the lock, in order
	)
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				le, err := l.Acquire(ctx, "turns")
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				mu.Lock()
				turns = append(turns, i)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				if err := le.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	acquisitions := float64(lockers * rounds)
	perAcq := float64(counter.Calls("evalsha")) / acquisitions
	t.Logf("%.2f script calls per acquisition (attempts and the release)", perAcq)
	if perAcq > 5 {
		t.Fatalf("%.2f script calls per acquisition with %d processes waiting: waiters are woken in a herd", perAcq, lockers)
	}
	// Turns go round: a process that releases does not take the lock straight back while
	// others wait (the first turns, before every process has queued, and the last rounds,
	// when fewer processes are left, excepted).
	longest, run := 1, 1
	for i := lockers + 1; i < len(turns)-2*rounds; i++ {
		if turns[i] == turns[i-1] {
			run++
			longest = max(longest, run)
		} else {
			run = 1
		}
	}
	if longest > 2 {
		t.Fatalf("one process held the lock %d times in a row while %d others waited: %v", longest, lockers-1, turns)
	}
}

// TestKindsWakeOnRelease: a waiter of another process is woken by the release of the
// hold it waits behind, for every kind with a wait queue: a reader behind a writer, a
// writer behind a reader, a semaphore's permit, and the first of two readers leaving
// while another reads on (its release must not wake: the writer is still shut out, and
// wakes when the last reader leaves). A release that finds nobody waited wakes nobody
// and sends nothing (the lock hash's #w, which busy sets before a Locker queues).
func TestKindsWakeOnRelease(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hold, wait guard.Option
		holds      int
		suffix     string // of the lock's Redis name
	}{
		{"reader behind a writer", guard.Write(), guard.Read(), 1, ":rw"},
		{"writer behind a reader", guard.Read(), guard.Write(), 1, ":rw"},
		{"writer behind two readers", guard.Read(), guard.Write(), 2, ":rw"},
		{"permit", guard.Permits(1), guard.Permits(1), 1, ":sem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			holder, c := newLocker(t, srv)
			waiter, _ := newLocker(t, srv)
			ctx := ctxTimeout(t, 60*time.Second)
			var held []*guard.Lease
			for range tc.holds {
				held = append(held, mustAcquire(t, holder, context.Background(), "kinds-wake", tc.hold))
			}
			got := startWaiter(ctx, waiter, "kinds-wake", tc.wait, sleepy)
			lock := lockName("kinds-wake") + tc.suffix
			waitUntil(t, 30*time.Second, "the waiter to queue and subscribe", func() bool {
				if _, err := c.LPos(ctx, lock+":queue", waiter.ID(), redis.LPosArgs{}).Result(); err != nil {
					return false
				}
				subs, err := c.PubSubNumSub(ctx, lock+":release").Result()
				return err == nil && subs[lock+":release"] > 0
			})
			for _, le := range held[1:] {
				mustRelease(t, le)
			}
			if len(held) > 1 {
				select {
				case err := <-got:
					t.Fatalf("the writer got in (%v) while a reader holds", err)
				case <-time.After(200 * time.Millisecond):
				}
			}
			mustRelease(t, held[0])
			expectAcquired(t, got, "waiter did not wake on the release (backoff 1m, holder TTL 30s)")
		})
	}
	t.Run("nobody waited", func(t *testing.T) {
		srv := redistest.Start(t)
		l, _ := newLocker(t, srv)
		ctx := ctxTimeout(t, 10*time.Second)
		for _, kind := range []guard.Option{guard.Read(), guard.Write(), guard.Permits(2)} {
			mustRelease(t, mustAcquire(t, l, ctx, "kinds-quiet", kind))
		}
		calls := srv.CommandCalls(t)
		for _, cmd := range []string{"lpop", "publish"} {
			if calls[cmd] > 0 {
				t.Fatalf("releases nobody waited for sent %s (%d)", cmd, calls[cmd])
			}
		}
	})
}
