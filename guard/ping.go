package guard

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Ping reports whether the Locker can reach every Redis server it needs to take, renew
// and release locks, for a readiness or health check: it sends PING to the server of a
// single-server client or of a Sentinel (failover) client (the primary the sentinels
// name), to every primary of a Cluster client, to every shard of a Ring, and to every
// server of a quorum Locker (NewQuorum), which needs a majority of them: a minority
// down is reported as nil, since the Locker still serves.
//
// It returns nil when they answered, ErrClosed after Close, and otherwise a *RedisError
// (ErrUnavailable) with Op "ping" wrapping the client's error — for a quorum, an error
// saying what each server answered, which unwraps to each server's error. ctx bounds the
// call: give it a deadline.
func (l *Locker) Ping(ctx context.Context) error {
	select {
	case <-l.done:
		return ErrClosed
	default:
	}
	if err := l.st.ping(ctx); err != nil {
		return &RedisError{Op: "ping", Err: err}
	}
	return nil
}

// pingClient pings every server of c that serves locks: its primaries.
func pingClient(ctx context.Context, c redis.UniversalClient) error {
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			if err := n.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("%s: %w", n.Options().Addr, err)
			}
			return nil
		})
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			if err := n.Ping(ctx).Err(); err != nil {
				return fmt.Errorf("%s: %w", n.Options().Addr, err)
			}
			return nil
		})
	}
	return c.Ping(ctx).Err()
}

// ping pings every server at once and fails when fewer than a majority answer.
func (q *quorum) ping(ctx context.Context) error {
	errs := make([]error, len(q.nodes))
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.client.Ping(ctx).Err()
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if ok >= q.need {
		return nil
	}
	return q.failure("ping", errs)
}
