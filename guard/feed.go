package guard

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/redis/go-redis/v9"
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
	c       *conn
	q       *quorum // a quorum Locker's servers, else nil
	id      string  // the Locker's ID, which its queue entries carry
	aside   func(func()) bool
	timeout time.Duration // bounds each call (the ReleaseTimeout)
	sharded atomic.Int32  // 0 unknown, 1 classic Pub/Sub, 2 sharded Pub/Sub
}

// newHub returns the Hub of l's waiters.
func newHub(l *Locker) *feed.Hub {
	src := &feedSource{c: &l.conn, q: l.q, id: l.id, aside: l.background, timeout: l.cfg.releaseTimeout}
	l.feedSrc = src
	return feed.New(feed.Config{ID: l.id, Source: src, Done: l.done, Timeout: l.cfg.releaseTimeout})
}

// Routes returns the feeds that carry ch: on a quorum Locker one classic feed per
// server; on a Redis 7 Cluster the sharded feed of the primary that owns ch's slot; else
// the one classic feed.
func (s *feedSource) Routes(ctx context.Context, ch string) ([]feed.Route, error) {
	if s.q != nil {
		routes := make([]feed.Route, len(s.q.nodes))
		for i, n := range s.q.nodes {
			routes[i] = feed.Route{ID: "server " + strconv.Itoa(i), Open: subscriber(n.client)}
		}
		return routes, nil
	}
	sharded, err := s.isSharded(ctx, ch)
	if err != nil || !sharded {
		return []feed.Route{{Open: subscriber(s.c.client)}}, err
	}
	node, err := s.c.client.(*redis.ClusterClient).MasterForKey(ctx, ch)
	if err != nil {
		return nil, err
	}
	// A node's own client: the connection goes to that node, and a broken one is not
	// redialled by go-redis, whose resubscription would send every channel in one
	// SSUBSCRIBE (see the feed package's doc).
	return []feed.Route{{ID: node.Options().Addr, Sharded: true, Open: subscriber(node)}}, nil
}

// subscriber opens a Pub/Sub connection on c.
func subscriber(c redis.UniversalClient) func() feed.PubSub {
	return func() feed.PubSub { return c.Subscribe(context.Background()) }
}

// isSharded reports whether release notifications for the lock of channel ch travel
// over sharded Pub/Sub: on a Redis Cluster whose nodes run Redis 7 or newer (release.lua
// makes the same choice on the node that runs it). The answer is asked once, of the node
// that owns ch, and kept.
func (s *feedSource) isSharded(ctx context.Context, ch string) (bool, error) {
	switch s.sharded.Load() {
	case 1:
		return false, nil
	case 2:
		return true, nil
	}
	if _, ok := s.c.client.(*redis.ClusterClient); !ok {
		s.sharded.Store(1)
		return false, nil
	}
	v, err := versionScript.Run(ctx, s.c.client, []string{ch}).Int64()
	if err != nil {
		return false, err
	}
	mode := int32(1)
	if v >= 0x070000 {
		mode = 2
	}
	s.sharded.Store(mode)
	return mode == 2, nil
}

// Refresh reloads a Cluster's map after a topology error.
func (s *feedSource) Refresh(err error) { s.c.refresh(err) }

// Aside runs fn on one of the Locker's background goroutines.
func (s *feedSource) Aside(fn func()) bool { return s.aside(fn) }

// Leave removes the Locker from the wait queue of ch's lock.
func (s *feedSource) Leave(ch string) {
	s.everywhere(ch, func(ctx context.Context, c *conn, k redisKeys) error {
		return c.client.LRem(ctx, k.queue, 0, s.id).Err()
	})
}

// PassOn gives the Locker's turn on ch's lock, which nobody here took, to the next
// Locker queued for it.
func (s *feedSource) PassOn(ch string) {
	s.everywhere(ch, func(ctx context.Context, c *conn, k redisKeys) error {
		return wakeScript.Run(ctx, c.client, []string{k.queue}, ch, c.shardedFlag()).Err()
	})
}

// everywhere runs call aside, best effort and bounded by the ReleaseTimeout, about the
// lock of channel ch on the Locker's deployment, or on each server of a quorum Locker.
func (s *feedSource) everywhere(ch string, call func(context.Context, *conn, redisKeys) error) {
	k := keysOfChannel(ch)
	conns := []*conn{s.c}
	if s.q != nil {
		conns = s.q.nodes
	}
	for _, c := range conns {
		s.aside(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			defer cancel()
			if err := call(ctx, c, k); err != nil {
				c.refresh(err)
			}
		})
	}
}
