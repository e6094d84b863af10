package guard

import (
	"time"

	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// The waiters of a Locker learn that a lock may be free through a feed.Hub, whose
// package doc states the whole wake-up and turn protocol. This file is the Hub's view of
// the Locker's deployment (feed.Source): which Pub/Sub feeds carry a lock's channel, and
// the calls the protocol makes in Redis.

// Timing of the wait that this side of the protocol sets.
const (
	// How long a new waiter waits for its release-notification subscription to be
	// confirmed before it falls back to sleeping on its backoff alone.
	confirmWait = time.Second
	// How long, at most, a process that handed a lock to another one keeps its newcomers
	// from taking it back (see feed.Hub.Yield).
	courtesyWindow = 50 * time.Millisecond
)

// newHub returns the Hub of l's waiters, fed by its store (store.NewFeedSource).
func newHub(l *Locker) *feed.Hub {
	src := store.NewFeedSource(l.st, l.id, l.background, l.cfg.releaseTimeout)
	return feed.New(feed.Config{ID: l.id, Source: src, Done: l.done, Timeout: l.cfg.releaseTimeout})
}
