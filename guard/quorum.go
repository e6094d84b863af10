package guard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/fanout"
	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/redis/go-redis/v9"
)

var raiseScript = script.Raise

// quorum is the Redis side of a Locker made by NewQuorum: one conn per independent
// server, of which need (a majority) must agree.
type quorum struct {
	nodes []*conn
	addrs []string // the servers' addresses, for errors
	need  int
	delay time.Duration // RestartDelay; 0: off
	mark  any           // the key of the servers' ready mark (gate.lua)

	mu      sync.Mutex
	scripts map[*script.Script]*script.Script // acquire scripts as a quorum sends them (see wrap)

	proposed atomic.Int64 // the last token proposed (see propose), µs

	fan *fanout.Fanout // the calls on every server at once (rounds)

	honours bool     // every server's client gives up on calls at their context's deadline
	env     storeEnv // what the quorum takes of its Locker
}

// quorumHold is what a quorum Locker keeps of a hold besides held's fields (apart, so
// that the held record of a Locker on one deployment stays in its allocation class).
type quorumHold struct {
	nonce string        // the nonce of the attempt that won the hold
	carry atomic.Uint64 // the servers known to carry the hold (bit i: server i)
}

// node is a quorum server's conn as the fan-out calls it (fanout.Node).
type node struct{ c *conn }

// Run runs s alone, urgent (see conn.runScript): the fan-out batches the calls itself.
func (n node) Run(ctx context.Context, s *script.Script, args []any) *redis.Cmd {
	return n.c.runScript(ctx, s, args, true)
}

// Legacy reports whether the server wants the scripts' plain form.
func (n node) Legacy() bool { return n.c.legacy.Load() }

// Pipeline returns a pipeline on the server's client.
func (n node) Pipeline() redis.Pipeliner { return n.c.client.Pipeline() }

// maxQuorum is the most servers a quorum Locker takes: a hold records the servers that
// carry it in a 64-bit set (held.carry).
const maxQuorum = 63

// patience returns how long a round waits for silent servers when the replies in hand
// do not contest it (see ReplyBudget and fanout.Patience), within the lease's validity
// budget (TTL minus the drift margin).
func (q *quorum) patience(s *settings) time.Duration {
	return q.fan.Patience(s.ttl, s.ttl-s.driftMargin())
}

