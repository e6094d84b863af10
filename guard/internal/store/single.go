package store

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/guardkit/guardkit/guard/internal/script"
)

// Single is the store of a Locker on one deployment — a server, a Sentinel group, a
// Cluster or a Ring — reached through one client (its conn).
type Single struct {
	Conn
	base
	sharded atomic.Int32 // release notifications: 0 unknown, 1 classic Pub/Sub, 2 sharded (see isSharded)
}

// NewSingle returns the store of client.
func NewSingle(client redis.UniversalClient) *Single {
	s := &Single{}
	s.Conn.init(client)
	if s.batch = newBatcher(client); s.batch != nil {
		s.batching = true
	}
	return s
}

// SetClassic makes s announce and hear releases with classic Pub/Sub on a Redis 7
// Cluster, as on a Redis 6.2 Cluster (tests). Call it before the first wait.
func (s *Single) SetClassic() {
	s.classic = true
	s.sharded.Store(1)
}

// Configure refuses the options that apply to a quorum only.
func (s *Single) Configure(cfg Config) error {
	switch {
	case cfg.RestartDelaySet:
		return &Refusal{Field: "RestartDelay", Reason: "applies to NewQuorum only: the servers of one deployment restart together, or fail over"}
	case cfg.ReplyBudgetSet:
		return &Refusal{Field: "ReplyBudget", Reason: "applies to NewQuorum only: one deployment answers as one"}
	}
	s.take(cfg)
	return nil
}

// Admits takes every call's terms: one deployment serves every kind and option.
func (s *Single) Admits(*Terms) error { return nil }

// Detects is true: one deployment sees every hold.
func (s *Single) Detects() bool { return true }

// Acquire runs the acquire script, followed by WAIT with SyncReplicas (see acquireSynced).
func (s *Single) Acquire(ctx context.Context, h *Hold, nonce, manner string, urgent bool) Grant {
	if h.Terms.SyncReplicas > 0 {
		return s.acquireSynced(ctx, h, nonce, manner)
	}
	return decode(s.RunScript(ctx, h.Terms.Spec.Acquire, s.args(&s.Conn).acquire(h, nonce, manner), urgent).Result())
}

// Resends is true: the next attempt of the wait, if any, sends an attempt of unknown
// outcome again with its nonce, so that if it took effect the hold is adopted instead of
// counted twice.
func (s *Single) Resends() bool { return true }

// Undo drops the hold of the attempt with nonce: the undo is sent as its owner and, for
// an attempt that took on a section's hold, as that section (see callArgs.undo).
// An undo that gets no answer goes on trying in the lane of this deployment (see
// undo.go): the attempt may still run when a frozen server wakes.
func (s *Single) Undo(ctx context.Context, h *Hold, nonce string) {
	for _, args := range s.args(&s.Conn).undo(h, h.Owner(), nonce, s.cfg.Nonce) {
		call := func(ctx context.Context) error {
			err := s.RunScript(ctx, h.Terms.Spec.Release, args, true).Err()
			s.Refresh(err)
			return err
		}
		if !answered(call(ctx)) {
			s.retry(&s.Conn, call)
		}
	}
}

// Release runs the release script with the hold's release nonce.
func (s *Single) Release(ctx context.Context, h *Hold, nonce string, urgent bool) (script.Released, error) {
	return script.ParseRelease(s.RunScript(ctx, h.Terms.Spec.Release, s.args(&s.Conn).releaseLive(h, nonce), urgent).Int64())
}

// Leave runs the acquire script in manner leave, aside.
func (s *Single) Leave(h *Hold) {
	s.cfg.Aside(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		defer cancel()
		s.Refresh(s.RunScript(ctx, h.Terms.Spec.Acquire, s.args(&s.Conn).acquire(h, s.cfg.Nonce(), MannerLeave), true).Err())
	})
}

// Renew sends the renewals in one pipeline, and those of leases with SyncReplicas in
// one pipeline per primary that ends with a WAIT, the pipelines running at once.
func (s *Single) Renew(timeout time.Duration, batch []*Hold, ttls []time.Duration, errs []error) {
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

// Inline reports whether a call returns by its context's deadline by itself.
func (s *Single) Inline(alone bool) bool { return s.waitsWithContext(alone) }

// AutoPipelined reports whether calls are batched: by the built-in batching of a plain
// client that honours deadlines, or by an auto-pipelining client.
func (s *Single) AutoPipelined() bool { return s.batching }

// Ping pings every primary.
func (s *Single) Ping(ctx context.Context) error { return pingClient(ctx, s.client) }

// Scripted is the deployment's conn.
func (s *Single) Scripted() *Conn { return &s.Conn }

// Routes returns the one classic feed, or on a Redis 7 Cluster the sharded feed of the
// primary that owns ch's slot.
func (s *Single) Routes(ctx context.Context, ch string) ([]feed.Route, error) {
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

// versionScript reads the server's version.
var versionScript = redis.NewScript(script.Version)

// isSharded reports whether release notifications for the lock of channel ch travel
// over sharded Pub/Sub: on a Redis Cluster whose nodes run Redis 7 or newer (release.lua
// makes the same choice on the node that runs it). The answer is asked once, of the node
// that owns ch, and kept.
func (s *Single) isSharded(ctx context.Context, ch string) (bool, error) {
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

// Conns is the deployment's conn.
func (s *Single) Conns() []*Conn { return []*Conn{&s.Conn} }

// Servers is the deployment, which decides alone.
func (s *Single) Servers() ([]Server, int) { return []Server{{Conn: &s.Conn}}, 1 }

// ScanNodes returns the primaries of a Cluster, the shards of a Ring, or the one server
// of any other client, in address order.
func (s *Single) ScanNodes(ctx context.Context) ([]ScanNode, error) {
	var nodes []ScanNode
	var mu sync.Mutex
	add := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, ScanNode{Addr: c.Options().Addr, client: c})
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
		nodes = append(nodes, ScanNode{Addr: c.Options().Addr, client: c})
	default:
		nodes = append(nodes, ScanNode{Addr: "redis", client: c})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Addr < nodes[j].Addr })
	return nodes, nil
}

// acquireSynced runs the acquire script and WAIT in one pipeline on one connection to
// the lock's primary, so that WAIT counts the replicas that received this grant.
func (s *Single) acquireSynced(ctx context.Context, h *Hold, nonce string, manner string) Grant {
	node, err := s.syncNode(ctx, h.Keys.Lock)
	if err != nil {
		return Grant{Err: err}
	}
	var w *redis.Cmd
	c := pipeScript(ctx, node, &s.legacy, h.Terms.Spec.Acquire, s.args(&s.Conn).acquire(h, nonce, manner), func(pipe redis.Pipeliner) {
		w = pipe.Do(ctx, "wait", h.Terms.SyncReplicas, h.Terms.SyncTimeout.Milliseconds())
	})
	r := decode(c.Result())
	if r.Err != nil {
		return r
	}
	r.Synced = true
	r.Acked, r.AckErr = w.Int64()
	return r
}
