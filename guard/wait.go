package guard

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

const (
	// How long a new waiter waits for its release-notification subscription to be
	// confirmed before it falls back to sleeping on its backoff alone.
	confirmWait = time.Second
	// How long, at most, a process that handed a lock to another one keeps its newcomers
	// from taking it back (see yield).
	courtesyWindow = 50 * time.Millisecond
	// How long a turn that came with nobody waiting is kept for a goroutine about to wait
	// before it is passed on to the next Locker.
	turnGrace = 100 * time.Millisecond
)

// wait acquires h in Redis under retry policy p. Between attempts it sleeps until the
// lock's release is announced (Pub/Sub), its backoff delay, the holder's TTL, its
// deadline or the end of ctx, whichever comes first. Only one goroutine per key and
// process makes attempts at a time (the key's gate); the others queue behind it in
// arrival order, so Redis sees one waiter per process however many goroutines wait.
func (l *Locker) wait(ctx context.Context, a *acquisition, h *held, p RetryPolicy, deadline time.Time) (granted, error) {
	subscribed, queued, yielding := l.waits.state(h.rk)
	var (
		kw       *keyWait
		entered  bool // kw's gate is ours
		acquired bool
		timer    *time.Timer
		attempts int
		ttl      = time.Duration(-1) // the holder's TTL at the last busy attempt, <0 if unknown
		// queuedRemote: an attempt found the lock busy and joined its Redis-side wait
		queuedRemote bool
	)
	style := h.s.spec.wait
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if entered {
			kw.exit(acquired)
		}
		if kw != nil {
			l.waits.leave(kw, acquired)
		}
		if !acquired && queuedRemote && h.s.spec.leaves {
			l.leave(h)
		}
	}()
	busy := func(cause error) error {
		return &LockedError{Key: h.hk.key, RetryAfter: max(ttl, 0), Attempts: attempts, Err: cause}
	}
	// queue joins the key's waiters and waits for the gate.
	queue := func() error {
		kw = l.waits.join(ctx, h.rk)
		a.startWaiting(ctx)
		if style != waitOwn {
			if err := kw.enter(ctx, deadline, l.done); err != nil {
				return l.waitError(err, busy)
			}
			entered = true
		}
		kw.awaitSubscribed(ctx, deadline, confirmWait)
		return nil
	}
	// A newcomer makes its first attempt at once, even when others of this process queue
	// for the key: its owner may hold the lock through another process (a downstream
	// service reached with the owner's token), which only Redis can tell, and a newcomer
	// waiting behind the queue would then deadlock with it. With a queue, the attempt is
	// polite: it reenters the owner's hold but leaves a free lock to the queue.
	first := mannerWait
	switch {
	case p.limit == limitAttempts && p.attempts == 1:
		first = mannerTry
	case queued || yielding:
		first = mannerPolite
	}
	var woken <-chan struct{} // a release notification since the last attempt
	for {
		if kw != nil {
			if style == waitOwn {
				woken = kw.broadcast()
			} else {
				kw.drain()
				woken = kw.notify
			}
		}
		attempts++
		a.attempts = attempts
		manner := mannerWait
		switch {
		case attempts == 1:
			manner = first
		case p.limit == limitAttempts && attempts >= p.attempts:
			manner = mannerTry // the last one
		}
		// The attempt of a caller that waited, or whose Locker queues for the key, is a
		// step of a handoff: on an auto-pipelining client it is sent at once.
		g, err := l.attempt(ctx, h, manner, attempts > 1 || queued || yielding)
		if err != nil && attempts > 1 && ctx.Err() != nil {
			// The context ended the wait during an attempt: the lock was busy before.
			return granted{}, busy(ctx.Err())
		}
		late := false
		if err == nil && g.acquired && !time.Now().Before(g.sent.Add(h.s.ttl-h.s.driftMargin())) {
			// Granted, but the reply came so late (Redis was down and the client retried)
			// that the lease's validity, measured from the send, has already run out:
			// give the hold back rather than hand out a lost lease. It was an attempt
			// like any other: the policy decides whether another one follows.
			l.undo(h, g.nonce)
			late, g = true, granted{pttl: -1}
		}
		if err != nil || g.acquired {
			acquired = g.acquired
			return g, err
		}
		ttl = g.pttl
		queuedRemote = queuedRemote || manner != mannerTry
		if p.limit == limitAttempts && attempts >= p.attempts ||
			!deadline.IsZero() && !time.Now().Before(deadline) {
			if late {
				return granted{}, &RedisError{Op: "acquire", Key: h.hk.key, Err: errLateGrant}
			}
			return granted{}, busy(nil)
		}
		if late {
			continue // the lock was free: try again at once
		}
		if kw == nil {
			if err := queue(); err != nil {
				return granted{}, err
			}
			woken = kw.notify // a waitOwn waiter always attempts again first (below)
			switch {
			case !subscribed || style != waitGated:
				// The lock may have been freed before the subscription existed; and for a
				// shared kind, the goroutine ahead getting in says the lock admits more,
				// while a fair lock's grant to this owner comes with no other signal.
				continue
			case ttl < 0 && queued:
				// A polite attempt left the lock free to this process's queue, which this
				// goroutine now heads: the lock may still be free.
				continue
			case queued && !kw.predecessorAcquired():
				continue // the goroutine ahead gave up: the lock may be free
			}
			// Otherwise a release since the last attempt left a notification.
		}
		delay := p.delay().Delay(max(attempts, 1))
		if ttl >= 0 && ttl+time.Millisecond < delay {
			delay = ttl + time.Millisecond
		}
		if !deadline.IsZero() {
			delay = min(delay, time.Until(deadline))
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-woken:
		case <-timer.C:
		case <-ctx.Done():
			return granted{}, busy(ctx.Err())
		case <-l.done:
			return granted{}, ErrClosed
		}
	}
}