// jitter sleeps a random time below the reply budget, or until ctx ends.
func (q *quorum) jitter(ctx context.Context, ttl time.Duration) {
	t := time.NewTimer(rand.N(q.fan.Budget(ttl)) + 1)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// NewQuorum returns a Locker whose locks are held on a majority of independent Redis
// servers (the Redlock algorithm, with this package's guarantees added): clients are one
// client per server, an odd number of them, 3 or more. The Locker is used like one made
// by New — Acquire, Wrap, the Echo middleware, the gRPC interceptors and their options
// work unchanged — and one server down, paused, slow or restarted empty neither stops
// nor double-grants a lock.
//
//   - An attempt runs on every server at once, with one nonce; it succeeds when a majority
//     granted it within the lease's validity budget (TTL minus the time spent minus
//     Renewal's margin). A server silent past the reply budget counts as failed once another
//     owner's hold contests the attempt, and past the round's patience in any case (see
//     ReplyBudget): a paused minority does not hold contenders for their validity. Otherwise it is undone on every server that granted it or left its
//     outcome unknown, and counts as a busy attempt — or fails with a *RedisError
//     (ErrUnavailable) whose Err says what each server answered, when so many servers
//     failed that no majority could have answered, and with one whose Err is the
//     context's error when the caller's context ended while servers that could still
//     have made a majority were silent (as a call to one server that does not return in
//     time: not ErrLocked because one server named another owner).
//   - An attempt proposes its fencing token: the Locker's clock in microseconds, above
//     every token it proposed before. A server takes it when its own clock is within a
//     tenth of the TTL (or of FenceRetention, if shorter) of it and it exceeds the key's
//     last token there; otherwise it draws its own, as on one server. When the granting
//     servers all took it, it is the hold's token, with no further round trip; when their
//     tokens differ, the highest is written back to them (one more round trip) before the
//     lease is handed out. Either way every server of the granting majority carries the
//     token above its last one, and any two majorities share a server, so every later
//     hold's token exceeds it. A reentry through Redis reads the same token.
//   - The watchdog renews on every server; a lease stays valid while a majority confirms
//     it in time, and is lost (its context cancelled with ErrLeaseLost) as soon as a
//     majority reports it gone, or when its validity runs out without a majority.
//   - A release runs on every server; it succeeds when a majority confirms it, else it
//     fails with a *RedisError whose Err says what each server answered.
//   - Waiters subscribe to every server: a release announced by any of them wakes them.
//   - A server that restarted without its data grants nothing until it has been up for
//     RestartDelay (default: the Locker's TTL), so that it cannot, with a minority of the
//     others, grant a lock it forgot. RestartDelay(0) leaves that to the operator.
//
// The lock kinds whose holders a majority can count are served: exclusive (the default)
// and read-write. A semaphore of more than one permit and the fair lock are refused
// (ErrInvalidConfig): majorities of N permits each can admit more than N holders, and
// each server's queue keeps its own order. SyncReplicas is refused too: the servers are
// independent primaries. Each client must reach one server (a *redis.Client, also one
// made by NewFailoverClient); a Cluster client, a Ring and an auto-pipeliner are refused.
// Build them with ContextTimeoutEnabled, as for New. Bad clients or options fail with a
// *ConfigError naming them; Close does not close the clients.
func NewQuorum(clients []redis.UniversalClient, opts ...Option) (*Locker, error) {
	n := len(clients)
	if n < 3 || n%2 == 0 || n > maxQuorum {
		return nil, &ConfigError{Field: "clients", Reason: fmt.Sprintf("a quorum needs an odd number of servers, 3 to %d, got %d", maxQuorum, n)}
	}
	q := &quorum{need: n/2 + 1, scripts: make(map[*script.Script]*script.Script)}
	seen := make(map[string]int)
	for i, c := range clients {
		field := "clients[" + strconv.Itoa(i) + "]"
		switch c := c.(type) {
		case nil:
			return nil, &ConfigError{Field: field, Reason: "must not be nil"}
		case *redis.Client:
			addr := c.Options().Addr
			if j, dup := seen[addr]; dup {
				return nil, &ConfigError{Field: field, Reason: fmt.Sprintf("reaches %s, as clients[%d] does: each server must count once", addr, j)}
			}
			seen[addr] = i
			q.addrs = append(q.addrs, addr)
		case *redis.ClusterClient, *redis.Ring, *redis.AutoPipeliner:
			return nil, &ConfigError{Field: field, Reason: fmt.Sprintf("a %T reaches several servers or batches calls; a quorum needs one *redis.Client per server", c)}
		default:
			q.addrs = append(q.addrs, fmt.Sprintf("server %d", i))
		}
		q.nodes = append(q.nodes, &conn{client: c, honoursDeadlines: honoursDeadlines(c)})
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
	return newLocker(q, "NewQuorum", opts)
}

// configure checks the Locker's settings for a quorum and takes the restart delay, the
// reply budget and the ready mark's key from them.
func (q *quorum) configure(cfg *settings, env storeEnv) error {
	if err := cfg.validateDeadlock(true); err != nil {
		return err
	}
	if err := q.admits(cfg); err != nil {
		return err
	}
	q.delay = cfg.ttl
	if cfg.restartDelaySet {
		q.delay = cfg.restartDelay
	}
	q.fan.Start(env.aside, env.done, cfg.replyBudget)
	q.mark = cfg.prefix + "quorum:ready"
	q.env = env
	return nil
}

// acquire makes one attempt on every server (see acquireRound).
func (q *quorum) acquire(ctx context.Context, h *held, nonce, manner string, _ bool) acquireReply {
	return q.acquireRound(ctx, h, nonce, manner)
}

// resends is false: a quorum's attempt is never sent again (its proposal and write-back
// belong to one round); an attempt of unknown outcome is undone on every server, aside.
func (q *quorum) resends() bool { return false }

// undo undoes the attempt with nonce on every server, aside (see undoAt).
func (q *quorum) undo(_ context.Context, h *held, nonce string) {
	q.undoAt(h, nonce, nil)
}

// release runs the release on every server (see releaseAll).
func (q *quorum) release(ctx context.Context, h *held, _ bool) (releaseReply, error) {
	return q.releaseAll(ctx, h, h.finalNonce())
}

// leave runs the acquire script in manner leave on every server, aside.
func (q *quorum) leave(h *held) {
	q.each(nil, false, func(ctx context.Context, c *conn) error {
		s, args := q.acquireCall(h, q.env.nonce(), mannerLeave)
		return c.runScript(ctx, s, args, true).Err()
	})
}

// renew renews the leases that have a TTL to ask for on every server (see renewAt).
func (q *quorum) renew(timeout time.Duration, batch []*held, ttls []time.Duration, errs []error) {
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

// inline reports whether every server's client gives up at its context's deadline: a
// quorum's clients do not batch.
func (q *quorum) inline(bool) bool { return q.honours }

// autoPipelined is false: a quorum's clients are plain clients, one per server (its own
// per-server batches keep the order of the calls: see the fanout package).
func (q *quorum) autoPipelined() bool { return false }

// refresh does nothing: a quorum's clients each reach one server.
func (q *quorum) refresh(error) {}

// scripted is the first server's conn: the servers are single servers alike, whose
// scripts announce releases with classic Pub/Sub.
func (q *quorum) scripted() *conn { return q.nodes[0] }

// routes returns one classic feed per server: a release announced by any of them wakes
// the waiters.
func (q *quorum) routes(_ context.Context, _ string) ([]feed.Route, error) {
	routes := make([]feed.Route, len(q.nodes))
	for i, n := range q.nodes {
		routes[i] = feed.Route{ID: "server " + strconv.Itoa(i), Open: subscriber(n.client)}
	}
	return routes, nil
}

func (q *quorum) conns() []*conn { return q.nodes }

// read reads reqs on every server at once and returns the majority's view of each, with
// each server's (see majority).
func (q *quorum) read(ctx context.Context, op string, reqs []inspectReq, read readFunc) ([]*LockState, [][]*LockState, error) {
	n := len(q.nodes)
	byServer := make([][]*LockState, n)
	var wg sync.WaitGroup
	for j, c := range q.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			byServer[j] = read(ctx, c, reqs)
		}()
	}
	wg.Wait()
	states := make([]*LockState, len(reqs))
	views := make([][]*LockState, len(reqs))
	for i, r := range reqs {
		views[i] = make([]*LockState, n)
		for j := range n {
			st := byServer[j][i]
			st.Server = q.addrs[j]
			views[i][j] = st
		}
		st, err := q.majority(op, r, views[i])
		if err != nil {
			return nil, nil, err
		}
		states[i] = st
	}
	return states, views, nil
}

// scanNodes returns the servers in the order of their views. Each may be passed over:
// every lock that a majority holds is on another server too.
func (q *quorum) scanNodes(context.Context) ([]scanNode, error) {
	nodes := make([]scanNode, len(q.nodes))
	for j, n := range q.nodes {
		nodes[j] = scanNode{addr: strconv.Itoa(j), c: n.client, spare: true}
	}
	return nodes, nil
}

// admits checks that s can be served by a quorum.
func (q *quorum) admits(s *settings) error {
	switch {
	case s.kind == KindFair:
		return &ConfigError{Field: "Fair", Reason: "not served by a quorum Locker: each server keeps its own queue, so no majority agrees on the order"}
	case s.kind == KindSemaphore && s.permits > 1:
		return &ConfigError{Field: "Permits", Reason: fmt.Sprintf("more than one permit is not served by a quorum Locker: majorities of %d holders each can admit more than %d, got %d", s.permits, s.permits, s.permits)}
	case s.syncReplicas > 0:
		return &ConfigError{Field: "SyncReplicas", Reason: "not served by a quorum Locker: its servers are independent primaries, and a majority of them is what a grant waits for"}
	}
	return nil
}

// wrap returns the acquire script s as a quorum sends it: run as a function, after the
// restart gate (gate.lua) when the check is on, and followed by quorum.lua, which adds
// to a reentry's reply the hold's confirmed and proposed tokens.
func (q *quorum) wrap(s *script.Script) *script.Script {
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
func (q *quorum) acquireCall(h *held, nonce, manner string) (*script.Script, []any) {
	return q.proposeCall(h, nonce, manner, argNoLabel)
}

// proposeCall returns the script and arguments of an acquire attempt on every server,
// with proposal as the script's proposed token ("": none; see propose): with the restart
// gate, its mark as one more key and the delay as one more argument.
func (q *quorum) proposeCall(h *held, nonce, manner string, proposal any) (*script.Script, []any) {
	args := h.acquireArgs(nonce, manner)
	if h.args.label == nil {
		// The label's slot comes before the proposal, labelled or not.
		args = append(args, argNoLabel)
	}
	s := q.wrap(h.s.spec.acquire)
	if q.delay <= 0 {
		return s, append(args, proposal)
	}
	keys := args[2].(int)
	out := make([]any, 0, len(args)+3)
	out = append(out, args[:3+keys]...)
	out[2] = keys + 1
	out = append(out, q.mark)
	out = append(out, args[3+keys:]...)
	out = append(out, proposal, max(q.delay, h.s.ttl).Milliseconds())
	return s, out
}

// propose returns the token a fresh attempt proposes to the servers: the clock in
// microseconds, and above every token proposed before, so that it exceeds the key's last
// token when this Locker drew that one even if the clock stepped back. A server takes it
// when its own clock is within a tenth of the lock's TTL or fence retention of it
// (acquire.lua): the servers that take it all carry the same token.
func (q *quorum) propose() int64 {
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

// quorumError reports a call of a quorum Locker (NewQuorum) that too few servers
// confirmed: what each server answered. It is the Err of a *RedisError (ErrUnavailable).
type quorumError struct {
	op    string   // the operation: "acquire", "release", "renew", "inspect", "ping"...
	need  int      // the number of servers that must agree: a majority
	addrs []string // the servers' addresses, in the order the Locker was given them
	errs  []error  // each server's error, by the same index: nil for a server that answered as needed
}

// failure returns the error of a call op that too few of q's servers confirmed, errs
// being each server's error.
func (q *quorum) failure(op string, errs []error) *quorumError {
	return &quorumError{op: op, need: q.need, addrs: q.addrs, errs: errs}
}

// Error says how many servers confirmed the call and why the others did not.
func (e *quorumError) Error() string {
	var b strings.Builder
	ok := 0
	for _, err := range e.errs {
		if err == nil {
			ok++
		}
	}
	fmt.Fprintf(&b, "quorum: %d of %d servers confirmed the %s, %d needed", ok, len(e.errs), e.op, e.need)
	for i, err := range e.errs {
		if err != nil {
			fmt.Fprintf(&b, "; %s: %v", e.addrs[i], err)
		}
	}
	return b.String()
}

// Unwrap returns the servers' errors, each prefixed with its server's address, so that
// errors.Is finds, for example, a context.DeadlineExceeded among them.
func (e *quorumError) Unwrap() []error {
	var errs []error
	for i, err := range e.errs {
		if err != nil {
			errs = append(errs, &serverError{addr: e.addrs[i], err: err})
		}
	}
	return errs
}

// serverError is one server's error in a quorumError.
type serverError struct {
	addr string
	err  error
}

// Error names the server and its error.
func (e *serverError) Error() string { return e.addr + ": " + e.err.Error() }

// Unwrap returns the server's error.
func (e *serverError) Unwrap() error { return e.err }

// Outcomes that a server gave for a quorum call, beside an error.
var (
	errNotGranted = errors.New("held by another owner")
	errNotHeld    = errors.New("not held there")
	errUndone     = errors.New("granted, but no majority did: undone")
	errNoAnswer   = errors.New("no answer before the outcome was decided")
)

// quorumGrant is one server's grant in an attempt.
type quorumGrant struct {
	i         int
	token     int64
	holds     int64
	confirmed int64    // a reentered hold's token as a quorum confirmed it there (raise.lua), 0: none
	proposed  int64    // a reentered hold's token when it was the proposal it took there (acquire.lua), 0: none
	holder    ctxid.ID // a reentry's holder, when a section the owner is in (see granted)
}

// attemptReply is one server's reply to an attempt: the acquire script's, and, for a
// reentry, the hold's confirmed and proposed tokens (quorum.lua).
type attemptReply struct {
	v                   any
	confirmed, proposed int64
}

// parseAttempt splits the reply of an attempt's call on one server (see quorum.lua).
func parseAttempt(cmd *redis.Cmd) (attemptReply, error) {
	v, err := cmd.Slice()
	switch {
	case err != nil:
		return attemptReply{}, err
	case len(v) == 0:
		return attemptReply{}, fmt.Errorf("unexpected acquire reply %v", v)
	}
	r := attemptReply{v: v[0]}
	if len(v) == 3 {
		r.confirmed, r.proposed = tokenOf(v[1]), tokenOf(v[2])
	}
	return r, nil
}

// tokenOf reads a token field's value, 0 for none.
func tokenOf(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// tokenFields names the fields of h's lock hash that hold its token and its confirmed
// token (see raise.lua).
func tokenFields(h *held) (token, confirmed string) {
	token = "#t"
	if h.s.kind == KindRead || h.s.kind == KindSemaphore {
		token = string(h.hk.owner) + "#t" // each holder's own (see kinds/lib.lua)
	}
	return token, token + "q"
}

// Outcomes of a quorum attempt, for the calls that answer after it was decided.
const (
	attemptPending int32 = iota
	attemptWon
	attemptLost
)

// acquireRound makes one attempt on every server and merges their replies into one
// outcome: a grant by a majority (its token written back to the granting servers that do
// not carry it), busy, refused, or a *quorumError when too few answered.
func (q *quorum) acquireRound(ctx context.Context, h *held, nonce, manner string) acquireReply {
	a := q.newAttempt(h, nonce, manner)
	// The round's context ends when its last call returns; the write-back of a fresh
	// hold's token, when one is needed, runs after that, within the caller's.
	callerCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, h.s.ttl-h.s.driftMargin())
	defer a.settle()
	q.fan.Round(ctx, cancel, fanout.Limits{Budget: q.fan.Budget(h.s.ttl), Patience: q.patience(h.s)}, &a.rs, a)

	if a.outcome.Load() == attemptWon {
		g, err := q.raise(callerCtx, h, nonce, a.proposal, a.grants)
		if err == nil {
			a.top, a.hold = g.token, h.qh
			return acquireReply{g: g}
		}
		a.outcome.Store(attemptLost)
		q.undoAt(h, nonce, nil)
		return acquireReply{err: err}
	}
	a.outcome.Store(attemptLost) // also when every server answered without a decision
	q.undoAt(h, nonce, a.undoOn())
	if err := callerCtx.Err(); err != nil && !a.refused && len(a.grants)+a.cut >= q.need {
		// The caller's context ended while servers that could still have made a majority
		// with the grants were silent: as a call to one server that does not return in
		// time, the attempt failed with the context's error. Reported busy because one
		// server said another owner holds the lock, it would say the lock is held when
		// the owner's own servers had not answered yet.
		return acquireReply{err: err}
	}
	if len(a.grants) > 0 && a.busy > 0 && manner != mannerTry {
		// A split vote: contenders that each won some servers undo at once, and the
		// undo's announcement wakes them all together. A pause of up to a budget, drawn
		// at random, keeps them from splitting the same servers again on their next
		// attempt, as Redlock's retry delay does.
		q.jitter(callerCtx, h.s.ttl)
	}
	return a.lost()
}

// newAttempt returns attempt nonce of h, proposing a token, with each server's command
// line (one allocation for all: a call fills its first two slots, see runScript).
func (q *quorum) newAttempt(h *held, nonce, manner string) *quorumAttempt {
	n := len(q.nodes)
	a := &quorumAttempt{q: q, h: h, nonce: nonce, pttl: -1, proposal: q.propose()}
	a.pending = a.pendingBuf[:0]
	s, line := q.proposeCall(h, nonce, manner, a.proposal)
	w := len(line)
	all := make([]any, n*w)
	for i := range n {
		copy(all[i*w:(i+1)*w], line)
	}
	a.script, a.lines, a.width = s, all, w
	a.grants = make([]quorumGrant, 0, n)
	return a
}

// quorumAttempt is one attempt of acquireRound in progress: the replies taken so far.
// Take runs under the round's lock; Late runs once the attempt is settled.
type quorumAttempt struct {
	rs       fanout.Run
	q        *quorum
	h        *held
	nonce    string
	script   *script.Script
	lines    []any // each server's command line, width long, one after the other
	width    int
	grants   []quorumGrant
	errs     []error // per server, once one failed or refused (see fail)
	undo     uint64  // the servers that may hold a grant of this attempt (bit i: server i)
	failed   int     // servers that answered with an error, or not at all
	cut      int     // of those, the servers given up when the context ended
	refused  bool
	pttl     int64 // the shortest TTL among the busy servers' holders, ms; -1: none
	outcome  atomic.Int32
	proposal int64 // the token proposed to the servers (see propose)
	top      int64 // the hold's token, once settled
	// hold is the hold the attempt won (h.qh as raise made it), once settled: a late
	// grant joins this one. The acquisition may have given it back (granted too late,
	// see Locker.waitAttempt) and won another with a later attempt, whose h.qh a late
	// grant of this one must not touch: the undo of this attempt's nonce, sent to every
	// server, drops the grant or has it refused.
	hold *quorumHold

	lateMu     sync.Mutex
	settled    bool           // acquireRound is done with the attempt (see settle)
	pending    []fanout.Reply // late replies that came before (in pendingBuf)
	pendingBuf [4]fanout.Reply

	replied, confirmed, proposed, held, busy int
}

// Line returns the script and command line of the attempt on server i (see
// fanout.ScriptCall).
func (a *quorumAttempt) Line(i int) (*script.Script, []any) {
	return a.script, a.lines[i*a.width : (i+1)*a.width : (i+1)*a.width]
}

// Late handles a reply that came after the attempt was decided (see lateGrant): at once
// once the attempt is settled, else when it is (see settle).
func (a *quorumAttempt) Late(r fanout.Reply) {
	a.lateMu.Lock()
	if !a.settled {
		a.pending = append(a.pending, r)
		a.lateMu.Unlock()
		return
	}
	a.lateMu.Unlock()
	a.lateGrant(r)
}

// settle marks the attempt settled (its outcome, and a won hold's token, final) and
// handles the replies that came late before.
func (a *quorumAttempt) settle() {
	a.lateMu.Lock()
	a.settled = true
	pending := a.pending
	a.pending = nil
	a.lateMu.Unlock()
	for _, r := range pending {
		a.lateGrant(r)
	}
}

// Stale reports whether the attempt is over — it lost, or its acquisition was given up
// or its hold released — so that its calls still waiting in a batch are not sent: their
// undo, or the hold's release, may have reached the server before them (a server's
// batches keep its calls in order).
func (a *quorumAttempt) Stale() bool {
	return a.outcome.Load() == attemptLost || a.q.env.gone(a.h)
}

// Contested reports whether another owner's hold, or a refusal, contests the attempt.
func (a *quorumAttempt) Contested() bool { return a.busy > 0 || a.refused }

// fail records what server i answered instead of a grant.
func (a *quorumAttempt) fail(i int, err error) {
	if a.errs == nil {
		a.errs = make([]error, len(a.q.nodes))
	}
	a.errs[i] = err
}

// undoOn returns the servers that may hold a grant of the attempt, as each takes them.
func (a *quorumAttempt) undoOn() []bool {
	on := make([]bool, len(a.q.nodes))
	for i := range on {
		on[i] = a.undo&(1<<i) != 0
	}
	return on
}

// Take records one server's reply and reports whether the attempt is decided.
func (a *quorumAttempt) Take(r fanout.Reply) bool {
	a.replied++
	var ar attemptReply
	if r.Err == nil {
		ar, r.Err = parseAttempt(r.V.(*redis.Cmd))
	}
	if r.Err != nil {
		a.fail(r.I, r.Err)
		if !isServerError(r.Err) {
			a.undo |= 1 << r.I
		}
		a.failed++
		if errors.Is(r.Err, context.Canceled) || errors.Is(r.Err, context.DeadlineExceeded) {
			a.cut++
		}
	} else {
		a.reply(r.I, ar)
	}
	// A hold the owner has on a majority already is a reentry: its servers confirmed its
	// token, or hold it and one of them confirmed the token (the others' write-back may
	// still be on its way) — or, when none confirmed one, the same with the token they
	// took as proposed. Grants none of which knew the owner are a fresh hold. Grants
	// of both sorts wait for every server's answer: the owner's hold may be on a majority
	// whose last server has not answered yet, or be left over on a minority from a hold
	// that ended, which must not lend its older token (see raise).
	q, n := a.q, len(a.q.nodes)
	switch {
	case a.refused:
	case q.reentered(a.confirmed, a.proposed, a.held) != reenteredNot,
		len(a.grants) >= q.need && (a.confirmed+a.proposed == 0 || a.replied == n):
		a.outcome.Store(attemptWon)
		return true
	case len(a.grants)+n-a.replied >= q.need:
		return false // a majority may still grant it
	}
	a.outcome.Store(attemptLost)
	return true
}

// reply records the script's reply of server i.
func (a *quorumAttempt) reply(i int, r attemptReply) {
	g, err := parseGranted(r.v)
	switch {
	case err != nil:
		a.fail(i, err)
		a.failed++
	case g.acquired:
		a.undo |= 1 << i
		a.grants = append(a.grants, quorumGrant{i: i, token: g.token, holds: g.holds, confirmed: r.confirmed, proposed: r.proposed, holder: g.holder})
		if r.confirmed > 0 {
			a.confirmed++
		}
		if r.proposed > 0 {
			a.proposed++
		}
		if g.holds > 1 {
			a.held++
		}
	case g.upgrade:
		a.refused = true
		a.fail(i, ErrUpgrade)
	default:
		a.fail(i, errNotGranted)
		a.busy++
		if ms := g.pttl.Milliseconds(); ms >= 0 && (a.pttl < 0 || ms < a.pttl) {
			a.pttl = ms
		}
	}
}

// lateGrant handles a reply to the attempt that came after it was decided, once it is
// settled.
func (a *quorumAttempt) lateGrant(r fanout.Reply) {
	q, h, nonce := a.q, a.h, a.nonce
	late, granted, err := lateOutcome(r)
	switch {
	case err == fanout.ErrNotSent, err != nil && isServerError(err), err == nil && !granted:
	case a.outcome.Load() == attemptLost:
		q.undoAt(h, nonce, onlyAt(len(a.q.nodes), r.I)) // the attempt lost: undone
	case err == nil && late.holds == 1 && late.carries(a.top, a.proposal):
		// A fresh grant after the majority's that took the proposal that became the
		// hold's token: part of the hold (renewed and released with the others) as it
		// is. A release of the hold, like the undo of an acquisition given up, goes to
		// every server with this attempt's nonce, and drops this grant or, reaching the
		// server first, has it refused.
		a.hold.carry.Or(1 << r.I)
	case err == nil && q.env.gone(h):
		// Undone: its grant on this server came after the acquisition was given up or
		// the hold's release reached the server, and would stay there until its TTL.
		q.undoAt(h, nonce, onlyAt(len(a.q.nodes), r.I))
	case late.carries(a.top, a.proposal):
		a.hold.carry.Or(1 << r.I) // a grant after the majority's: part of the hold
	case err == nil:
		// A grant after the majority's: part of the hold, once told the hold's token
		// (aside: the reply's goroutine may have others to hand on).
		raise := func() {
			if q.raiseOn(context.Background(), q.nodes[r.I], h, a.top, nonce) == nil {
				a.hold.carry.Or(1 << r.I)
			}
		}
		if !q.env.aside(raise) {
			raise()
		}
	}
}

// lateOutcome decodes a reply r that came after its attempt was decided: the grant it
// carries, whether it granted, and the call's error (the transport's, or a reply that
// could not be read), nil when the reply was read.
func lateOutcome(r fanout.Reply) (late quorumGrant, granted bool, err error) {
	if r.Err != nil {
		return quorumGrant{}, false, r.Err
	}
	ar, err := parseAttempt(r.V.(*redis.Cmd))
	if err != nil {
		return quorumGrant{}, false, err
	}
	g, err := parseGranted(ar.v)
	if err != nil || !g.acquired {
		return quorumGrant{}, false, nil
	}
	return quorumGrant{token: g.token, holds: g.holds, confirmed: ar.confirmed, proposed: ar.proposed}, true, nil
}

// lost is the reply of an attempt that no majority granted: refused, busy, or a
// *quorumError when too few servers answered for a majority to be possible.
func (a *quorumAttempt) lost() acquireReply {
	q := a.q
	switch {
	case a.refused:
		return acquireReply{g: granted{upgrade: true}}
	case a.failed <= len(q.nodes)-q.need:
		// Busy: enough servers answered, or may still, for a majority to be reached
		// once the lock is free.
		return acquireReply{g: granted{pttl: time.Duration(a.pttl) * time.Millisecond}}
	}
	if a.errs == nil {
		a.errs = make([]error, len(q.nodes))
	}
	for i := range a.errs {
		switch {
		case a.errs[i] != nil:
		case a.undo&(1<<i) != 0:
			a.errs[i] = errUndone
		default:
			a.errs[i] = errNoAnswer
		}
	}
	return acquireReply{err: q.failure("acquire", a.errs)}
}

// raise settles the token of a hold that a majority granted and returns it with
// the attempt's merged reply. A hold whose token a majority of the granting servers had
// confirmed (raise.lua) is a reentry through Redis and keeps that token; so is one that
// a majority held already (the attempt reentered there) with the token confirmed on some
// of them: that is the owner's current hold, whose write-back has not reached every
// server yet, and it keeps the highest confirmed token (see current). When none of them
// confirmed a token, the same holds of the token they took as proposed: a hold whose
// servers all took its proposal needed no write-back. Any other hold is fresh: its token
// is the highest of all the grants' — a server that reports a hold of the owner's nobody
// confirmed is left over from an attempt of the owner's that failed, and one that
// confirms a hold a majority does not is left over from a hold that ended; either token
// was drawn before holds other owners may have had since, and must not be handed out.
// Every granting server that does not carry the token yet (see carries) is told it
// (raise.lua, which also raises its fence); the attempt fails, and is undone, when
// fewer than a majority carry it afterwards.
func (q *quorum) raise(ctx context.Context, h *held, nonce string, proposal int64, grants []quorumGrant) (granted, error) {
	top, holds, holder := q.settle(grants)
	reentry := holds > 1
	g := granted{acquired: true, token: top, holds: 1}
	if reentry {
		g.holds = holds
	}
	if reentry && holder != "" {
		// A reentry of the hold of a section the owner is in: the write-back below and the
		// hold's renewals and release are the holder's.
		g.holder = holder
		q.env.rekey(h, holder)
	}
	errs := q.writeBack(ctx, h, nonce, top, proposal, grants)
	carried := 0
	h.qh = &quorumHold{nonce: nonce}
	for _, g := range grants {
		if errs == nil || errs[g.i] == nil {
			carried++
			h.qh.carry.Or(1 << g.i)
		} else if !reentry {
			// Its hold carries a token that is not the hold's: drop it there, so that a
			// reentry never reads it. The majority that carries the token keeps the lock.
			q.undoAt(h, nonce, onlyAt(len(q.nodes), g.i))
		}
	}
	if carried < q.need {
		for i := range errs {
			if !slices.ContainsFunc(grants, func(g quorumGrant) bool { return g.i == i }) {
				errs[i] = errNotGranted
			}
		}
		return granted{}, q.failure("acquire", errs)
	}
	return g, nil
}

// writeBack tells top, at once, to every granting server that does not carry it yet, and
// returns each server's error (nil where it carries top now, or did already; nil for
// all when none needed it).
func (q *quorum) writeBack(ctx context.Context, h *held, nonce string, top, proposal int64, grants []quorumGrant) []error {
	if !slices.ContainsFunc(grants, func(g quorumGrant) bool { return !g.carries(top, proposal) }) {
		return nil
	}
	errs := make([]error, len(q.nodes))
	var wg sync.WaitGroup
	for _, g := range grants {
		if g.carries(top, proposal) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g.i] = q.raiseOn(ctx, q.nodes[g.i], h, top, nonce)
		}()
	}
	wg.Wait()
	return errs
}

// carries reports whether grant g's server carries the hold's token top already, and
// needs no write-back: its hold's token is top, and a quorum confirmed it there, or the
// server took it as proposed — a reentry's record of that (quorum.lua), or the attempt's
// own grant of its proposal (acquire.lua). Any two majorities share a server, so a token
// that a majority's servers each drew above their last one (their fences) already
// exceeds every earlier hold's: only servers whose tokens differ from the hold's need
// it written back.
func (g quorumGrant) carries(top, proposal int64) bool {
	return g.token == top && (g.confirmed == top || g.proposed == top || g.holds == 1 && top == proposal)
}

// settle reads the token, the hold count and the holder of a hold a majority granted
// (see raise): the owner's current hold keeps its highest confirmed token (or,
// where none is confirmed, proposed token) and count, and its holder when that is a
// section the owner is in; a fresh hold takes the highest token granted, with one hold.
func (q *quorum) settle(grants []quorumGrant) (top, holds int64, holder ctxid.ID) {
	holds = 1
	confirmed, proposed, held := 0, 0, 0
	for _, g := range grants {
		if g.confirmed > 0 {
			confirmed++
		}
		if g.proposed > 0 {
			proposed++
		}
		if g.holds > 1 {
			held++
		}
	}
	how := q.reentered(confirmed, proposed, held)
	for _, g := range grants {
		switch {
		case how == reenteredNot:
			top = max(top, g.token)
			continue
		case how == reenteredConfirmed && g.confirmed > 0:
			top, holds = max(top, g.confirmed), max(holds, g.holds)
		case how == reenteredProposed && g.proposed > 0:
			top, holds = max(top, g.proposed), max(holds, g.holds)
		}
		if holder == "" && g.holds > 1 {
			holder = g.holder
		}
	}
	return top, holds, holder
}

// Whether an attempt's grants reenter the owner's current hold (see reentered).
const (
	reenteredNot       = iota // a fresh hold
	reenteredConfirmed        // the current hold, whose token a quorum confirmed
	reenteredProposed         // the current hold, whose token its servers took as proposed
)

// reentered says whether an attempt's grants, of which confirmed carried a confirmed
// token, proposed a proposed one and held were reentries (the owner held the lock there
// already), are the owner's current hold rather than a fresh one (see current): by
// their confirmed tokens, or, when none was confirmed, by their proposed ones. A hold
// whose write-back was needed was confirmed on a majority before its lease was handed
// out, so any majority of its holders shows a confirmed token; a proposed token that a
// late write-back has not yet replaced (the hold took another) is never alone there.
func (q *quorum) reentered(confirmed, proposed, held int) int {
	switch {
	case q.current(confirmed, held):
		return reenteredConfirmed
	case confirmed == 0 && q.current(proposed, held):
		return reenteredProposed
	}
	return reenteredNot
}

// current reports whether an attempt's grants, of which confirmed carried a confirmed
// token and held were reentries (the owner held the lock there already), are the
// owner's current hold rather than a fresh one: a majority confirmed its token, or a
// majority held it and some confirmed the token (the others' write-back still on its
// way).
func (q *quorum) current(confirmed, held int) bool {
	return confirmed >= q.need || held >= q.need && confirmed > 0
}

// onlyAt returns n flags, set at i only.
func onlyAt(n, i int) []bool {
	on := make([]bool, n)
	on[i] = true
	return on
}

// raiseOn gives h's hold on one server the token top (raise.lua), if the attempt with
// nonce made or counted it there.
func (q *quorum) raiseOn(ctx context.Context, c *conn, h *held, top int64, nonce string) error {
	ctx, cancel := context.WithTimeout(ctx, min(q.env.timeout, h.s.ttl-h.s.driftMargin()))
	defer cancel()
	args := raiseArgs(h, top, nonce)
	n, err := c.runScript(ctx, raiseScript, args, true).Int64()
	switch {
	case err != nil:
		return err
	case n != 1:
		return errNotHeld
	}
	return nil
}

// raiseArgs returns the command line of raise.lua for h's hold, the token top and the
// attempt with nonce (the first two slots left for the script's SHA1 and source).
func raiseArgs(h *held, top int64, nonce string) []any {
	tokenField, _ := tokenFields(h)
	holderField, holderValue, nonces := string(h.hk.owner), "", string(h.hk.owner)+"#a"
	if h.s.kind == KindWrite {
		holderField, holderValue, nonces = "#W", string(h.hk.owner), "#Wa"
	}
	return []any{nil, nil, 2, h.rk.lock, h.rk.fence, strconv.FormatInt(top, 10), tokenField, holderField, holderValue, h.args.retention, nonces, nonce}
}

// undoAt undoes, aside, the attempt with nonce on the servers marked in on (all when
// on is nil); on a closed Locker, at once.
// An undo whose call failed without a server's answer (a timeout: the command may have
// been dropped with its connection) is sent once more: the undo nonce makes a second
// run a no-op.
func (q *quorum) undoAt(h *held, nonce string, on []bool) {
	q.each(on, true, func(ctx context.Context, c *conn) error {
		var err error
		for _, args := range h.undoArgs(nonce) {
			call := func(ctx context.Context) error { return c.runScript(ctx, h.s.spec.release, args, true).Err() }
			e := call(ctx)
			if !answered(e) && ctx.Err() == nil {
				e = call(ctx)
			}
			q.untilAnswered(c, e, call)
			if e != nil {
				err = e
			}
		}
		return err
	})
}

// untilAnswered hands call, made on c, to the Locker's lane for c when err says that c
// did not answer it: a frozen server may run the attempt it undoes or releases when it
// wakes, and call must reach it then (see undo.go).
func (q *quorum) untilAnswered(c *conn, err error, call func(context.Context) error) {
	if !answered(err) {
		q.env.retry(c, call)
	}
}

// releaseAll runs a release on every server and merges the replies: decided once a
// majority answered (the servers still silent keep their share until its TTL).
func (q *quorum) releaseAll(ctx context.Context, h *held, nonce string) (releaseReply, error) {
	n := len(q.nodes)
	// A server without the hold is told the winning attempt's nonce: its copy of the
	// attempt may still be on its way, and must not take the lock after this release.
	line := h.releaseArgs(nonce, "")
	w := len(line) + 1
	rr := &releaseRound{q: q, h: h, width: w, lines: make([]any, n*w), slots: make([]releaseSlot, n),
		// The release waits for every server known to carry the hold besides a majority
		// (within the round's patience): the owner's next attempt, on other connections,
		// must not reach one of them before the release does and find the lock held.
		carriers: h.qh.carry.Load()}
	for i := range n {
		copy(rr.lines[i*w:], line)
		rr.lines[i*w+w-1] = h.qh.nonce
	}
	// The calls still running when a majority answered go on past the caller's return,
	// within its deadline: a release that reaches the last server frees it there too.
	d, bounded := ctx.Deadline()
	if !bounded {
		d = time.Now().Add(q.env.timeout)
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), d)
	q.fan.Round(rctx, cancel, fanout.Limits{Patience: q.patience(h.s)}, &rr.rs, rr)
	if rr.ok < q.need {
		errs := make([]error, n)
		for i := range errs {
			errs[i] = rr.slots[i].err
		}
		return 0, q.failure("release", errs)
	}
	return q.mergeRelease(rr.slots), nil
}

