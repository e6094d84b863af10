package store

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher is the built-in batching of one deployment's plain client (*redis.Client,
// *redis.ClusterClient): the script calls that are not urgent (a first attempt, a release
// nobody in this process is queued behind) and that meet in time share one pipeline per
// node, as the quorum's fanout does per server.
//
//   - A lone call goes out at once, on its caller's goroutine, bounded by its context as
//     any call of a client that honours deadlines (batching is built in only for those).
//   - A call made while its node has a call or a batch in flight waits in the node's
//     queue; one batch per node is in flight at a time, and the calls queued meanwhile go
//     out together in the next, one pipeline, on a goroutine of the batcher's that ends
//     once the queue is empty. The pipeline is bounded by the latest deadline of its calls.
//   - Each call is waited for with its own context: one whose context ends while it
//     waits returns the context's error at once — as an inFlight error, whose Settled
//     waits until the call has run or was dropped, so that an undo never overtakes it. A
//     call whose context ended before its batch went out is not sent.
//
// On a Cluster the node is the primary that owns the call's first key (MasterForKey),
// and the batch goes through the cluster client's pipeline, which follows redirections:
// a batch sent to a node that lost the slot in a failover reaches the new owner.
type batcher struct {
	client redis.UniversalClient
	// nodeOf returns the node of key's slot (nil: one node, or it cannot tell now).
	nodeOf func(ctx context.Context, key string) any
	mu     sync.Mutex
	nodes  map[any]*lane
}

// lanes is how many calls or batches of one node may be in flight at once: a call that
// finds one of them free goes out at once, alone; the calls made while all are taken
// wait, and go out together when one frees. With one, the server idles while the client
// reads a batch's replies and writes the next; two keep it busy and the batches large
// (bench, uncontended at G=16 and G=64 on two cores: one lane ran at 0.4-0.66× raw's
// pairs/s, two at 0.46-0.80×, four and eight no better than two).
const lanes = 2

// lane is one node's queue.
type lane struct {
	mu      sync.Mutex
	flying  int       // calls and batches of the node's in flight
	queue   []*waiter // the calls waiting for the next batch
	spare   []*waiter // an empty queue's storage, kept for the next
	batches int       // batches sent (tests)
}

// waiter is one call in a lane's queue. The batcher sends on done, once, when the call
// has run or was dropped, and touches the waiter no more: the caller that receives it
// puts the waiter back in waiters for another call (a queued call then costs no
// allocation of its own); a caller that left first (its context ended) leaves it.
type waiter struct {
	ctx  context.Context
	cmd  *redis.Cmd
	done chan struct{} // capacity 1
}

// waiters are the waiters not in use.
var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

// finish tells w's caller that its call has run or was dropped.
func (w *waiter) finish() { w.done <- struct{}{} }

// newBatcher returns the batcher of client, or nil when its calls are not batched: a
// client that does not give up on calls at their context's deadline (a lone call runs on
// its caller's goroutine, and must return by its deadline), a Ring, or a wrapper.
func newBatcher(client redis.UniversalClient) *batcher {
	b := &batcher{client: client, nodes: map[any]*lane{}}
	switch c := client.(type) {
	case *redis.Client:
		if !c.Options().ContextTimeoutEnabled {
			return nil
		}
	case *redis.ClusterClient:
		if !c.Options().ContextTimeoutEnabled {
			return nil
		}
		b.nodeOf = func(ctx context.Context, key string) any {
			n, err := c.MasterForKey(ctx, key)
			if err != nil {
				return nil
			}
			return n
		}
	default:
		return nil
	}
	return b
}

// lane returns the lane of key's node.
func (b *batcher) lane(ctx context.Context, key string) *lane {
	var node any
	if b.nodeOf != nil {
		node = b.nodeOf(ctx, key)
	}
	b.mu.Lock()
	l := b.nodes[node]
	if l == nil {
		l = &lane{}
		b.nodes[node] = l
	}
	b.mu.Unlock()
	return l
}

// do runs the command line args (a script call: args[3] is its first key) alone at once
// or in its node's next batch, and returns its reply.
func (b *batcher) do(ctx context.Context, args []any) *redis.Cmd {
	key, _ := args[3].(string)
	l := b.lane(ctx, key)
	cmd := redis.NewCmd(ctx, args...)
	l.mu.Lock()
	if l.flying < lanes { // and so the queue is empty: a slot that frees takes it (next)
		l.flying++
		l.mu.Unlock()
		_ = b.client.Process(ctx, cmd)
		b.next(l)
		return cmd
	}
	w := waiters.Get().(*waiter)
	w.ctx, w.cmd = ctx, cmd
	if l.queue == nil {
		l.queue, l.spare = l.spare, nil
	}
	l.queue = append(l.queue, w)
	l.mu.Unlock()
	select {
	case <-w.done:
		w.ctx, w.cmd = nil, nil
		waiters.Put(w)
		return cmd
	case <-ctx.Done():
		left := redis.NewCmd(ctx)
		left.SetErr(&inFlight{err: ctx.Err(), wait: settling(w)})
		return left
	}
}

// settling returns a wait for the call of w, whose caller left: it returns once the call
// has run or was dropped (the batcher drops a call whose context ended before its batch
// went out, so that comes soon), or when its ctx ends; it may be called many times.
func settling(w *waiter) func(context.Context) error {
	settled := make(chan struct{})
	go func() {
		<-w.done
		close(settled)
	}()
	return func(ctx context.Context) error {
		select {
		case <-settled:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// next hands l on after its call or batch came back: to a goroutine that sends the
// calls queued meanwhile, or to nobody.
func (b *batcher) next(l *lane) {
	l.mu.Lock()
	if len(l.queue) == 0 {
		l.flying--
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	go b.drain(l)
}

// drain sends l's queue in batches until it is empty.
func (b *batcher) drain(l *lane) {
	var buf []*waiter
	for {
		l.mu.Lock()
		calls := l.queue
		if len(calls) == 0 {
			l.flying--
			if l.spare == nil {
				l.spare = buf
			}
			l.mu.Unlock()
			return
		}
		l.queue = buf
		l.batches++
		l.mu.Unlock()
		b.send(calls)
		clear(calls)
		buf = calls[:0]
	}
}

// send makes calls in one pipeline bounded by the latest of their deadlines (unbounded
// when one has none), or alone when one is left. A call whose context ended before it
// went out is dropped with its context's error.
func (b *batcher) send(calls []*waiter) {
	live := calls[:0]
	var last time.Time
	bounded := true
	for _, w := range calls {
		if err := w.ctx.Err(); err != nil {
			w.cmd.SetErr(err)
			w.finish()
			continue
		}
		d, ok := w.ctx.Deadline()
		bounded = bounded && ok
		if d.After(last) {
			last = d
		}
		live = append(live, w)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		_ = b.client.Process(live[0].ctx, live[0].cmd)
		live[0].finish()
		return
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, last)
		defer cancel()
	}
	pipe := b.client.Pipeline()
	for _, w := range live {
		_ = pipe.Process(ctx, w.cmd)
	}
	_, _ = pipe.Exec(ctx)
	for _, w := range live {
		w.finish()
	}
}

// Batches returns how many batches (pipelines of queued calls) the conn's built-in
// batching has sent, over every node (tests).
func (c *Conn) Batches() int {
	if c.batch == nil {
		return 0
	}
	c.batch.mu.Lock()
	defer c.batch.mu.Unlock()
	n := 0
	for _, l := range c.batch.nodes {
		l.mu.Lock()
		n += l.batches
		l.mu.Unlock()
	}
	return n
}
