package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/feed"
)

// Conn is one client and what the store knows of it — whether calls give up at their
// context's deadline or may wait for a batch, which Pub/Sub announces releases on a
// Cluster, and when the Cluster's slot map was last reloaded: the deployment of a
// single store, or one server of a quorum. Its script calls are in call.go.
type Conn struct {
	client           redis.UniversalClient
	honoursDeadlines bool // client gives up on calls at their context's deadline
	batching         bool // calls may wait for a batch: the client is an auto-pipeliner, or batch is set
	// batch is the built-in batching of a single deployment's plain client (batch.go);
	// nil for an auto-pipelining client (which batches itself) and for a quorum's servers
	// (the fanout batches their calls).
	batch *batcher
	// deferred is the deferred (async) face of an auto-pipelining client: batched calls
	// are submitted there and waited for with their context, so that they return at its
	// deadline without a goroutine each (the blocking face waits for the batch whatever
	// the context). Nil when the client does not batch, or has no deferred face.
	deferred  *redis.AutoPipeliner
	refreshed atomic.Int64 // when Refresh last reloaded a Cluster client's map, in Unix ns
	// legacy is set once a server could not parse a script's "#!lua" line (Redis 6.2):
	// scripts are sent in their plain form from then on.
	legacy atomic.Bool
	// classic makes the store use classic Pub/Sub on a Cluster too, as it does when the
	// nodes run Redis 6.2: set by tests only (SetClassic), before the first wait.
	classic bool
}

// NewConn returns client's conn. An auto-pipelining client's deferred face is asked of
// it here (the client owns it and closes it with itself); without one, batched calls go
// through the blocking face and wait for their batch.
func NewConn(client redis.UniversalClient) *Conn {
	c := &Conn{}
	c.init(client)
	return c
}

func (c *Conn) init(client redis.UniversalClient) {
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

// Legacy reports whether the server wants the scripts' plain form (Redis 6.2).
func (c *Conn) Legacy() bool { return c.legacy.Load() }

func subscriber(c redis.UniversalClient) func() feed.PubSub {
	return func() feed.PubSub { return c.Subscribe(context.Background()) }
}

// honoursDeadlines reports whether c gives up on a call when its context's deadline
// passes (go-redis does with ContextTimeoutEnabled).
func honoursDeadlines(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// waitsWithContext reports whether a call returns by its context's deadline by itself,
// so that it can run on the caller's goroutine: the client gives up on calls at the
// deadline, or the call is a batched script call (RunScript, not urgent) that waits on
// the deferred face with its context. alone is true for a call sent outside the batches:
// an urgent script call, or a pipeline.
func (c *Conn) waitsWithContext(alone bool) bool {
	return c.honoursDeadlines || (c.deferred != nil && !alone)
}

// inFlight is the error of a batched call whose caller's context ended before its batch
// ran: the call still runs, and wait returns once it has. It unwraps to the context's error.
type inFlight struct {
	err  error // the context's
	wait func(context.Context) error
}

// Error is the context's error, marked as still in a batch.
func (e *inFlight) Error() string { return e.err.Error() + " (the call is still in a batch)" }

// Unwrap returns the context's error.
func (e *inFlight) Unwrap() error { return e.err }

// Settled waits until the call that returned err has run, when it was left in a batch,
// or until ctx ends.
func Settled(ctx context.Context, err error) {
	var f *inFlight
	if errors.As(err, &f) {
		_ = f.wait(ctx)
	}
}

// submit sends cmd in the deferred face's next batch and waits for it with ctx.
func (c *Conn) submit(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	f := c.deferred.Submit(ctx, cmd)
	if err := f.WaitContext(ctx); err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The batch may still write cmd: answer with another command.
		left := redis.NewCmd(ctx)
		left.SetErr(&inFlight{err: err, wait: f.WaitContext})
		return left
	}
	return cmd
}

// IsServerError reports whether err is an error reply from Redis, after which the
// command is known not to have taken effect (scripts check memory before their first
// write and are atomic).
func IsServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// answered reports whether a call that returned err reached Redis and ran (or was
// refused), or can never be sent any more (the client was closed): nothing to try again.
func answered(err error) bool {
	return err == nil || IsServerError(err) || errors.Is(err, redis.ErrClosed)
}

// refreshEvery is the shortest interval between two reloads of a Cluster client's slot
// map asked for by one conn.
const refreshEvery = 250 * time.Millisecond

// Refresh makes a Cluster client reload its map of the cluster after err, when err may
// mean that a node died or a slot moved. go-redis reloads the map by itself only on a
// MOVED or ASK reply or once a minute, and a dead node answers nothing: without this, the
// keys of a primary that was killed stay unreachable long after its replica took over.
// Reloads are rate-limited and run aside; other clients need nothing.
func (c *Conn) Refresh(err error) {
	cc, ok := c.client.(*redis.ClusterClient)
	if !ok || err == nil || !TopologyError(err) {
		return
	}
	now := time.Now().UnixNano()
	last := c.refreshed.Load()
	if now-last < int64(refreshEvery) || !c.refreshed.CompareAndSwap(last, now) {
		return
	}
	cc.ReloadState(context.Background())
}

// TopologyError reports whether err may come from a node that is gone or no longer
// serves the slot: a network error or timeout, or a reply that says the cluster changed.
func TopologyError(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return !errors.Is(err, redis.Nil)
	}
	msg := re.Error()
	for _, p := range []string{"CLUSTERDOWN", "MOVED", "ASK", "TRYAGAIN", "READONLY", "MASTERDOWN", "LOADING"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// ShardedFlag is release.lua's and wake.lua's ARGV that lets them announce a release
// with sharded Pub/Sub: "1" on a Cluster client (the script then uses SPUBLISH when the
// node runs Redis 7 or newer), "0" otherwise.
func (c *Conn) ShardedFlag() string {
	if c.clustered() {
		return "1"
	}
	return "0"
}

// shardedArg is ShardedFlag as a script argument.
func (c *Conn) shardedArg() any { return flagArg(c.clustered()) }

func (c *Conn) clustered() bool {
	_, ok := c.client.(*redis.ClusterClient)
	return ok && !c.classic
}

// errSyncRing refuses SyncReplicas on a Ring.
var errSyncRing = errors.New("SyncReplicas cannot be used with a *redis.Ring: WAIT must follow the grant on the same connection")

// syncNode returns the client whose connections reach the primary that serves key, so
// that a WAIT sent after a command on key counts the replicas that received it.
func (c *Conn) syncNode(ctx context.Context, key string) (redis.Cmdable, error) {
	switch cc := c.client.(type) {
	case *redis.ClusterClient:
		return cc.MasterForKey(ctx, key)
	case *redis.Ring:
		return nil, errSyncRing
	}
	return c.client, nil
}

// pingClient pings every primary of c.
func pingClient(ctx context.Context, c redis.UniversalClient) error {
	each := func(ctx context.Context, n *redis.Client) error {
		if err := n.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("%s: %w", n.Options().Addr, err)
		}
		return nil
	}
	switch c := c.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, each)
	case *redis.Ring:
		return c.ForEachShard(ctx, each)
	}
	return c.Ping(ctx).Err()
}
