package guard

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Force releases are announced. ForceRelease publishes the name of the lock it ended
// (its Redis hash, prefix and kind included) on forceChannel, on every server it ran on,
// once its script has run. Every Locker that holds a lease listens there — one classic
// Pub/Sub connection per server, opened with its first hold and kept until Close — and
// renews its holds of that lock at once: the renewal finds them gone and ends their
// leases (ErrLeaseLost), within a round trip of the release instead of at the next
// renewal. A message is only a hint: a hold the renewal finds still there (another lock
// of the same name, a message sent by hand) goes on as before, having cost a renewal.
//
// Classic Pub/Sub reaches every node of a Cluster, whichever node the release ran on,
// and survives a Sentinel failover (go-redis subscribes again on the new primary). A
// Locker that was not connected when the message was sent (its connection was being
// redialled) learns at its next renewal, as before.

// forceChannel carries the names of the locks ForceRelease ended. It names no key, and
// is the same for every prefix: a Locker matches the names against its own holds.
const forceChannel = "guardkit:force-released"

// forceWatch is a Locker's listening on forceChannel.
type forceWatch struct {
	started atomic.Bool
}

// watchForce starts listening on forceChannel on every server of l's store, once: called
// when l first holds a lease.
func (l *Locker) watchForce() {
	if l.force.started.Load() || !l.force.started.CompareAndSwap(false, true) {
		return
	}
	for _, c := range l.st.conns() {
		l.background(func() { l.listenForce(c.client) })
	}
}

// listenForce hands each force-release message that c's Pub/Sub delivers to forced,
// until l is closed.
func (l *Locker) listenForce(c redis.UniversalClient) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-l.done:
			cancel() // a subscription still being made gives up
		case <-stop:
		}
	}()
	ps := c.Subscribe(ctx, forceChannel)
	defer ps.Close()
	msgs := ps.Channel()
	for {
		select {
		case <-l.done:
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			l.forced(m.Payload)
		}
	}
}

// forced renews at once this Locker's holds of the lock whose Redis name is lock.
func (l *Locker) forced(lock string) {
	l.mu.Lock()
	var hs []*held
	for _, h := range l.held {
		if h.rk.lock == lock {
			hs = append(hs, h)
		}
	}
	l.mu.Unlock()
	for _, h := range hs {
		if h.isHeld() {
			l.dog.Soon(&h.renewal)
		}
	}
}

// announceForce publishes on c that ForceRelease ended the lock named lock (see
// forceChannel). Best effort: a holder that misses it learns at its next renewal.
func announceForce(ctx context.Context, c *conn, lock string) {
	_ = c.client.Publish(ctx, forceChannel, lock).Err()
}
