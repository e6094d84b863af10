package guard

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// conn is one client and what the engine knows of it — whether calls give up at their
// context's deadline or may wait for a batch, which Pub/Sub announces releases on a
// Cluster, and when the Cluster's slot map was last reloaded: the deployment of a single
// store, or one server of a quorum. Its methods are in scripts.go (runScript), sync.go
// (syncNode) and topology.go (refresh, the sharded flag).
type conn struct {
	client           redis.UniversalClient
	honoursDeadlines bool // client gives up on calls at their context's deadline
	batching         bool // client is an auto-pipeliner: calls may wait for a batch
	// deferred is the deferred (async) face of an auto-pipelining client: batched calls
	// are submitted there and waited for with their context, so that they return at its
	// deadline without a goroutine each (the blocking face waits for the batch whatever
	// the context). Nil when the client does not batch, or has no deferred face.
	deferred  *redis.AutoPipeliner
	refreshed atomic.Int64 // when refresh last reloaded a Cluster client's map, in Unix ns
	// legacy is set once a server could not parse a script's "#!lua" line (Redis 6.2):
	// scripts are sent in their plain form from then on (see script).
	legacy atomic.Bool
	// classic makes the Locker use classic Pub/Sub on a Cluster too, as it does when the
	// nodes run Redis 6.2: set by tests only (export_test.go), before the first wait.
	classic bool
}

// init makes c client's. An auto-pipelining client's deferred face is asked of it here
// (the client owns it and closes it with itself); without one, batched calls go through
// the blocking face and wait for their batch.
func (c *conn) init(client redis.UniversalClient) {
	c.client, c.honoursDeadlines = client, honoursDeadlines(client)
	if ap, ok := client.(*redis.AutoPipeliner); ok {
		c.batching = true
		if !ap.IsBlocking() {
			c.deferred = ap
		} else if d, err := ap.AsyncAutoPipeline(); err == nil {
			c.deferred = d
		}
	}
}

// waitsWithContext reports whether a call returns by its context's deadline by itself,
// so that it can run on the caller's goroutine: the client gives up on calls at the
// deadline, or the call is a batched script call (runScript, not urgent) that waits on
// the deferred face with its context. alone is true for a call sent outside the batches:
// an urgent script call, or a pipeline.
func (c *conn) waitsWithContext(alone bool) bool {
	return c.honoursDeadlines || (c.deferred != nil && !alone)
}

// inFlight is the error of a batched call whose caller's context ended before its batch
// ran: the call still runs, and wait returns once it has. It unwraps to the context's error.
type inFlight struct {
	err  error // the context's
	wait func(context.Context) error
}

func (e *inFlight) Error() string { return e.err.Error() + " (the call is still in a batch)" }
func (e *inFlight) Unwrap() error { return e.err }

// settled waits until the call that returned err has run, when it was left in a batch,
// or until ctx ends.
func settled(ctx context.Context, err error) {
	var f *inFlight
	if errors.As(err, &f) {
		_ = f.wait(ctx)
	}
}

// submit sends cmd in the deferred face's next batch and waits for it with ctx.
func (c *conn) submit(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	f := c.deferred.Submit(ctx, cmd)
	if err := f.WaitContext(ctx); err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The batch may still write cmd: answer with another command.
		left := redis.NewCmd(ctx)
		left.SetErr(&inFlight{err: err, wait: f.WaitContext})
		return left
	}
	return cmd
}