// leave tells Redis, aside, that h's owner no longer waits (kinds whose spec leaves): it
// gives up its place in a fair lock's queue, or a waiting writer's hold on new readers.
func (l *Locker) leave(h *held) {
	l.background(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.releaseTimeout)
		defer cancel()
		l.refresh(l.runScript(ctx, h.s.spec.acquire, h.acquireArgs(l.newNonce(), mannerLeave), true).Err())
	})
}

// waitError turns the error of a wait that ended before an attempt into the call's error.
func (l *Locker) waitError(err error, busy func(error) error) error {
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case errors.Is(err, errDeadline):
		return busy(nil)
	}
	return busy(err)
}

var errDeadline = errors.New("guard: retry policy deadline")

// errLateGrant ends an acquisition whose last attempt took the lock but whose reply came
// back after the lease's validity, counted from the send, had run out.
var errLateGrant = errors.New("the lock was granted, but the reply arrived after the lease's validity had run out; the grant was undone")

// keyWait is the waiting state of one key in this process.
type keyWait struct {
	channel string
	refs    int           // goroutines waiting; guarded by waiters.mu
	idle    time.Time     // when refs fell to zero; guarded by waiters.mu
	gate    chan struct{} // holds a token while one goroutine makes attempts
	notify  chan struct{} // a release was seen since the last drain

	woken          atomic.Pointer[chan struct{}] // closed by the next signal (see broadcast)
	handedAcquired atomic.Bool                   // the last goroutine to leave the gate took the lock
	ok             chan struct{}                 // closed at the first confirmation of the subscription
	okOnce         bool                          // ok is closed; guarded by waiters.mu
	live           bool                          // the subscription is confirmed now; guarded by waiters.mu
}

func (kw *keyWait) drain() {
	select {
	case <-kw.notify:
	default:
	}
}

// signal wakes the goroutine at the gate, and every goroutine waiting on broadcast.
func (kw *keyWait) signal() {
	select {
	case kw.notify <- struct{}{}:
	default:
	}
	if c := kw.woken.Swap(nil); c != nil {
		close(*c)
	}
}

// broadcast returns a channel that the next signal closes: the waiters of a kind that
// waits without the gate (waitOwn) all wake at each release notification.
func (kw *keyWait) broadcast() <-chan struct{} {
	for {
		if c := kw.woken.Load(); c != nil {
			return *c
		}
		c := make(chan struct{})
		if kw.woken.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

// enter takes the key's gate.
func (kw *keyWait) enter(ctx context.Context, deadline time.Time, done <-chan struct{}) error {
	select {
	case kw.gate <- struct{}{}:
		return nil
	default:
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case kw.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return errDeadline
	case <-done:
		return ErrClosed
	}
}

// exit gives the gate to the next goroutine, telling it whether this one took the lock.
func (kw *keyWait) exit(acquired bool) {
	kw.handedAcquired.Store(acquired)
	<-kw.gate
}

// predecessorAcquired reports whether the goroutine that held the gate last took the lock.
func (kw *keyWait) predecessorAcquired() bool { return kw.handedAcquired.Load() }

// awaitSubscribed waits, at most d, for the key's subscription to be confirmed.
func (kw *keyWait) awaitSubscribed(ctx context.Context, deadline time.Time, d time.Duration) {
	select {
	case <-kw.ok:
		return
	default:
	}
	if !deadline.IsZero() {
		d = min(d, time.Until(deadline))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-kw.ok:
	case <-t.C:
	case <-ctx.Done():
	}
}
