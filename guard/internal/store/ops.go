package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/guardkit/guardkit/guard/internal/script"
)

// The calls besides the lock protocol that the engine makes: its wait-for graph's
// scripts, the operators' reads and force release, the wake-up protocol's queue calls,
// the force-release announcements. Each runs on one Conn, and refreshes a Cluster's map
// after an error that may mean it changed.

// Run runs s with args (their first two slots left for the script, see RunScript)
// alone, and returns its reply.
func (c *Conn) Run(ctx context.Context, s *script.Script, args []any) (any, error) {
	v, err := c.RunScript(ctx, s, args, true).Result()
	c.Refresh(err)
	return v, err
}

// Strings is Run for a script that returns a list of strings.
func (c *Conn) Strings(ctx context.Context, s *script.Script, args []any) ([]string, error) {
	v, err := c.RunScript(ctx, s, args, true).StringSlice()
	c.Refresh(err)
	return v, err
}

// Reply is one call's reply, or its error.
type Reply struct {
	V   any
	Err error
}

// ReadOnly runs s, a script that writes nothing, once per entry of keys with args, in
// one pipeline, as read-only commands (see RunReadOnly), and returns each call's reply.
func (c *Conn) ReadOnly(ctx context.Context, s *script.Script, keys [][]string, args []any) []Reply {
	cmds := make([]*redis.Cmd, len(keys))
	_, _ = c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Do(ctx, c.ReadArgs(s, k, args)...)
		}
		return nil
	})
	out := make([]Reply, len(keys))
	for i, k := range keys {
		cmd := cmds[i]
		if err := cmd.Err(); err != nil && IsServerError(err) {
			// NOSCRIPT (loads it on that node), or no EVALSHA_RO there.
			cmd = c.RunReadOnly(ctx, s, k, args, cmd)
		}
		c.Refresh(cmd.Err())
		out[i] = Reply{V: cmd.Val(), Err: cmd.Err()}
	}
	return out
}

// Publish publishes msg on channel ch (classic Pub/Sub: every node of a Cluster).
func (c *Conn) Publish(ctx context.Context, ch, msg string) error {
	return c.client.Publish(ctx, ch, msg).Err()
}

// Listen hands each message published on channel ch to fn until ctx ends (a
// subscription still being made gives up then too).
func (c *Conn) Listen(ctx context.Context, ch string, fn func(msg string)) {
	ps := c.client.Subscribe(ctx, ch)
	defer ps.Close()
	msgs := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-msgs:
			if !ok {
				return
			}
			fn(m.Payload)
		}
	}
}

// Scan returns the names of the hashes on n that match, from cursor on, and the cursor
// of the next page (0: the last).
func (n ScanNode) Scan(ctx context.Context, cursor uint64, match string, count int64) ([]string, uint64, error) {
	return n.client.ScanType(ctx, cursor, match, count, "hash").Result()
}

// Closed reports whether err says that the client was closed.
func Closed(err error) bool { return errors.Is(err, redis.ErrClosed) }

// wakeScript passes a lock's turn on to the next Locker in its wait queue.
var wakeScript = redis.NewScript(script.Wake)

// feedSource is a store as the waiters' feed.Hub sees it (feed.Source): which Pub/Sub
// feeds carry a lock's channel, and the calls the wake-up protocol makes in Redis.
type feedSource struct {
	st      Store
	id      string // the Locker's ID, which its queue entries carry
	aside   func(func()) bool
	timeout time.Duration // bounds each call (the ReleaseTimeout)
}

// NewFeedSource returns st as the feed.Source of the Locker with ID id, whose calls run
// aside, each within timeout.
func NewFeedSource(st Store, id string, aside func(func()) bool, timeout time.Duration) feed.Source {
	return &feedSource{st: st, id: id, aside: aside, timeout: timeout}
}

// Routes returns the feeds that carry ch: on a quorum one classic feed per server; on a
// Redis 7 Cluster the sharded feed of the primary that owns ch's slot; else the one
// classic feed.
func (s *feedSource) Routes(ctx context.Context, ch string) ([]feed.Route, error) {
	return s.st.Routes(ctx, ch)
}

// Refresh reloads a Cluster's map after a topology error.
func (s *feedSource) Refresh(err error) { s.st.Refresh(err) }

// Aside runs fn on one of the Locker's background goroutines.
func (s *feedSource) Aside(fn func()) bool { return s.aside(fn) }

// Leave removes the Locker from the wait queue of ch's lock.
func (s *feedSource) Leave(ch string) {
	s.everywhere(ch, func(ctx context.Context, c *Conn, queue string) error {
		return c.client.LRem(ctx, queue, 0, s.id).Err()
	})
}

// PassOn gives the Locker's turn on ch's lock, which nobody here took, to the next
// Locker queued for it.
func (s *feedSource) PassOn(ch string) {
	s.everywhere(ch, func(ctx context.Context, c *Conn, queue string) error {
		return wakeScript.Run(ctx, c.client, []string{queue}, ch, c.ShardedFlag()).Err()
	})
}

// everywhere runs call aside, best effort and bounded by the timeout, about the wait
// queue of the lock of channel ch, on each conn that keeps queues.
func (s *feedSource) everywhere(ch string, call func(ctx context.Context, c *Conn, queue string) error) {
	queue := strings.TrimSuffix(ch, ":release") + ":queue"
	for _, c := range s.st.Conns() {
		s.aside(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
			defer cancel()
			if err := call(ctx, c, queue); err != nil {
				c.Refresh(err)
			}
		})
	}
}
