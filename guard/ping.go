package guard

import (
	"context"
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
	if err := l.st.Ping(ctx); err != nil {
		return &RedisError{Op: "ping", Err: err}
	}
	return nil
}