// releaseRound is one release of releaseAll in progress: the replies taken so far.
type releaseRound struct {
	rs       fanout.Run
	q        *quorum
	h        *held
	lines    []any // each server's command line, width long, one after the other
	width    int
	slots    []releaseSlot
	carriers uint64 // the servers known to carry the hold that have not answered
	ok, ko   int
}

// releaseSlot is one server's answer to a release.
type releaseSlot struct {
	code releaseReply
	err  error
}

// Line returns the script and command line of the release on server i (see
// fanout.ScriptCall).
func (rr *releaseRound) Line(i int) (*script.Script, []any) {
	w := rr.width
	return rr.h.s.spec.release, rr.lines[i*w : (i+1)*w : (i+1)*w]
}

// Take records one server's reply and reports whether the release is decided.
func (rr *releaseRound) Take(r fanout.Reply) bool {
	rr.carriers &^= 1 << r.I
	rr.Late(r)
	var code releaseReply
	if r.Err == nil {
		code, r.Err = decodeRelease(r.V.(*redis.Cmd))
	}
	if r.Err != nil {
		rr.slots[r.I].err = r.Err
		rr.ko++
	} else {
		rr.slots[r.I].code = code
		rr.ok++
	}
	need := rr.q.need
	return rr.ok >= need && rr.carriers == 0 || rr.ko > len(rr.slots)-need
}

