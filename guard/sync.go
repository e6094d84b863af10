package guard

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

var errSyncRing = errors.New("SyncReplicas cannot be used with a *redis.Ring: WAIT must follow the grant on the same connection")

// runAcquireSynced runs the acquire script and WAIT in one pipeline on one connection to
// the lock's primary, so that WAIT counts the replicas that received this grant.
func (l *Locker) runAcquireSynced(ctx context.Context, h *held, nonce string, manner string, waited bool) acquireReply {
	var node redis.Cmdable = l.client
	switch c := l.client.(type) {
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, h.rk.lock)
		if err != nil {
			return acquireReply{err: err}
		}
		node = n
	case *redis.Ring:
		return acquireReply{err: errSyncRing}
	}
	args := h.acquireArgs(nonce, manner, waited)
	run := func(load bool) (*redis.Cmd, *redis.Cmd) {
		pipe := node.Pipeline()
		args[0], args[1] = "evalsha", acquireScript.sha
		if load {
			args[0], args[1] = "eval", acquireScript.src
		}
		c := pipe.Do(ctx, args...)
		w := pipe.Do(ctx, "wait", h.s.syncReplicas, h.s.syncTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx)
		return c, w
	}
	c, w := run(false)
	if err := c.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		c, w = run(true)
	}
	v, err := c.Result()
	if err != nil {
		return acquireReply{err: err}
	}
	acked, ackErr := w.Int64()
	return acquireReply{v: v, synced: true, acked: acked, ackErr: ackErr}
}
