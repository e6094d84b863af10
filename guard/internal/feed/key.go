package feed

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Why Key.Enter stopped waiting for the gate (besides the context's error).
var (
	// ErrDeadline: the caller's deadline passed.
	ErrDeadline = errors.New("guard: retry policy deadline")
	// ErrClosed: the owner closed.
	ErrClosed = errors.New("guard: locker closed")
	// ErrChosen: the wait was chosen as a deadlock's victim.
	ErrChosen = errors.New("guard: chosen as a deadlock's victim")
)

// Key is the waiting state of one lock in this process (one channel), shared by its
// waiting goroutines.
type Key struct {
	channel string
	refs    int           // goroutines waiting; guarded by Hub.mu
	idle    time.Time     // when refs fell to zero; guarded by Hub.mu
	gate    chan struct{} // holds a token while one goroutine makes attempts
	notify  chan struct{} // a release was seen since the last drain

	woken          atomic.Pointer[chan struct{}] // closed by the next signal (see Broadcast)
	handedAcquired atomic.Bool                   // the last goroutine to leave the gate took the lock
	ok             chan struct{}                 // closed at the first confirmation of the subscription
	okOnce         bool                          // ok is closed; guarded by Hub.mu
	live           bool                          // the subscription is confirmed now; guarded by Hub.mu
	feed           *feed                         // the sharded feed its channel is subscribed on; guarded by Hub.mu
}

func newKey(channel string) *Key {
	return &Key{
		channel: channel,
		refs:    1,
		gate:    make(chan struct{}, 1),
		notify:  make(chan struct{}, 1),
		ok:      make(chan struct{}),
	}
}

// Notify returns the channel that receives a value when a release was seen since the
// last Drain: the goroutine at the gate sleeps on it.
func (k *Key) Notify() <-chan struct{} { return k.notify }

// Drain forgets a release seen before: the next attempt is about to ask Redis anyway.
func (k *Key) Drain() {
	select {
	case <-k.notify:
	default:
	}
}

// Signal wakes the goroutine at the gate, and every goroutine waiting on Broadcast.
func (k *Key) Signal() {
	select {
	case k.notify <- struct{}{}:
	default:
	}
	if c := k.woken.Swap(nil); c != nil {
		close(*c)
	}
}

// Broadcast returns a channel that the next Signal closes: the waiters of a kind that
// waits without the gate all wake at each release notification.
func (k *Key) Broadcast() <-chan struct{} {
	for {
		if c := k.woken.Load(); c != nil {
			return *c
		}
		c := make(chan struct{})
		if k.woken.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

// Enter takes the key's gate, waiting in arrival order. It stops waiting with ctx's
// error, ErrDeadline at deadline (none when zero), ErrClosed when done is closed, or
// ErrChosen when dead is (a wait chosen as a deadlock's victim).
func (k *Key) Enter(ctx context.Context, deadline time.Time, done, dead <-chan struct{}) error {
	select {
	case k.gate <- struct{}{}:
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
	case k.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return ErrDeadline
	case <-done:
		return ErrClosed
	case <-dead:
		return ErrChosen
	}
}

// Exit gives the gate to the next goroutine, telling it whether this one took the lock.
func (k *Key) Exit(acquired bool) {
	k.handedAcquired.Store(acquired)
	<-k.gate
}

// PredecessorAcquired reports whether the goroutine that held the gate last took the
// lock.
func (k *Key) PredecessorAcquired() bool { return k.handedAcquired.Load() }

// AwaitSubscribed waits, at most d and not past deadline, for the key's subscription to
// be confirmed.
func (k *Key) AwaitSubscribed(ctx context.Context, deadline time.Time, d time.Duration) {
	select {
	case <-k.ok:
		return
	default:
	}
	if !deadline.IsZero() {
		d = min(d, time.Until(deadline))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-k.ok:
	case <-t.C:
	case <-ctx.Done():
	}
}