// Late sends the release once more, aside, to a server whose call failed without its
// answer (a timeout: the command may have been dropped with its connection), with the
// same nonce, which makes it a no-op where the first one ran: a hold count left there
// would outlive the release until its TTL. That is also so of a server not yet known to
// carry the hold: a grant of the winning attempt that answered late may be there (see
// lateGrant).
func (rr *releaseRound) Late(r fanout.Reply) {
	if r.Err != nil && r.Err != fanout.ErrSilent && !isServerError(r.Err) {
		// A line of its own: the first call may still be on its way (given up when the
		// round's context ended), its first two slots being filled.
		w := rr.width
		line := make([]any, w)
		copy(line[2:], rr.lines[r.I*w+2:(r.I+1)*w])
		rr.q.each(onlyAt(len(rr.slots), r.I), false, func(ctx context.Context, c *conn) error {
			call := func(ctx context.Context) error { return c.runScript(ctx, rr.h.s.spec.release, line, true).Err() }
			err := call(ctx)
			rr.q.untilAnswered(c, err, call)
			return err
		})
	}
}

// Contested is false: a release waits out its patience.
func (rr *releaseRound) Contested() bool { return false }

// mergeRelease merges the servers' release replies (those without an error) into one:
// still held where a majority still holds it, else freed (with the turn's news, when a
// server had any), else not held or expired.
func (q *quorum) mergeRelease(slots []releaseSlot) releaseReply {
	var count [releaseOwnTurn - releaseNotHeld + 1]int
	for _, s := range slots {
		if s.err == nil {
			count[s.code-releaseNotHeld]++
		}
	}
	at := func(c releaseReply) int { return count[c-releaseNotHeld] }
	switch {
	case at(releaseStillHeld) >= q.need:
		return releaseStillHeld
	case at(releaseOwnTurn) > 0:
		return releaseOwnTurn
	case at(releaseHandedOn) > 0:
		return releaseHandedOn
	case at(releaseFreed) > 0 || at(releaseStillHeld) > 0:
		return releaseFreed
	case at(releaseNotHeld) > 0:
		return releaseNotHeld
	}
	return releaseExpired
}

