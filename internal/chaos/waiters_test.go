package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/chaos"
	"github.com/guardkit/guardkit/internal/redistest"
)

// waiters parks sc.waiters goroutines, over two Lockers, on one held key, cancels half
// of them, then lets the rest through one by one. Waiting must cost one goroutine per
// waiter and no Redis traffic that grows with the number of waiters; cancelled waiters
// must return at once; the others must all get the lock.
func waiters(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	cfg.TTL = 2 * time.Second
	w := newWorld(t, cfg)
	holder := w.addNode("holder", false)
	nodes := []*node{w.addNode("a", false), w.addNode("b", false)}
	counter := redistest.NewCounter()
	for _, n := range nodes {
		n.client.AddHook(counter)
	}
	ctx := context.Background()
	const key = "hot"
	held, err := holder.locker.Acquire(ctx, key)
	if err != nil {
		w.fatalf(setup, key, 0, "the holder's Acquire: %v", err)
	}
	baseG, baseHeap := runtime.NumGoroutine(), heapInUse()

	var (
		wg        sync.WaitGroup
		acquired  atomic.Int64
		cancelled atomic.Int64
		cancels   []func() // of the waiters to cancel
		cancelAt  = make([]atomic.Int64, sc.waiters)
	)
	rest, restCancel := context.WithTimeout(ctx, 10*time.Minute)
	defer restCancel()
	slow := guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0))) // only releases wake waiters
	for i := range sc.waiters {
		n := nodes[i%2]
		wctx, cancel := context.WithCancel(rest)
		defer cancel()
		doomed := i%4 < 2 // half of each Locker's waiters
		if doomed {
			cancels = append(cancels, func() {
				cancelAt[i].Store(int64(chaos.Now()))
				cancel()
			})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("%s/%d", n.name, i)
			le, err := n.locker.Acquire(wctx, key, slow)
			ret := chaos.Now()
			if err != nil {
				if doomed && errors.Is(err, context.Canceled) && errors.Is(err, guard.ErrLocked) {
					cancelled.Add(1)
					w.hist.AddCall(chaos.Call{Op: "acquire", Key: key, Worker: id, Deadline: chaos.Mono(cancelAt[i].Load()), Return: ret, Err: err.Error()})
					return
				}
				w.failf(liveness, key, ret, "waiter %s: %v", id, err)
				return
			}
			w.hist.AddCall(chaos.Call{Op: "acquire", Key: key, Worker: id, Deadline: ret, Return: ret})
			s := chaos.Section{Key: key, Worker: id, Token: le.Token(), Enter: ret}
			acquired.Add(1)
			s.Exit = chaos.Now()
			s.Valid = chaos.MonoOf(le.ValidUntil())
			w.hist.AddSection(s)
			if err := le.Release(ctx); err != nil {
				w.failf(liveness, key, 0, "waiter %s: release: %v", id, err)
			}
		}()
	}
	// All waiters parked: one goroutine each, and the engine's gate lets one per Locker
	// make attempts.
	parking := chaos.Now()
	deadline := time.Now().Add(time.Minute)
	for runtime.NumGoroutine() < baseG+sc.waiters {
		if time.Now().After(deadline) {
			w.fatalf(liveness, key, parking, "only %d of %d waiters parked after 1 minute", runtime.NumGoroutine()-baseG, sc.waiters)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Each waiter makes one attempt before it queues behind its Locker's gate; wait
	// for those to drain, then measure a second of waiting.
	scripts := func() int64 {
		c := w.lock.CommandCalls(w.tb)
		return c["evalsha"] + c["eval"] + c["subscribe"]
	}
	for prev := scripts(); ; {
		time.Sleep(200 * time.Millisecond)
		cur := scripts()
		if cur-prev <= 2 {
			break
		}
		if time.Now().After(deadline) {
			w.fatalf(waitCost, key, parking, "Redis still busy a minute after %d waiters started (%d script calls and subscriptions in the last 200ms)", sc.waiters, cur-prev)
		}
		prev = cur
	}
	parkedG, parkedHeap := runtime.NumGoroutine()-baseG, heapInUse()-baseHeap
	quietFrom := chaos.Now()
	before := scripts()
	time.Sleep(time.Second)
	quiet := scripts() - before
	if parkedG > sc.waiters+20 {
		w.failf(waitCost, key, quietFrom, "%d waiters run %d goroutines: waiting must not cost more than one each", sc.waiters, parkedG)
	}
	if quiet > 10 {
		w.failf(waitCost, key, quietFrom, "%d script calls and subscriptions in 1s while %d waiters waited: traffic must not grow with waiters", quiet, sc.waiters)
	}

	// Cancel in batches: I4 is about how late each call returns, not about how fast two
	// cores can run thousands of goroutines woken at the same instant.
	for i := 0; i < len(cancels); i += 50 {
		for _, cancel := range cancels[i:min(i+50, len(cancels))] {
			cancel()
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitFor := func(what string, cond func() bool) {
		from := chaos.Now()
		deadline := time.Now().Add(2 * time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				w.fatalf(liveness, key, from, "timed out after 2 minutes waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	want := int64(sc.waiters / 2)
	waitFor("the cancelled waiters", func() bool { return cancelled.Load() == want })
	counter.Reset()
	releasing := chaos.Now()
	if err := held.Release(ctx); err != nil {
		w.fatalf(setup, key, releasing, "the holder's Release: %v", err)
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		w.fatalf(liveness, key, releasing, "%d of %d waiters acquired in 5 minutes", acquired.Load(), want)
	}
	perAcquire := float64(counter.RoundTrips()) / float64(max(acquired.Load(), 1))
	if acquired.Load() != want {
		w.failf(liveness, key, releasing, "%d waiters acquired, want %d", acquired.Load(), want)
	}
	if perAcquire > 4 {
		w.failf(waitCost, key, releasing, "%.2f round trips per acquisition, want ≤ 4", perAcquire)
	}
	row, vs := w.finish("", fmt.Sprintf("%d waiters on 2 Lockers, %d cancelled (50 every 10 ms)", sc.waiters, want), sc.slack)
	addNote(&row, fmt.Sprintf("while waiting: %d goroutines (%.2f per waiter), heap +%d KiB (%.2f KiB per waiter), %d Redis script calls in 1 s; %.2f round trips per acquisition",
		parkedG, float64(parkedG)/float64(sc.waiters), parkedHeap>>10, float64(parkedHeap)/1024/float64(sc.waiters), quiet, perAcquire))
	return row, vs
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// cancelStorm runs sections whose contexts end at random moments, from before the first
// attempt to the middle of a release, over proxies that add jitter and drop replies; then
// it stops everything at once, Lockers included. Nothing may be left: no lock after its
// TTL, no goroutine.
func cancelStorm(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := sc.tune(baseConfig())
	cfg.TTL = 300 * time.Millisecond
	w := newWorld(t, cfg)
	a := w.addNode("a", true)
	b := w.addNode("b", true)
	ld := load{
		Keys: []string{"s0", "s1", "s2"}, Workers: 2 * sc.workers,
		AcquireMin: 0, AcquireMax: 30 * time.Millisecond,
		HoldMin: 0, HoldMax: 20 * time.Millisecond,
		Nested: true,
	}
	stop := w.run(ld)
	r := rand.New(rand.NewPCG(1, 2))
	n := w.faultLoop(sc.run, 50*time.Millisecond, func(i int) {
		w.fault("jitter", func() {
			for _, p := range []*redistest.Proxy{a.proxy, b.proxy} {
				p.SetLatency(time.Duration(r.IntN(15)) * time.Millisecond)
				if i%7 == 0 {
					p.DropNextReply()
				}
			}
		})
	})
	// Stop in the middle of everything: workers and Lockers together.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		stop()
	}()
	for _, n := range w.nodes {
		_ = n.locker.Close()
	}
	wg.Wait()
	return w.finish("", fmt.Sprintf("random deadlines 0–30 ms, %d× latency jitter 0–15 ms (1 in 7 with a dropped reply), Lockers closed mid-flight", n), sc.slack)
}
