package guard

import (
	"context"
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

// feedSource is a Locker's deployment as its waiters' Hub sees it.
type feedSource struct {
	st      store.Store // the Locker's: its routes, its conns and its refresh
	id      string      // the Locker's ID, which its queue entries carry
	aside   func(func()) bool
	timeout time.Duration // bounds each call (the ReleaseTimeout)
}

// newHub returns the Hub of l's waiters.
func newHub(l *Locker) *feed.Hub {
	src := &feedSource{st: l.st, id: l.id, aside: l.background, timeout: l.cfg.releaseTimeout}
	return feed.New(feed.Config{ID: l.id, Source: src, Done: l.done, Timeout: l.cfg.releaseTimeout})
}

// Routes returns the feeds that carry ch: on a quorum Locker one classic feed per
// server; on a Redis 7 Cluster the sharded feed of the primary that owns ch's slot; else
// the one classic feed.
func (s *feedSource) Routes(ctx context.Context, ch string) ([]feed.Route, error) {
	return s.st.Routes(ctx, ch)
}

// Refresh reloads a Cluster's map after a topology error.
func (s *feedSource) Refresh(err error) { s.st.Refresh(err) }

// Aside runs fn on one of the Locker's background goroutines.
func (s *feedSource) Aside(fn func()) bool { return s.aside(fn) }

// Leave removes the Locker from the wait queue of ch's lock.
func (s *feedSource) Leave(ch string) {
	s.everywhere(ch, func(ctx context.Context, c *store.Conn, k redisKeys) error {
		return c.Client().LRem(ctx, k.Queue, 0, s.id).Err()
	})
}

// PassOn gives the Locker's turn on ch's lock, which nobody here took, to the next
// Locker queued for it.
func (s *feedSource) PassOn(ch string) {
	s.everywhere(ch, func(ctx context.Context, c *store.Conn, k redisKeys) error {
		return wakeScript.Run(ctx, c.Client(), []string{k.Queue}, ch, c.ShardedFlag()).Err()
	})
}

// everywhere runs call aside, best effort and bounded by the ReleaseTimeout, about the
// lock of channel ch on the Locker's deployment, or on each server of a quorum Locker.
func (s *feedSource) everywhere(ch string, call func(context.Context, *store.Conn, redisKeys) error) {
	k := keysOfChannel(ch)
	for _, c := range s.st.Conns() {
		s.aside(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			defer cancel()
			if err := call(ctx, c, k); err != nil {
				c.Refresh(err)
			}
		})
	}
}