// each runs call on the servers marked in on (all when on is nil) at once, aside, each
// bounded by the release timeout: undoing attempts and the best-effort calls (leaving a
// wait queue, passing a turn on, a writer leaving its wait). On a closed Locker the
// calls run at once when inline is set, else not at all.
func (q *quorum) each(on []bool, inline bool, call func(ctx context.Context, c *conn) error) {
	for i, c := range q.nodes {
		if on != nil && !on[i] {
			continue
		}
		run := func() {
			ctx, cancel := context.WithTimeout(context.Background(), q.env.timeout)
			defer cancel()
			_ = call(ctx, c)
		}
		if !q.env.aside(run) && inline {
			run()
		}
	}
}

// renewAt renews batch on every server at once, one pipeline per server, and
// decides each lease's renewal as soon as a majority confirmed it (nil), a majority
// reported it gone (errNotOwner), or neither can happen any more (a *RedisError).
func (q *quorum) renewAt(timeout time.Duration, batch []*held, idx []int, ttls []time.Duration, errs []error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	n := len(q.nodes)
	qr := &quorumRenewal{q: q, batch: batch, errs: errs, open: len(idx),
		ok: make([]int, len(batch)), gone: make([]int, len(batch)), failed: make([][]error, len(batch)),
		pending: make([]bool, len(batch)), missing: make([]uint64, len(batch))}
	for _, i := range idx {
		qr.pending[i] = true
		qr.failed[i] = make([]error, n)
		errs[i] = &RedisError{Op: "renew", Key: batch[i].hk.key, Err: q.failure("renew", qr.failed[i])}
	}
	call := func(ctx context.Context, c *conn) (any, error) {
		g := &renewGroup{node: c.client, legacy: &c.legacy, idx: idx}
		g.run(ctx, batch, ttls)
		return g, nil
	}
	// A server that reports the hold gone after the renewal was decided is repaired too.
	var lateMu sync.Mutex
	late := func(nr fanout.Reply) {
		g := nr.V.(*renewGroup)
		for k, i := range g.idx {
			if v, err := g.cmds[k].Int64(); err == nil && v != 1 && errs[i] == nil {
				lateMu.Lock()
				q.repair(batch[i], nr.I)
				lateMu.Unlock()
			}
		}
	}
	var rs fanout.Run
	q.fan.Round(ctx, cancel, fanout.Limits{}, &rs, funcOps{callF: call, takeF: qr.Take, lateF: late, q: q})
	// The servers that reported a renewed hold gone get it back.
	for _, i := range idx {
		if errs[i] != nil {
			continue
		}
		for j := range n {
			if qr.missing[i]&(1<<j) != 0 {
				q.repair(batch[i], j)
			}
		}
	}
}

