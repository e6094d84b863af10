package watchdog

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

const (
	// batchWindow lets renewals due within this window share one batch.
	batchWindow = 5 * time.Millisecond
	// linger is how long the goroutine outlives the last lease: under steady traffic
	// the next lease comes soon, and a goroutine per lease would cost more.
	linger = 500 * time.Millisecond
	// inflightWait bounds how long Remove with wait waits for a renewal in flight. On a
	// healthy server that renewal completes in a round trip; on a stalled one the
	// release goes ahead, and a renewal that lands after it finds nothing to renew.
	inflightWait = 100 * time.Millisecond
)

// Result is what one lease's renewal came to.
type Result struct {
	// TTL is the time the renewal asked for; 0 when nothing was sent because the
	// lease may not be renewed any more. A lease with TTL 0 is not scheduled again.
	TTL time.Duration
	// Err is why the renewal failed; nil when it succeeded.
	Err error
	// Lost reports that the lease is gone for good: not scheduled again.
	Lost bool
}

// Config is what a Dog calls back.
type Config[L any] struct {
	// Interval is the time between two renewals of a lease.
	Interval func(L) time.Duration
	// Send renews a batch of leases due at about the same time, sent at sent, and
	// returns each one's Result in order.
	Send func(batch []L, sent time.Time) []Result
	// Report tells the leases of a batch how their renewal went. live[i] is false for a
	// lease removed while its renewal was in flight: it must be left alone.
	Report func(batch []L, live []bool, sent time.Time, res []Result)
	// Busy, when set, is told when the goroutine starts (true: the first lease was
	// added) and when it ends (false: it lingered with none), in that order, under the
	// Dog's lock: it must not call the Dog, nor wait for anything.
	Busy func(on bool)
}

// Entry is a lease's place in a Dog's queue, carried by the lease (see Dog.Add).
type Entry[L any] struct {
	lease    L
	next     time.Time     // next renewal
	index    int           // position in the queue, -1 when absent
	inflight chan struct{} // closed when the batch renewing the lease is done
	stopped  bool          // renewals stopped for good
	soon     bool          // Soon was called while the lease's renewal was in flight
}

// Dog renews the leases added to it until they are removed or lost.
type Dog[L any] struct {
	cfg Config[L]

	mu      sync.Mutex
	q       queue[L]
	running bool
	closed  bool
	until   time.Time // when the sleeping goroutine wakes by itself; zero while it works
	wake    chan struct{}
	quit    chan struct{}
	loop    sync.WaitGroup
}

// New returns a Dog that calls cfg's functions; its goroutine starts with the first
// lease.
func New[L any](cfg Config[L]) *Dog[L] {
	return &Dog[L]{cfg: cfg, wake: make(chan struct{}, 1), quit: make(chan struct{})}
}

// Add schedules lease's first renewal one interval after sent, keeping its place in e,
// which the lease carries and which must not be in use. On a closed Dog it does
// nothing. It may be called with the caller's own locks held: it takes only the Dog's.
func (d *Dog[L]) Add(e *Entry[L], lease L, sent time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e.lease, e.index, e.inflight, e.stopped = lease, -1, nil, false
	if d.closed {
		e.stopped = true
		return
	}
	e.next = sent.Add(d.cfg.Interval(lease))
	heap.Push(&d.q, e)
	switch {
	case !d.running:
		d.running = true
		d.busy(true)
		d.loop.Add(1)
		go d.run()
	case !d.until.IsZero() && e.next.Before(d.until):
		// The goroutine sleeps past e's first renewal: wake it to sleep less. (Usually
		// it wakes sooner anyway, so most leases cost it nothing.)
		d.wakeUp()
	}
}

// Remove stops the renewals of e's lease. With wait, it also waits, up to 100 ms and
// within ctx, for a renewal of the lease already in flight, so that normally none is
// sent after Remove returns.
func (d *Dog[L]) Remove(ctx context.Context, e *Entry[L], wait bool) {
	d.mu.Lock()
	e.stopped = true
	if e.index >= 0 && e.index < len(d.q) && d.q[e.index] == e {
		heap.Remove(&d.q, e.index)
		if len(d.q) == 0 && !d.until.IsZero() {
			// The goroutine sleeps until this lease's renewal: wake it to linger from
			// now, not from then (its end stops the force-release listening, Busy).
			d.wakeUp()
		}
	}
	inflight := e.inflight
	d.mu.Unlock()
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

// busy calls cfg.Busy, if set. d.mu is held.
func (d *Dog[L]) busy(on bool) {
	if d.cfg.Busy != nil {
		d.cfg.Busy(on)
	}
}

// Soon renews e's lease now instead of at its time: the lease's holder has heard that
// the lock may be gone (a force release), and the renewal finds out. A renewal of the
// lease in flight, which may have been sent before the news, is followed by another at
// once. It does nothing for a lease removed or not added.
func (d *Dog[L]) Soon(e *Entry[L]) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case e.stopped || d.closed:
		return
	case e.inflight != nil:
		e.soon = true
		return
	case e.index < 0 || e.index >= len(d.q) || d.q[e.index] != e:
		return
	}
	e.next = time.Now()
	heap.Fix(&d.q, e.index)
	d.wakeUp()
}

