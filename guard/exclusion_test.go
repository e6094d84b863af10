package guard_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

type interval struct {
	enter, exit time.Time
	token       int64
}

// TestMutualExclusion runs two Lockers on separate clients (two "processes") with 32
// goroutines each, doing a non-atomic read-modify-write of a Redis counter under one lock.
func TestMutualExclusion(t *testing.T) {
	srv := redistest.Start(t)
	lockers := []*guard.Locker{}
	clients := []*redis.Client{}
	for range 2 {
		l, c := newLocker(t, srv, guard.Retry(guard.MaxWait(-1, guard.Fixed(20*time.Millisecond, 20*time.Millisecond))))
		lockers = append(lockers, l)
		clients = append(clients, c)
	}
	const perLocker, rounds = 32, 4
	ctx := ctxTimeout(t, 60*time.Second)

	var (
		mu        sync.Mutex
		intervals []interval
		wg        sync.WaitGroup
	)
	for i, l := range lockers {
		c := clients[i]
		for range perLocker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					le, err := l.Acquire(ctx, "counter")
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					enter := time.Now()
					n, err := c.Get(le.Context(), "count").Int()
					if err != nil && !errors.Is(err, redis.Nil) {
						t.Errorf("GET: %v", err)
					}
					time.Sleep(100 * time.Microsecond) // widen the race window
					if err := c.Set(le.Context(), "count", n+1, 0).Err(); err != nil {
						t.Errorf("SET: %v", err)
					}
					exit := time.Now()
					if err := le.Release(context.Background()); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
					mu.Lock()
					intervals = append(intervals, interval{enter, exit, le.Token()})
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	want := 2 * perLocker * rounds
	got, _ := clients[0].Get(ctx, "count").Int()
	if got != want || len(intervals) != want {
		t.Fatalf("counter = %d, critical sections = %d, want %d each", got, len(intervals), want)
	}
	sort.Slice(intervals, func(i, j int) bool { return intervals[i].enter.Before(intervals[j].enter) })
	for i := 1; i < len(intervals); i++ {
		if intervals[i].enter.Before(intervals[i-1].exit) {
			t.Fatalf("critical sections overlap: %v–%v and %v–%v", intervals[i-1].enter, intervals[i-1].exit, intervals[i].enter, intervals[i].exit)
		}
		if intervals[i].token <= intervals[i-1].token {
			t.Fatalf("fencing tokens not increasing in lock order: %d then %d", intervals[i-1].token, intervals[i].token)
		}
	}
}

// TestFencingTokens checks 1,000 acquisitions by many owners get strictly increasing
// tokens in lock order, and that reentry keeps the token.
func TestFencingTokens(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	const workers, each = 8, 125
	var (
		mu     sync.Mutex
		tokens []int64
		wg     sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				le, err := l.Acquire(ctx, "fenced") // a fresh owner per call
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				inner, err := l.Acquire(le.Context(), "fenced")
				if err != nil || inner.Token() != le.Token() || !inner.Reentrant() {
					t.Errorf("reentry: err %v, token %d (outer %d)", err, inner.Token(), le.Token())
				}
				mu.Lock()
				tokens = append(tokens, le.Token())
				mu.Unlock()
				_ = inner.Release(ctx)
				if err := le.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != workers*each {
		t.Fatalf("got %d tokens, want %d", len(tokens), workers*each)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d = %d not above token %d = %d", i, tokens[i], i-1, tokens[i-1])
		}
	}
}

// TestFencingSurvivesRestart checks that tokens keep rising after Redis restarts empty.
func TestFencingSurvivesRestart(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	le := mustAcquire(t, l, ctx, "k")
	mustRelease(t, le)
	srv.Restart(t)
	var le2 *guard.Lease
	waitUntil(t, 5*time.Second, "acquire after restart", func() bool {
		var err error
		le2, err = l.Acquire(ctx, "k")
		return err == nil
	})
	defer mustRelease(t, le2)
	if le2.Token() <= le.Token() {
		t.Fatalf("token after restart %d, before %d", le2.Token(), le.Token())
	}
}
