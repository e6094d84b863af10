package guard

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// renewBatchWindow lets renewals due within this window share one pipeline.
	renewBatchWindow = 5 * time.Millisecond
	// renewLinger is how long the watchdog goroutine outlives the last lease.
	renewLinger = 500 * time.Millisecond
)

// renewer is the Locker's watchdog: one goroutine, started when the first lease is held
// and ended renewLinger after none is, renews every due lease in one pipelined round trip.
type renewer struct {
	l *Locker // the leases' table lock and telemetry
	c *conn   // where renewals are sent

	mu      sync.Mutex
	q       renewHeap
	running bool
	closed  bool
	until   time.Time // when the sleeping goroutine wakes by itself; zero while it works
	wake    chan struct{}
	quit    chan struct{}
	loop    sync.WaitGroup
}

// add schedules h's first renewal. l.mu is held.
func (r *renewer) add(h *held, sent time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h.index = -1 // not queued
	if r.closed {
		return
	}
	if r.wake == nil {
		r.wake = make(chan struct{}, 1)
		r.quit = make(chan struct{})
	}
	h.next = sent.Add(h.s.renewInterval())
	heap.Push(&r.q, h)
	switch {
	case !r.running:
		r.running = true
		r.loop.Add(1)
		go r.run()
	case !r.until.IsZero() && h.next.Before(r.until):
		// The goroutine sleeps past h's first renewal: wake it to sleep less. (Usually it
		// wakes sooner anyway, so most acquisitions cost it nothing.)
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// inflightWait bounds how long a release waits for a renewal of its lease already in
// flight. On a healthy Redis that renewal completes in a round trip; on a stalled one the
// release goes ahead: a renewal that lands after it finds the lock gone and does nothing.
const inflightWait = 100 * time.Millisecond

// remove stops h's renewal. With wait, it also waits, up to inflightWait and within ctx,
// for a renewal of h already in flight, so that normally no renewal of h is sent after
// remove returns.
func (r *renewer) remove(ctx context.Context, h *held, wait bool) {
	r.mu.Lock()
	h.stopped = true
	if h.index >= 0 {
		heap.Remove(&r.q, h.index)
	}
	inflight := h.inflight
	r.mu.Unlock()
	if wait && inflight != nil {
		t := time.NewTimer(inflightWait)
		defer t.Stop()
		select {
		case <-inflight:
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

func (r *renewer) close() {
	r.mu.Lock()
	r.closed = true
	if r.quit != nil {
		close(r.quit)
	}
	r.mu.Unlock()
	r.loop.Wait()
}

// run is the watchdog's loop: it sleeps until the first lease is due, renews every lease
// due within renewBatchWindow in one batch, puts them back in the queue, tells them the
// outcome, and ends after lingering renewLinger with no lease to renew.
func (r *renewer) run() {
	defer r.loop.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	idle := false // the queue was empty for a whole renewLinger
	for {
		r.mu.Lock()
		if r.closed || len(r.q) == 0 && idle {
			r.running = false
			r.mu.Unlock()
			return
		}
		if len(r.q) == 0 {
			// Linger a little: under steady traffic the next lease comes soon, and a
			// goroutine per lease would cost more than the wait.
			idle = !r.sleepUntil(timer, time.Now().Add(renewLinger))
			continue
		}
		idle = false
		now := time.Now()
		if next := r.q[0].next; next.After(now) {
			r.sleepUntil(timer, next)
			continue
		}
		batch, done := r.takeDue(now.Add(renewBatchWindow))
		r.mu.Unlock()

		sent := time.Now()
		errs, ttls := r.send(batch, sent)
		live := r.reschedule(batch, done, sent, errs, ttls)
		r.report(batch, live, sent, errs, ttls)
	}
}

// sleepUntil waits, r.mu held on entry and released, until t, a new lease or the
// renewer's closing. It reports whether something other than the time woke it.
func (r *renewer) sleepUntil(timer *time.Timer, t time.Time) (woken bool) {
	r.until = t
	r.mu.Unlock()
	timer.Reset(time.Until(t))
	select {
	case <-timer.C:
	case <-r.wake:
		woken = true
	case <-r.quit:
		woken = true
	}
	r.mu.Lock()
	r.until = time.Time{}
	r.mu.Unlock()
	return woken
}

// takeDue pops the leases due by horizon, one batch, and marks them in flight until done
// is closed. r.mu is held.
func (r *renewer) takeDue(horizon time.Time) (batch []*held, done chan struct{}) {
	for len(r.q) > 0 && !r.q[0].next.After(horizon) {
		batch = append(batch, heap.Pop(&r.q).(*held))
	}
	done = make(chan struct{})
	for _, h := range batch {
		h.inflight = done
	}
	return batch, done
}

// reschedule puts the leases of a batch that are still held back in the queue: at the
// next period after a renewal, sooner after a transient failure (until their validity
// runs out), never after a lost one. It reports which were still held, and ends their
// being in flight.
func (r *renewer) reschedule(batch []*held, done chan struct{}, sent time.Time, errs []error, ttls []time.Duration) []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := make([]bool, len(batch))
	for i, h := range batch {
		h.inflight = nil
		if h.stopped {
			continue
		}
		live[i] = true
		interval := h.s.renewInterval()
		switch {
		case errs[i] == nil:
			h.next = sent.Add(interval)
		case errs[i] == errNotOwner:
			continue
		default: // transient: retry sooner, until validity runs out
			h.next = time.Now().Add(max(interval/4, time.Millisecond))
		}
		if ttls[i] > 0 {
			heap.Push(&r.q, h)
		}
	}
	close(done)
	return live
}

// report tells each live lease of a batch, and telemetry, how its renewal went: renewed
// (its validity moves on), lost, or failed for now.
func (r *renewer) report(batch []*held, live []bool, sent time.Time, errs []error, ttls []time.Duration) {
	tel := r.l.tel
	for i, h := range batch {
		if !live[i] {
			continue // released meanwhile
		}
		switch {
		case errs[i] == nil:
			if ttls[i] > 0 {
				h.renewed(sent, ttls[i])
				tel.renewed(h, renewOK, nil)
			}
		case errs[i] == errNotOwner:
			tel.renewed(h, renewLost, nil)
			h.lose("lock deleted or taken by another owner", nil)
		default:
			tel.renewed(h, renewFailed, errs[i])
			h.renewFailed(errs[i])
		}
	}
}

var errNotOwner = &LeaseLostError{Reason: "not the owner"}

// send renews batch in one pipeline, or, for leases with SyncReplicas, one pipeline per
// primary that ends with a WAIT, the pipelines running at once. For each lease it returns
// nil, errNotOwner, a *ReplicaError (renewed, but too few replicas acknowledged it in
// time) or a *RedisError, and the TTL it asked for (0 when MaxHold allows no more
// renewal, in which case nothing was sent for it).
func (r *renewer) send(batch []*held, sent time.Time) ([]error, []time.Duration) {
	errs := make([]error, len(batch))
	ttls, timeout := renewTTLs(batch, sent)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	plain, synced := r.group(ctx, batch, ttls, errs)
	if r.l.q != nil {
		if len(plain.idx) > 0 {
			r.renewQuorum(timeout, batch, plain.idx, ttls, errs)
		}
		return errs, ttls
	}
	plain.node, plain.legacy = r.c.client, &r.c.legacy
	var wg sync.WaitGroup
	for _, g := range synced {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.run(ctx, batch, ttls)
		}()
	}
	if len(plain.idx) > 0 {
		plain.run(ctx, batch, ttls)
	}
	wg.Wait()
	for _, g := range append(synced, plain) {
		r.outcomes(g, batch, errs)
	}
	return errs, ttls
}

// renewTTLs returns the TTL each lease of batch asks for, cut to what MaxHold leaves it
// from sent, and the shortest TTL of the batch, which bounds the renewal calls.
func renewTTLs(batch []*held, sent time.Time) (ttls []time.Duration, timeout time.Duration) {
	ttls = make([]time.Duration, len(batch))
	for i, h := range batch {
		ttls[i] = h.s.ttl
		if lim := h.holdLimit(); !lim.IsZero() {
			ttls[i] = min(ttls[i], lim.Sub(sent))
		}
		if timeout == 0 || h.s.ttl < timeout {
			timeout = h.s.ttl
		}
	}
	return ttls, timeout
}

// group sorts the leases of batch that still have a TTL to ask for (a TTL under 1 ms is
// set to 0: nothing is sent) into one group for the leases that wait for no replica (a
// Cluster pipeline splits it by node itself) and one per primary for those that do. A
// lease whose primary cannot be found gets its error in errs.
func (r *renewer) group(ctx context.Context, batch []*held, ttls []time.Duration, errs []error) (plain *renewGroup, synced []*renewGroup) {
	plain = &renewGroup{}
	for i, h := range batch {
		if ttls[i] < time.Millisecond {
			ttls[i] = 0
			continue
		}
		if h.s.syncReplicas == 0 {
			plain.idx = append(plain.idx, i)
			continue
		}
		node, err := r.c.syncNode(ctx, h.rk.lock)
		if err != nil {
			r.c.refresh(err)
			errs[i] = &RedisError{Op: "renew", Key: h.hk.key, Err: err}
			continue
		}
		j := slices.IndexFunc(synced, func(g *renewGroup) bool { return g.node == node })
		if j < 0 {
			synced = append(synced, &renewGroup{node: node, legacy: &r.c.legacy})
			j = len(synced) - 1
		}
		g := synced[j]
		g.idx = append(g.idx, i)
		g.want = max(g.want, h.s.syncReplicas)
		g.wait = max(g.wait, h.s.syncTimeout)
	}
	return plain, synced
}

// outcomes reads the replies of group g into errs: nil, errNotOwner, a *ReplicaError or
// a *RedisError for each of its leases (see send).
func (r *renewer) outcomes(g *renewGroup, batch []*held, errs []error) {
	for k, i := range g.idx {
		h := batch[i]
		n, err := g.cmds[k].Int64()
		switch {
		case err != nil:
			r.c.refresh(err)
			errs[i] = &RedisError{Op: "renew", Key: h.hk.key, Err: err}
		case n != 1:
			errs[i] = errNotOwner
		case g.want > 0 && (g.waitErr[k] != nil || g.acked[k] < int64(h.s.syncReplicas)):
			errs[i] = &ReplicaError{Key: h.hk.key, Want: h.s.syncReplicas, Acked: int(g.acked[k]), Err: g.waitErr[k], Renewal: true}
		}
	}
}

// renewGroup is the renewals sent in one pipeline to one node: with want > 0, followed
// by WAIT want wait on the same connection.
type renewGroup struct {
	node    redis.Cmdable
	legacy  *atomic.Bool // the conn's: the servers take the scripts' plain form (see script)
	idx     []int        // indexes in the batch
	want    int
	wait    time.Duration
	cmds    []*redis.Cmd // by position in idx
	acked   []int64      // replicas that acknowledged, by position in idx (want > 0)
	waitErr []error      // the WAIT's error, by position in idx (want > 0)
}

// run sends the group's renewals; renewals that met NOSCRIPT are sent again with EVAL
// (and once more in the scripts' plain form when the server cannot parse their "#!lua"
// line, which legacy then records).
func (g *renewGroup) run(ctx context.Context, batch []*held, ttls []time.Duration) {
	g.cmds = make([]*redis.Cmd, len(g.idx))
	g.acked = make([]int64, len(g.idx))
	g.waitErr = make([]error, len(g.idx))
	exec := func(pos []int, form func(*script) (string, any)) {
		pipe := g.node.Pipeline()
		for _, k := range pos {
			h := batch[g.idx[k]]
			cmd, src := form(h.s.spec.renew)
			keys := h.renewKeys()
			args := make([]any, 0, 5+len(keys))
			args = append(args, cmd, src, len(keys))
			for _, key := range keys {
				args = append(args, key)
			}
			g.cmds[k] = pipe.Do(ctx, append(args, string(h.hk.owner), ttls[g.idx[k]].Milliseconds())...)
		}
		var w *redis.Cmd
		if g.want > 0 {
			w = pipe.Do(ctx, "wait", g.want, g.wait.Milliseconds())
		}
		_, _ = pipe.Exec(ctx)
		if w != nil {
			acked, err := w.Int64()
			for _, k := range pos {
				g.acked[k], g.waitErr[k] = acked, err
			}
		}
	}
	legacy := g.legacy.Load()
	all := make([]int, len(g.idx))
	for k := range all {
		all[k] = k
	}
	exec(all, func(s *script) (string, any) { sha, _ := s.form(legacy); return "evalsha", sha })
	if again := g.failed(all, func(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }); len(again) > 0 {
		exec(again, func(s *script) (string, any) { _, src := s.form(legacy); return "eval", src })
		if again = g.failed(again, flagsRefused); !legacy && len(again) > 0 {
			exec(again, func(s *script) (string, any) { return "eval", s.src6 })
			if len(g.failed(again, flagsRefused)) == 0 {
				g.legacy.Store(true)
			}
		}
	}
}

// failed returns the positions among pos whose renewal's error matches.
func (g *renewGroup) failed(pos []int, match func(error) bool) []int {
	var out []int
	for _, k := range pos {
		if err := g.cmds[k].Err(); err != nil && match(err) {
			out = append(out, k)
		}
	}
	return out
}

// renewHeap orders leases by next renewal.
type renewHeap []*held

func (q renewHeap) Len() int           { return len(q) }
func (q renewHeap) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q renewHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *renewHeap) Push(x any) {
	h := x.(*held)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *renewHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