// funcOps is a round's ops made of functions, never contested (fanout.FuncCall).
type funcOps struct {
	callF func(context.Context, *conn) (any, error)
	takeF func(fanout.Reply) bool
	lateF func(fanout.Reply)
	q     *quorum
}

// Call runs callF on server i's conn.
func (f funcOps) Call(ctx context.Context, i int) (any, error) { return f.callF(ctx, f.q.nodes[i]) }

// Take hands r to takeF.
func (f funcOps) Take(r fanout.Reply) bool { return f.takeF(r) }

// Late hands r to lateF.
func (f funcOps) Late(r fanout.Reply) { f.lateF(r) }

// Contested is false: the round waits out its patience.
func (f funcOps) Contested() bool { return false }

// quorumRenewal is one batch's renewal on a quorum in progress (see renewAt): per
// lease of the batch, the servers' answers so far.
type quorumRenewal struct {
	q       *quorum
	batch   []*held
	errs    []error   // the outcome per lease, set once decided
	ok      []int     // servers that renewed the hold
	gone    []int     // servers that reported it gone
	failed  [][]error // per server, what went wrong there
	pending []bool    // the leases not yet decided
	missing []uint64  // the servers that reported the hold gone
	open    int       // how many are pending
}

// Take records one server's replies and reports whether every lease is decided.
func (qr *quorumRenewal) Take(nr fanout.Reply) bool {
	g, _ := nr.V.(*renewGroup)
	if g == nil { // given up: the round's context ended
		for i, pending := range qr.pending {
			if pending {
				qr.record(i, nr.I, 0, nr.Err)
			}
		}
		return qr.open == 0
	}
	for k, i := range g.idx {
		if qr.pending[i] {
			v, err := g.cmds[k].Int64()
			qr.record(i, nr.I, v, err)
		}
	}
	return qr.open == 0
}

