package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/fanout"
	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/guardkit/guardkit/guard/internal/script"
)

var raiseScript = script.Raise

// Quorum is the store of a Locker made by NewQuorum: one conn per independent server, of
// which need (a majority) must agree. Its jobs are in files of their own: an attempt
// (attempt.go), the token's write-back (raise.go), the release and the undos
// (qrelease.go), the renewal and the repair (qrenew.go).
type Quorum struct {
	base
	nodes []*Conn
	addrs []string // the servers' addresses, for errors
	need  int
	delay time.Duration // RestartDelay; 0: off
	mark  any           // the key of the servers' ready mark (gate.lua)

	mu      sync.Mutex
	scripts map[*script.Script]*script.Script // acquire scripts as a quorum sends them (see wrap)

	proposed atomic.Int64 // the last token proposed (see propose), µs

	fan *fanout.Fanout // the calls on every server at once (rounds)

	honours bool // every server's client gives up on calls at their context's deadline
}

// QuorumHold is what a quorum keeps of a hold besides the Hold's fields (apart, so that
// the engine's record of a hold on one deployment stays in its allocation class).
type QuorumHold struct {
	nonce string        // the nonce of the attempt that won the hold
	carry atomic.Uint64 // the servers known to carry the hold (bit i: server i)
	// live is what the quorum knows of the hold's expiry on each server (see liveness).
	live liveness
}

// joinedLate records that server i, whose grant of the winning attempt answered after the
// majority's, carries the hold: it is renewed and released with the others, and, unless a
// renewal was decided since, counts as granted in the round the validity counts from.
func (h *QuorumHold) joinedLate(i int) {
	h.carry.Or(1 << i)
	h.live.joined(0, i)
}

// liveness records the servers that granted or renewed a hold in the round the engine's
// validity (Ref.Left) counts from, the grant or the last renewal a majority confirmed:
// there the hold lasts as long as the validity at least, and its release need not read
// the server's clock (release.lua's ARGV[8]). A server that answers the round after the
// majority joins while no later round was decided. A renewal records its servers before
// the engine moves the validity, so that a release that finds the validity of a round
// finds that round's servers or, the round before, a set whose holds last longer still.
type liveness struct {
	mu      sync.Mutex
	servers uint64 // bit i: server i
	round   int    // 0: the grant; n: the nth renewal decided
}

// joined adds server i to the round's servers, unless a later round was decided.
func (l *liveness) joined(round, i int) {
	l.mu.Lock()
	if l.round == round {
		l.servers |= 1 << i
	}
	l.mu.Unlock()
}

// renewed starts the next round with the servers that renewed the hold in it, and
// returns its number.
func (l *liveness) renewed(servers uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.round++
	l.servers = servers
	return l.round
}

// set returns the servers of the current round.
func (l *liveness) set() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.servers
}

// node is a quorum server's conn as the fan-out calls it (fanout.Node).
type node struct{ c *Conn }

// Run runs s alone, urgent (see Conn.RunScript): the fan-out batches the calls itself.
func (n node) Run(ctx context.Context, s *script.Script, args []any) *redis.Cmd {
	return n.c.RunScript(ctx, s, args, true)
}

// Legacy reports whether the server wants the scripts' plain form.
func (n node) Legacy() bool { return n.c.Legacy() }

// Pipeline returns a pipeline on the server's client.
func (n node) Pipeline() redis.Pipeliner { return n.c.client.Pipeline() }

// maxQuorum is the most servers a quorum takes: a hold records the servers that carry it
// in a 64-bit set (QuorumHold.carry).
const maxQuorum = 63

// patience returns how long a round waits for silent servers when the replies in hand
// do not contest it (see ReplyBudget and fanout.Patience), within the lease's validity
// budget (TTL minus the drift margin).
func (q *Quorum) patience(t *Terms) time.Duration {
	return q.fan.Patience(t.TTL, t.Validity)
}

