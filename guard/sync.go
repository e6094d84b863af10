package guard

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/guardkit/guardkit/guard/internal/script"
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

// acquireSynced runs the acquire script and WAIT in one pipeline on one connection to
// the lock's primary, so that WAIT counts the replicas that received this grant.
func (s *single) acquireSynced(ctx context.Context, h *held, nonce string, manner string) acquireReply {
	node, err := s.syncNode(ctx, h.rk.lock)
	if err != nil {
		return acquireReply{err: err}
	}
	var w *redis.Cmd
	c := pipeScript(ctx, node, &s.legacy, h.s.spec.acquire, h.acquireArgs(nonce, manner), func(pipe redis.Pipeliner) {
		w = pipe.Do(ctx, "wait", h.s.syncReplicas, h.s.syncTimeout.Milliseconds())
	})
	r := decodeAcquire(c.Result())
	if r.err != nil {
		return r
	}
	r.synced = true
	r.acked, r.ackErr = w.Int64()
	return r
}

// pipeScript runs s with args (whose first two slots it fills, as runScript does)
// followed, in one pipeline on one connection of node, by the commands then queues; after
// a NOSCRIPT reply it sends the whole pipeline again with EVAL, calling then anew (and
// once more with s's plain form when the server cannot parse its "#!lua" line, which
// legacy then records).
func pipeScript(ctx context.Context, node redis.Cmdable, legacy *atomic.Bool, s *script.Script, args []any, then func(redis.Pipeliner)) *redis.Cmd {
	run := func(cmd string, sent any) *redis.Cmd {
		pipe := node.Pipeline()
		args[0], args[1] = cmd, sent
		c := pipe.Do(ctx, args...)
		then(pipe)
		_, _ = pipe.Exec(ctx)
		return c
	}
	old := legacy.Load()
	sha, src := s.Form(old)
	cmd := run("evalsha", sha)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = run("eval", src)
		if !old && flagsRefused(cmd.Err()) {
			if cmd = run("eval", s.Plain()); !flagsRefused(cmd.Err()) {
				legacy.Store(true)
			}
		}
	}
	return cmd
}
