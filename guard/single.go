package guard

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/feed"
)

// single is the store of a Locker made by New: one deployment — a server, a Sentinel
// group, a Cluster or a Ring — reached through one client (its conn).
type single struct {
	conn
	env     storeEnv
	sharded atomic.Int32 // release notifications: 0 unknown, 1 classic Pub/Sub, 2 sharded (see isSharded)
}

// newSingle returns the store of client.
func newSingle(client redis.UniversalClient) *single {
	s := &single{}
	s.conn.init(client)
	return s
}

// configure refuses the options that apply to a quorum only, and turns deadlock
// detection on by default.
func (s *single) configure(cfg *settings, env storeEnv) error {
	switch {
	case cfg.restartDelaySet:
		return &ConfigError{Field: "RestartDelay", Reason: "applies to NewQuorum only: the servers of one deployment restart together, or fail over"}
	case cfg.replyBudgetSet:
		return &ConfigError{Field: "ReplyBudget", Reason: "applies to NewQuorum only: one deployment answers as one"}
	}
	if err := cfg.validateDeadlock(false); err != nil {
		return err
	}
	s.env = env
	return nil
}

// admits takes every call's settings: New's Locker serves every kind and option.
func (s *single) admits(*settings) error { return nil }

// acquire runs the acquire script, followed by WAIT with SyncReplicas (see acquireSynced).
func (s *single) acquire(ctx context.Context, h *held, nonce, manner string, waited bool) acquireReply {
	if h.s.syncReplicas > 0 {
		return s.acquireSynced(ctx, h, nonce, manner)
	}
	return decodeAcquire(s.runScript(ctx, h.s.spec.acquire, h.acquireArgs(nonce, manner), waited).Result())
}

// resends is true: the next attempt of the wait, if any, sends an attempt of unknown
// outcome again with its nonce, so that if it took effect the hold is adopted instead of
// counted twice.
func (s *single) resends() bool { return true }

// undo drops the hold of the attempt with nonce: the undo is sent as its owner and, for
// an attempt that took on a section's hold, as that section (see held.undoArgs).
// An undo that gets no answer goes on trying in the Locker's lane for this deployment
// (see undo.go): the attempt may still run when a frozen server wakes.
func (s *single) undo(ctx context.Context, h *held, nonce string) {
	for _, args := range h.undoArgs(nonce) {
		call := func(ctx context.Context) error {
			err := s.runScript(ctx, h.s.spec.release, args, true).Err()
			s.refresh(err)
			return err
		}
		if !answered(call(ctx)) {
			s.env.retry(&s.conn, call)
		}
	}
}

// release runs the release script with h's release nonce.
func (s *single) release(ctx context.Context, h *held, urgent bool) (releaseReply, error) {
	return decodeRelease(s.runScript(ctx, h.s.spec.release, h.releaseArgs(h.finalNonce(), ""), urgent))
}

// leave runs the acquire script in manner leave, aside.
func (s *single) leave(h *held) {
	s.env.aside(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.env.timeout)
		defer cancel()
		s.refresh(s.runScript(ctx, h.s.spec.acquire, h.acquireArgs(s.env.nonce(), mannerLeave), true).Err())
	})
}

// renew sends the renewals in one pipeline, and those of leases with SyncReplicas in
// one pipeline per primary that ends with a WAIT, the pipelines running at once.
func (s *single) renew(timeout time.Duration, batch []*held, ttls []time.Duration, errs []error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	plain, synced := s.groupRenewals(ctx, batch, ttls, errs)
	plain.node, plain.legacy = s.client, &s.legacy
	var wg sync.WaitGroup
	for _, g := range synced {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.run(ctx, batch, ttls)
		}()
	}
	if len(plain.idx) > 0 {
		plain.run(ctx, batch, ttls)
	}
	wg.Wait()
	for _, g := range append(synced, plain) {
		s.renewOutcomes(g, batch, errs)
	}
}

func (s *single) inline(alone bool) bool { return s.waitsWithContext(alone) }

func (s *single) autoPipelined() bool { return s.batching }

func (s *single) ping(ctx context.Context) error { return pingClient(ctx, s.client) }

func (s *single) scripted() *conn { return &s.conn }

// routes returns the one classic feed, or on a Redis 7 Cluster the sharded feed of the
// primary that owns ch's slot.
func (s *single) routes(ctx context.Context, ch string) ([]feed.Route, error) {
	sharded, err := s.isSharded(ctx, ch)
	if err != nil || !sharded {
		return []feed.Route{{Open: subscriber(s.client)}}, err
	}
	node, err := s.client.(*redis.ClusterClient).MasterForKey(ctx, ch)
	if err != nil {
		return nil, err
	}
	// A node's own client: the connection goes to that node, and a broken one is not
	// redialled by go-redis, whose resubscription would send every channel in one
	// SSUBSCRIBE (see the feed package's doc).
	return []feed.Route{{ID: node.Options().Addr, Sharded: true, Open: subscriber(node)}}, nil
}

// isSharded reports whether release notifications for the lock of channel ch travel
// over sharded Pub/Sub: on a Redis Cluster whose nodes run Redis 7 or newer (release.lua
// makes the same choice on the node that runs it). The answer is asked once, of the node
// that owns ch, and kept.
func (s *single) isSharded(ctx context.Context, ch string) (bool, error) {
	switch s.sharded.Load() {
	case 1:
		return false, nil
	case 2:
		return true, nil
	}
	if _, ok := s.client.(*redis.ClusterClient); !ok {
		s.sharded.Store(1)
		return false, nil
	}
	v, err := versionScript.Run(ctx, s.client, []string{ch}).Int64()
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

func (s *single) conns() []*conn { return []*conn{&s.conn} }

// read reads reqs in one pipeline.
func (s *single) read(ctx context.Context, op string, reqs []inspectReq, read readFunc) ([]*LockState, [][]*LockState, error) {
	states := read(ctx, &s.conn, reqs)
	for _, st := range states {
		if st.Err != nil {
			return nil, nil, &RedisError{Op: op, Key: st.Key, Err: st.Err}
		}
	}
	return states, nil, nil
}

// scanNodes returns the primaries of a Cluster, the shards of a Ring, or the one server
// of any other client, in address order.
func (s *single) scanNodes(ctx context.Context) ([]scanNode, error) {
	var nodes []scanNode
	var mu sync.Mutex
	add := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, scanNode{addr: c.Options().Addr, c: c})
		mu.Unlock()
		return nil
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, add); err != nil {
			return nil, err
		}
	case *redis.Ring:
		if err := c.ForEachShard(ctx, add); err != nil {
			return nil, err
		}
	case *redis.Client:
		nodes = append(nodes, scanNode{addr: c.Options().Addr, c: c})
	default:
		nodes = append(nodes, scanNode{addr: "redis", c: c})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].addr < nodes[j].addr })
	return nodes, nil
}