// record takes server j's reply v (or err) about lease i, and settles the lease when
// that decides it.
func (qr *quorumRenewal) record(i, j int, v int64, err error) {
	switch {
	case err != nil:
		qr.failed[i][j] = err
	case v == 1:
		qr.ok[i]++
	default:
		qr.gone[i]++
		qr.missing[i] |= 1 << j
		qr.failed[i][j] = errNotHeld
	}
	if qr.decide(i) {
		qr.pending[i] = false
		qr.open--
	}
}

// decide settles lease i's outcome when its servers' answers so far allow, and reports
// whether they did: renewed by a majority, gone from more than a minority, or failed on
// too many servers for a majority.
func (qr *quorumRenewal) decide(i int) bool {
	q := qr.q
	n := len(q.nodes)
	switch {
	case qr.ok[i] >= q.need:
		qr.errs[i] = nil
	case qr.gone[i] > n-q.need:
		qr.errs[i] = errNotOwner
	case n-countErrs(qr.failed[i]) < q.need:
		qr.errs[i] = &RedisError{Op: "renew", Key: qr.batch[i].hk.key, Err: q.failure("renew", qr.failed[i])}
	default:
		return false
	}
	return true
}

// repair takes h's hold back, aside, on server i, which reported it gone while a
// majority renewed it (it expired there while the server was paused or slow, or the
// server restarted empty and its restart delay has passed): an attempt that will not
// wait, then the hold's token written back there. The hold then counts on i again, so
// that losing another server later does not cost the lease its majority. A lock another
// owner took there meanwhile is left alone, and a hold released meanwhile is undone.
func (q *quorum) repair(h *held, i int) {
	q.env.aside(func() {
		if q.env.gone(h) || h.qh == nil {
			return
		}
		c := q.nodes[i]
		ctx, cancel := context.WithTimeout(context.Background(), min(q.env.timeout, h.s.ttl-h.s.driftMargin()))
		defer cancel()
		nonce := q.env.nonce()
		s, args := q.acquireCall(h, nonce, mannerTry)
		ar, err := parseAttempt(c.runScript(ctx, s, args, true))
		if err != nil {
			if !isServerError(err) {
				q.undoAt(h, nonce, onlyAt(len(q.nodes), i))
			}
			return
		}
		g, err := parseGranted(ar.v)
		if err != nil || !g.acquired {
			return
		}
		if g.holds > 1 || q.raiseOn(ctx, c, h, h.token, nonce) != nil || q.env.gone(h) {
			// A reentry (the owner took it there through another Locker meanwhile) is
			// not this hold's to count; a failed write-back or a release leaves it.
			q.undoAt(h, nonce, onlyAt(len(q.nodes), i))
			return
		}
		h.qh.carry.Or(1 << i)
		q.env.repaired(h, q.addrs[i])
	})
}

func countErrs(errs []error) int {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}