// jitter sleeps a random time below the reply budget, or until ctx ends.
func (q *Quorum) jitter(ctx context.Context, ttl time.Duration) {
	t := time.NewTimer(rand.N(q.fan.Budget(ttl)) + 1)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// NewQuorum returns the store of clients, one client per server, an odd number of them,
// 3 to maxQuorum; a client it refuses is a *Refusal naming it.
func NewQuorum(clients []redis.UniversalClient) (*Quorum, error) {
	n := len(clients)
	if n < 3 || n%2 == 0 || n > maxQuorum {
		return nil, &Refusal{Field: "clients", Reason: fmt.Sprintf("a quorum needs an odd number of servers, 3 to %d, got %d", maxQuorum, n)}
	}
	q := &Quorum{need: n/2 + 1, scripts: make(map[*script.Script]*script.Script)}
	seen := make(map[string]int)
	for i, c := range clients {
		field := "clients[" + strconv.Itoa(i) + "]"
		switch c := c.(type) {
		case nil:
			return nil, &Refusal{Field: field, Reason: "must not be nil"}
		case *redis.Client:
			addr := c.Options().Addr
			if j, dup := seen[addr]; dup {
				return nil, &Refusal{Field: field, Reason: fmt.Sprintf("reaches %s, as clients[%d] does: each server must count once", addr, j)}
			}
			seen[addr] = i
			q.addrs = append(q.addrs, addr)
		case *redis.ClusterClient, *redis.Ring, *redis.AutoPipeliner:
			return nil, &Refusal{Field: field, Reason: fmt.Sprintf("a %T reaches several servers or batches calls; a quorum needs one *redis.Client per server", c)}
		default:
			q.addrs = append(q.addrs, fmt.Sprintf("server %d", i))
		}
		q.nodes = append(q.nodes, NewConn(c))
	}
	fans := make([]fanout.Node, n)
	for i, c := range q.nodes {
		fans[i] = node{c}
	}
	q.fan = fanout.New(fans)
	// Calls run inline when every server's client gives up at its context's deadline.
	q.honours = true
	for _, c := range q.nodes {
		q.honours = q.honours && c.honoursDeadlines
	}
	return q, nil
}

// Configure takes the restart delay, the reply budget and the ready mark's key.
func (q *Quorum) Configure(cfg Config) error {
	q.delay = cfg.TTL
	if cfg.RestartDelaySet {
		q.delay = cfg.RestartDelay
	}
	q.take(cfg)
	q.fan.Start(cfg.Aside, cfg.Done, cfg.ReplyBudget)
	q.mark = cfg.Prefix + "quorum:ready"
	return nil
}

// Detects is false: each server sees another part of the holds.
func (q *Quorum) Detects() bool { return false }

// Acquire makes one attempt on every server (see acquireRound).
func (q *Quorum) Acquire(ctx context.Context, h *Hold, nonce, manner string, _ bool) Grant {
	return q.acquireRound(ctx, h, nonce, manner)
}

// Resends is false: a quorum's attempt is never sent again (its proposal and write-back
// belong to one round); an attempt of unknown outcome is undone on every server, aside.
func (q *Quorum) Resends() bool { return false }

// Undo undoes the attempt with nonce on every server, aside (see undoAt).
func (q *Quorum) Undo(_ context.Context, h *Hold, nonce string) {
	q.undoAt(h, h.Owner(), nonce, nil)
}

// Release runs the release on every server (see releaseAll).
func (q *Quorum) Release(ctx context.Context, h *Hold, nonce string, _ bool) (script.Released, error) {
	return q.releaseAll(ctx, h, nonce)
}

// Leave runs the acquire script in manner leave on every server, aside.
func (q *Quorum) Leave(h *Hold) {
	q.each(nil, false, func(ctx context.Context, c *Conn) error {
		s, args := q.acquireCall(h, q.cfg.Nonce(), MannerLeave)
		return c.RunScript(ctx, s, args, true).Err()
	})
}

// Renew renews the leases that have a TTL to ask for on every server (see renewAt).
func (q *Quorum) Renew(timeout time.Duration, batch []*Hold, ttls []time.Duration, errs []error) {
	var idx []int
	for i := range batch {
		if ttls[i] < time.Millisecond {
			ttls[i] = 0 // nothing is sent
			continue
		}
		idx = append(idx, i)
	}
	if len(idx) > 0 {
		q.renewAt(timeout, batch, idx, ttls, errs)
	}
}

// Inline reports whether every server's client gives up at its context's deadline: a
// quorum's clients do not batch.
func (q *Quorum) Inline(bool) bool { return q.honours }

// AutoPipelined is false: a quorum's clients are plain clients, one per server (its own
// per-server batches keep the order of the calls: see the fanout package).
func (q *Quorum) AutoPipelined() bool { return false }

// Refresh does nothing: a quorum's clients each reach one server.
func (q *Quorum) Refresh(error) {}

// Scripted is the first server's conn: the servers are single servers alike, whose
// scripts announce releases with classic Pub/Sub.
func (q *Quorum) Scripted() *Conn { return q.nodes[0] }

// Routes returns one classic feed per server: a release announced by any of them wakes
// the waiters.
func (q *Quorum) Routes(_ context.Context, _ string) ([]feed.Route, error) {
	routes := make([]feed.Route, len(q.nodes))
	for i, n := range q.nodes {
		routes[i] = feed.Route{ID: "server " + strconv.Itoa(i), Open: subscriber(n.client)}
	}
	return routes, nil
}

// Conns returns every server's conn.
func (q *Quorum) Conns() []*Conn { return q.nodes }

// Servers returns every server, of which a majority must agree.
func (q *Quorum) Servers() ([]Server, int) {
	s := make([]Server, len(q.nodes))
	for i, c := range q.nodes {
		s[i] = Server{Conn: c, Addr: q.addrs[i]}
	}
	return s, q.need
}

// ScanNodes returns the servers in the order of their views. Each may be passed over:
// every lock that a majority holds is on another server too.
func (q *Quorum) ScanNodes(context.Context) ([]ScanNode, error) {
	nodes := make([]ScanNode, len(q.nodes))
	for j, n := range q.nodes {
		nodes[j] = ScanNode{Addr: strconv.Itoa(j), client: n.client, Spare: true}
	}
	return nodes, nil
}

// Ping pings every server at once; a majority must answer.
func (q *Quorum) Ping(ctx context.Context) error {
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
	if len(errs)-countErrs(errs) >= q.need {
		return nil
	}
	return q.failure("ping", errs)
}

// Admits checks that t can be served by a quorum.
func (q *Quorum) Admits(t *Terms) error {
	switch {
	case t.Spec.Fair:
		return &Refusal{Field: "Fair", Reason: "not served by a quorum Locker: each server keeps its own queue, so no majority agrees on the order"}
	case t.Permits > 1:
		return &Refusal{Field: "Permits", Reason: fmt.Sprintf("more than one permit is not served by a quorum Locker: majorities of %d holders each can admit more than %d, got %d", t.Permits, t.Permits, t.Permits)}
	case t.SyncReplicas > 0:
		return &Refusal{Field: "SyncReplicas", Reason: "not served by a quorum Locker: its servers are independent primaries, and a majority of them is what a grant waits for"}
	}
	return nil
}

func (q *Quorum) wrap(s *script.Script) *script.Script {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.scripts[s]
	if w == nil {
		var b strings.Builder
		// A reader's and a permit's token fields are its holder's (see tokenFields).
		fmt.Fprintf(&b, "local per_holder = %t\nlocal r = (function()\n", s == script.ReadAcquire || s == script.SemAcquire)
		if q.delay > 0 {
			b.WriteString(script.Source("gate"))
		}
		b.WriteString(s.Body())
		b.WriteString("\nend)()\n")
		b.WriteString(script.Source("quorum"))
		w = script.New(s.Flags(), b.String())
		q.scripts[s] = w
	}
	return w
}

// acquireCall returns the script and arguments of an acquire call that proposes no token
// (see proposeCall).
func (q *Quorum) acquireCall(h *Hold, nonce, manner string) (*script.Script, []any) {
	return q.proposeCall(h, nonce, manner, argNoLabel)
}

// proposeCall returns the script and arguments of an acquire attempt on every server,
// with proposal as the script's proposed token ("": none; see propose): with the restart
// gate, its mark as one more key and the delay as one more argument.
func (q *Quorum) proposeCall(h *Hold, nonce, manner string, proposal any) (*script.Script, []any) {
	args := q.args(q.nodes[0]).acquire(h, nonce, manner)
	if h.args.label == nil {
		// The label's slot comes before the proposal, labelled or not.
		args = append(args, argNoLabel)
	}
	s := q.wrap(h.Terms.Spec.Acquire)
	if q.delay <= 0 {
		return s, append(args, proposal)
	}
	keys := args[2].(int)
	out := make([]any, 0, len(args)+3)
	out = append(out, args[:3+keys]...)
	out[2] = keys + 1
	out = append(out, q.mark)
	out = append(out, args[3+keys:]...)
	out = append(out, proposal, max(q.delay, h.Terms.TTL).Milliseconds())
	return s, out
}

// propose returns the token a fresh attempt proposes to the servers: the clock in
// microseconds, and above every token proposed before, so that it exceeds the key's last
// token when this Locker drew that one even if the clock stepped back. A server takes it
// when its own clock is within a tenth of the lock's TTL or fence retention of it
// (acquire.lua): the servers that take it all carry the same token.
func (q *Quorum) propose() int64 {
	p := time.Now().UnixMicro()
	for {
		last := q.proposed.Load()
		if p <= last {
			p = last + 1
		}
		if q.proposed.CompareAndSwap(last, p) {
			return p
		}
	}
}
