package guard

import (
	"context"
	"sync"

	"github.com/guardkit/guardkit/guard/internal/store"
)

// Force releases are announced. ForceRelease publishes the name of the lock it ended
// (its Redis hash, prefix and kind included) on forceChannel, on every server it ran on,
// once its script has run. A Locker listens there while it holds leases — one classic
// Pub/Sub connection per server, opened when its watchdog starts (the first lease) and
// closed when the watchdog ends (a moment after the last lease) — and renews its holds
// of that lock at once: the renewal finds them gone and ends their leases
// (ErrLeaseLost), within a round trip of the release instead of at the next renewal. A
// message is only a hint: a hold the renewal finds still there (another lock of the
// same name, a message sent by hand) goes on as before, having cost a renewal.
//
// Classic Pub/Sub reaches every node of a Cluster, whichever node the release ran on,
// and survives a Sentinel failover (go-redis subscribes again on the new primary). A
// Locker whose subscription was not in place when the message was sent (its first
// lease was a moment old, its connection was being redialled) learns at its next
// renewal, as before.

// forceChannel carries the names of the locks ForceRelease ended. It names no key, and
// is the same for every prefix: a Locker matches the names against its own holds.
const forceChannel = "guardkit:force-released"

// forceWatch is a Locker's listening on forceChannel.
type forceWatch struct {
	mu   sync.Mutex
	stop context.CancelFunc // ends the listening; nil while not listening
}

// listenForce starts (on) or ends listening on forceChannel on every server of l's
// store: called by the watchdog when its goroutine starts and ends, under its lock, so
// that the calls come in order (Close ends the watchdog, and so the listening). It does
// not wait for anything.
func (l *Locker) listenForce(on bool) {
	f := &l.force
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !on && f.stop != nil:
		f.stop()
		f.stop = nil
	case on && f.stop == nil:
		var ctx context.Context
		ctx, f.stop = context.WithCancel(context.Background())
		for _, c := range l.st.Conns() {
			l.background(func() { c.Listen(ctx, forceChannel, l.forced) })
		}
	}
}

// forced renews at once this Locker's holds of the lock whose Redis name is lock.
func (l *Locker) forced(lock string) {
	l.mu.Lock()
	var hs []*held
	for _, h := range l.held {
		if h.sh.Keys.Lock == lock {
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
func announceForce(ctx context.Context, c *store.Conn, lock string) {
	_ = c.Publish(ctx, forceChannel, lock)
}