// wakeUp wakes the sleeping goroutine to look at the queue again; a wake-up already
// pending does.
func (d *Dog[L]) wakeUp() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Close stops the goroutine, once its batch in flight is done, and renews nothing
// more.
func (d *Dog[L]) Close() {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.quit)
	}
	d.mu.Unlock()
	d.loop.Wait()
}

// run sleeps until the first lease is due, renews every lease due within batchWindow
// in one batch, puts them back in the queue, has them told the outcome, and ends after
// lingering with no lease to renew.
func (d *Dog[L]) run() {
	defer d.loop.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	idle := false // the queue was empty for a whole linger
	for {
		d.mu.Lock()
		if d.closed || len(d.q) == 0 && idle {
			d.running = false
			d.busy(false)
			d.mu.Unlock()
			return
		}
		if len(d.q) == 0 {
			idle = !d.sleepUntil(timer, time.Now().Add(linger))
			continue
		}
		idle = false
		now := time.Now()
		if next := d.q[0].next; next.After(now) {
			d.sleepUntil(timer, next)
			continue
		}
		batch, leases, done := d.takeDue(now.Add(batchWindow))
		d.mu.Unlock()

		sent := time.Now()
		res := d.cfg.Send(leases, sent)
		live := d.reschedule(batch, done, sent, res)
		d.cfg.Report(leases, live, sent, res)
	}
}

// sleepUntil waits, d.mu held on entry and released, until t, a new lease or the Dog's
// closing. It reports whether something other than the time woke it.
func (d *Dog[L]) sleepUntil(timer *time.Timer, t time.Time) (woken bool) {
	d.until = t
	d.mu.Unlock()
	timer.Reset(time.Until(t))
	select {
	case <-timer.C:
	case <-d.wake:
		woken = true
	case <-d.quit:
		woken = true
	}
	d.mu.Lock()
	d.until = time.Time{}
	d.mu.Unlock()
	return woken
}

// takeDue pops the entries due by horizon, one batch, and marks them in flight until
// done is closed. d.mu is held.
func (d *Dog[L]) takeDue(horizon time.Time) (batch []*Entry[L], leases []L, done chan struct{}) {
	for len(d.q) > 0 && !d.q[0].next.After(horizon) {
		batch = append(batch, heap.Pop(&d.q).(*Entry[L]))
	}
	done = make(chan struct{})
	leases = make([]L, len(batch))
	for i, e := range batch {
		e.inflight = done
		leases[i] = e.lease
	}
	return batch, leases, done
}

// reschedule puts the entries of a batch whose leases are still renewed back in the
// queue (see the package doc for when), reports which were not removed meanwhile, and
// ends their being in flight.
func (d *Dog[L]) reschedule(batch []*Entry[L], done chan struct{}, sent time.Time, res []Result) []bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	live := make([]bool, len(batch))
	for i, e := range batch {
		e.inflight = nil
		soon := e.soon
		e.soon = false
		if e.stopped {
			continue
		}
		live[i] = true
		interval := d.cfg.Interval(e.lease)
		switch {
		case res[i].Lost || res[i].TTL <= 0 || d.closed:
			continue
		case soon:
			e.next = time.Now() // news came during the renewal: renew again
		case res[i].Err == nil:
			e.next = sent.Add(interval)
		default: // transient: retry sooner, until the lease's validity runs out
			e.next = time.Now().Add(max(interval/4, time.Millisecond))
		}
		heap.Push(&d.q, e)
	}
	close(done)
	return live
}

// queue orders entries by next renewal.
type queue[L any] []*Entry[L]

func (q queue[L]) Len() int           { return len(q) }
func (q queue[L]) Less(i, j int) bool { return q[i].next.Before(q[j].next) }
func (q queue[L]) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *queue[L]) Push(x any) {
	e := x.(*Entry[L])
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *queue[L]) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*q = old[:len(old)-1]
	return e
}
