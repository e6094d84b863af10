package guard

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

var errSyncRing = errors.New("SyncReplicas cannot be used with a *redis.Ring: WAIT must follow the grant on the same connection")

// syncNode returns the client whose connections reach the primary that serves key, so
// that a WAIT sent after a command on key counts the replicas that received it.
func (c *conn) syncNode(ctx context.Context, key string) (redis.Cmdable, error) {
	switch cc := c.client.(type) {
	case *redis.ClusterClient:
		return cc.MasterForKey(ctx, key)
	case *redis.Ring:
		return nil, errSyncRing
	}
	return c.client, nil
}

// runAcquireSynced runs the acquire script and WAIT in one pipeline on one connection to
// the lock's primary, so that WAIT counts the replicas that received this grant.
func (l *Locker) runAcquireSynced(ctx context.Context, h *held, nonce string, manner string, waited bool) acquireReply {
	node, err := l.syncNode(ctx, h.rk.lock)
	if err != nil {
		return acquireReply{err: err}
	}
	args := h.acquireArgs(nonce, manner)
	run := func(load bool) (*redis.Cmd, *redis.Cmd) {
		pipe := node.Pipeline()
		args[0], args[1] = "evalsha", h.s.spec.acquire.sha
		if load {
			args[0], args[1] = "eval", h.s.spec.acquire.src
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
