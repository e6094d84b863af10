package guard

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/gate.lua
	gateSrc string
	//go:embed scripts/raise.lua
	raiseSrc string

	raiseScript = newScript("", raiseSrc)
)

// quorum is the Redis side of a Locker made by NewQuorum: one conn per independent
// server, of which need (a majority) must agree.
type quorum struct {
	nodes []*conn
	addrs []string // the servers' addresses, for errors
	need  int
	delay time.Duration // RestartDelay; 0: off
	mark  any           // the key of the servers' ready mark (gate.lua)

	rtt []rttEstimate // each server's round trips, for the reply budgets (see budgets)

	mu      sync.Mutex
	gated   map[*script]*script       // acquire scripts with gate.lua prepended
	holders map[*held][]bool          // the servers known to carry each hold (see releaseQuorum)
	lanes   map[laneKey]chan struct{} // the last call entered in each lane (see lane)
}

// laneKey names the lane of this Locker's calls about one lock on one server (see lane).
type laneKey struct {
	lock string
	i    int
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
//     DriftMargin). Otherwise it is undone on every server that granted it or left its
//     outcome unknown, and counts as a busy attempt — or fails with ErrUnavailable, a
//     *QuorumError in the chain, when so many servers failed that no majority could
//     have answered.
//   - Each server has a reply budget per call: four times its smoothed round trip, or
//     the smoothed round trip plus four mean deviations when its replies vary more
//     (measured on the Locker's own calls), at least 5ms and at most TTL/10; a server
//     that never answered yet gets the largest of the others'. A server silent past its
//     budget counts as failed for the attempt: a decision the other replies can make is
//     made without it. So with one server of three paused, a free lock is taken on the
//     other two at once, and an attempt that won one live server while another attempt
//     won the other (a split vote) is undone and reported busy within the budget —
//     TryAcquire returns then, and a waiting caller tries again after a random pause of
//     up to the budget — instead of waiting for the paused server. Only a verdict of
//     ErrUnavailable waits for the silent servers' patience: eight budgets, at least 1s,
//     at most TTL/10 (so a machine too loaded to read replies in time is not taken for
//     a majority down). A silent server's call goes on aside: a grant it makes later
//     joins the hold, or is undone when the attempt lost or the hold has ended.
//   - A Locker's calls that take, keep or drop a hold (attempts, undos, releases) reach
//     each server in the order they were made, per lock: a release or an undo never
//     overtakes a straggling attempt there, and the next attempt never overtakes them.
//     An attempt's call still waiting for its turn when the attempt is decided (behind
//     the calls of a silent server) is not sent.
//   - The fencing token is the highest of the granting servers' tokens, written back to
//     them (one more round trip per fresh hold) before the lease is handed out: any two
//     majorities share a server, so every later hold's token exceeds it. A reentry
//     through Redis reads the same token.
//   - The watchdog renews on every server; a lease stays valid while a majority confirms
//     it in time, and is lost (its context cancelled with ErrLeaseLost) as soon as a
//     majority reports it gone, or when its validity runs out without a majority.
//   - A release runs on every server; it succeeds when a majority confirms it, else it
//     fails with a *QuorumError saying what each server answered. It returns once every
//     server known to carry the hold has answered too, or is past its budget.
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
	if n < 3 || n%2 == 0 {
		return nil, &ConfigError{Field: "clients", Reason: fmt.Sprintf("a quorum needs an odd number of servers, 3 or more, got %d", n)}
	}
	q := &quorum{need: n/2 + 1, gated: make(map[*script]*script), holders: make(map[*held][]bool), lanes: make(map[laneKey]chan struct{}), rtt: make([]rttEstimate, n)}
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
		node := &conn{client: c, honoursDeadlines: honoursDeadlines(c)}
		// A quorum's servers are independent primaries, with no replica for a stale
		// connection to reach: they get the scripts' plain form. (With the "#!lua" form
		// the quorum-of-3 latency chaos row saw double grants; not yet explained.)
		node.legacy.Store(true)
		q.nodes = append(q.nodes, node)
	}
	l, err := newLocker(nil, q, opts)
	if err != nil {
		return nil, err
	}
	// Calls run inline when every server's client gives up at its context's deadline.
	l.honoursDeadlines = true
	for _, c := range q.nodes {
		l.honoursDeadlines = l.honoursDeadlines && c.honoursDeadlines
	}
	return l, nil
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

// gate returns s with gate.lua prepended.
func (q *quorum) gate(s *script) *script {
	q.mu.Lock()
	defer q.mu.Unlock()
	g := q.gated[s]
	if g == nil {
		g = newScript(s.flags, gateSrc+s.body)
		q.gated[s] = g
	}
	return g
}

// acquireCall returns the script and arguments of an acquire attempt on every server:
// with the restart gate, its mark as one more key and the delay as one more argument.
func (q *quorum) acquireCall(h *held, nonce, manner string) (*script, []any) {
	args := h.acquireArgs(nonce, manner)
	if q.delay <= 0 {
		return h.s.spec.acquire, args
	}
	keys := args[2].(int)
	out := make([]any, 0, len(args)+2)
	out = append(out, args[:3+keys]...)
	out[2] = keys + 1
	out = append(out, q.mark)
	out = append(out, args[3+keys:]...)
	out = append(out, max(q.delay, h.s.ttl).Milliseconds())
	return q.gate(h.s.spec.acquire), out
}

// QuorumError reports a call of a quorum Locker (NewQuorum) that too few servers
// confirmed: what each server answered. It is the Err of a *RedisError (ErrUnavailable).
type QuorumError struct {
	// Op is the operation: "acquire", "release" or "renew".
	Op string
	// Need is the number of servers that must agree: a majority.
	Need int
	// Addrs are the servers' addresses, in the order the Locker was given them.
	Addrs []string
	// Errs are each server's error, by the same index: nil for a server that answered
	// as needed.
	Errs []error
}

// Error says how many servers confirmed the call and why the others did not.
func (e *QuorumError) Error() string {
	var b strings.Builder
	ok := 0
	for _, err := range e.Errs {
		if err == nil {
			ok++
		}
	}
	fmt.Fprintf(&b, "quorum: %d of %d servers confirmed the %s, %d needed", ok, len(e.Errs), e.Op, e.Need)
	for i, err := range e.Errs {
		if err != nil {
			fmt.Fprintf(&b, "; %s: %v", e.Addrs[i], err)
		}
	}
	return b.String()
}

// Unwrap returns the servers' errors, so that errors.Is finds, for example, a
// context.DeadlineExceeded among them.
func (e *QuorumError) Unwrap() []error {
	var errs []error
	for _, err := range e.Errs {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Outcomes that a server gave for a quorum call, beside an error.
var (
	errNotGranted = errors.New("held by another owner")
	errNotHeld    = errors.New("not held there")
	errUndone     = errors.New("granted, but no majority did: undone")
	errNoAnswer   = errors.New("no answer before the outcome was decided")
)

// nodeReply is one server's answer in a round.
type nodeReply struct {
	i   int
	v   any
	err error
}

// The replies that round hands to take for a server that has not answered within its
// budget (errSilent), then within its patience (errMute); the server's own reply, if it
// comes before the round is decided, follows them.
var (
	errSilent = errors.New("no answer within its reply budget")
	errMute   = errors.New("no answer within the round's patience")
)

// replyLimit is how long a round waits for one server's reply: its budget, after which
// the server counts as failed for a decision that the other replies can make (a split
// vote, a release), and its patience, after which it counts as failed for any decision
// (too few servers answered).
type replyLimit struct {
	budget, patience time.Duration
}

// round runs call on every server of the quorum at once and hands the replies to take,
// in arrival order and one at a time, until take reports the round decided; replies that
// come later go to late (nil: dropped), on the goroutine that received them. With
// limits, a server that has not answered within limits[i] is handed to take as errSilent
// at its budget and as errMute at its patience, and the round's answers feed the
// servers' round-trip estimates.
// round returns once the round is decided or every server answered; the calls still
// running go on aside (Close waits for them), and cancel is called when the last one
// returns.
func (l *Locker) round(ctx context.Context, cancel context.CancelFunc, limits []replyLimit, call func(context.Context, int) (any, error), take func(nodeReply) bool, late func(nodeReply)) {
	q := l.q
	n := len(q.nodes)
	var (
		mu       sync.Mutex
		decided  bool
		over     bool // finished is closed
		left     = n
		answered = make([]bool, n)
	)
	finished := make(chan struct{})
	end := func() { // mu is held
		if !over && (decided || left == 0) {
			over = true
			close(finished)
		}
	}
	start := time.Now()
	one := func(i int) {
		v, err := call(ctx, i)
		if limits != nil && (err == nil || isServerError(err)) {
			q.rtt[i].add(time.Since(start), limits[i].budget)
		}
		r := nodeReply{i: i, v: v, err: err}
		mu.Lock()
		was := decided
		if !decided {
			decided = take(r)
		}
		answered[i] = true
		left--
		last := left == 0
		end()
		mu.Unlock()
		if was && late != nil {
			late(r)
		}
		if last {
			cancel()
		}
	}
	for i := range n {
		if !l.background(func() { one(i) }) {
			one(i)
		}
	}
	if limits != nil {
		expire(start, limits, &mu, answered, finished, func(i int, err error) {
			if !decided {
				decided = take(nodeReply{i: i, err: err})
			}
			end()
		})
	}
	<-finished
}

// expire hands silent(i, errSilent) and then silent(i, errMute), with mu held, to each
// server that has not answered (answered[i]) within its budget and its patience from
// start, until finished is closed. A timer that fires late (this process did not run
// when it was due) first gives the replies one more budgetFloor to be read: a stall of
// this process is not a server's silence.
func expire(start time.Time, limits []replyLimit, mu *sync.Mutex, answered []bool, finished <-chan struct{}, silent func(int, error)) {
	stage := make([]int, len(limits)) // 0: within budget, 1: past it, 2: past patience
	due := func(i int) time.Time {
		if stage[i] == 0 {
			return start.Add(limits[i].budget)
		}
		return start.Add(limits[i].patience)
	}
	var grace time.Time // the end of the grace given after a late timer
	var t *time.Timer
	for {
		var next time.Time
		mu.Lock()
		for i := range limits {
			if !answered[i] && stage[i] < 2 && (next.IsZero() || due(i).Before(next)) {
				next = due(i)
			}
		}
		mu.Unlock()
		if next.IsZero() {
			return
		}
		next = maxTime(next, grace)
		if t == nil {
			t = time.NewTimer(time.Until(next))
			defer t.Stop()
		} else {
			t.Reset(time.Until(next))
		}
		select {
		case <-finished:
			return
		case <-t.C:
		}
		now := time.Now()
		if now.Sub(next) > budgetFloor {
			grace = now.Add(budgetFloor)
			continue
		}
		mu.Lock()
		for i := range limits {
			if !answered[i] && stage[i] < 2 && !now.Before(due(i)) {
				stage[i]++
				if stage[i] == 1 {
					silent(i, errSilent)
				} else {
					silent(i, errMute)
				}
			}
		}
		mu.Unlock()
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// quorumGrant is one server's grant in an attempt.
type quorumGrant struct {
	i         int
	token     int64
	holds     int64
	confirmed int64 // the hold's token as a quorum confirmed it there (raise.lua), 0: none
}

// attemptReply is one server's reply to an attempt: the script's, and the owner's
// confirmed token read just after it.
type attemptReply struct {
	v         any
	confirmed int64
}

// nodeAttempt runs an attempt on one server, followed on the same connection by the read
// of the owner's confirmed token (a reentry's token: see raise.lua).
func nodeAttempt(ctx context.Context, c *conn, s *script, args []any, lock, confirmField string) (any, error) {
	var conf *redis.StringCmd
	cmd := pipeScript(ctx, c.client, &c.legacy, s, append([]any(nil), args...), func(pipe redis.Pipeliner) {
		conf = pipe.HGet(ctx, lock, confirmField)
	})
	v, err := cmd.Result()
	if err != nil {
		return nil, err
	}
	confirmed, _ := conf.Int64()
	return attemptReply{v: v, confirmed: confirmed}, nil
}

// tokenFields names the fields of h's lock hash that hold its token and its confirmed
// token (see raise.lua).
func tokenFields(h *held) (token, confirmed string) {
	token = "#t"
	if h.s.kind == KindRead {
		token = string(h.hk.owner) + "#t"
	}
	return token, token + "q"
}

// Outcomes of a quorum attempt, for the calls that answer after it was decided.
const (
	attemptPending int32 = iota
	attemptWon
	attemptLost
)

// attemptTally is what the servers answered to one attempt so far (see acquireQuorum).
type attemptTally struct {
	q         *quorum
	grants    []quorumGrant
	errs      []error
	undo      []bool // the server may hold a grant of this attempt
	silent    []bool // the server is past its budget and has not answered
	replied   int    // servers that answered, or are past their budget
	failed    int    // servers that answered with an error, or are past their budget
	soft      int    // servers past their budget but within their patience
	confirmed int    // grants that carried a confirmed token
	held      int    // grants that were reentries
	refused   bool
	pttl      int64 // the shortest TTL among the busy servers' holders, ms; -1: none
}

// take counts one reply and reports whether the attempt is decided: won when a
// majority granted it, lost when it was refused or a majority can no longer grant it
// among the replies in hand and the servers still within their budget.
func (t *attemptTally) take(r nodeReply) (decided, won bool) {
	n := len(t.q.nodes)
	if t.silent[r.i] { // past the budget already
		if errors.Is(t.errs[r.i], errSilent) {
			t.soft--
		}
		t.silent[r.i], t.errs[r.i] = false, nil
		t.replied--
		t.failed--
	}
	t.replied++
	switch {
	case errors.Is(r.err, errSilent), errors.Is(r.err, errMute):
		t.silent[r.i], t.errs[r.i] = true, r.err
		t.failed++
		if errors.Is(r.err, errSilent) {
			t.soft++
		}
	case r.err != nil:
		t.errs[r.i] = r.err
		t.undo[r.i] = !isServerError(r.err)
		t.failed++
	default:
		t.count(r)
	}
	// A hold the owner has on a majority already is a reentry: its servers confirmed
	// its token, or hold it and one of them confirmed the token (the others' write-
	// back may still be on its way). Grants none of which knew the owner are a fresh
	// hold. Grants of both sorts wait for every server's answer (or its budget): the
	// owner's hold may be on a majority whose last server has not answered yet, or be
	// left over on a minority from a hold that ended, which must not lend its older
	// token (see raiseQuorum).
	switch {
	case t.refused:
		return true, false
	case t.q.current(t.confirmed, t.held), len(t.grants) >= t.q.need && (t.confirmed == 0 || t.replied == n):
		return true, true
	case len(t.grants)+n-t.replied >= t.q.need:
		return false, false // a majority may still grant it
	case t.failed <= n-t.q.need:
		return true, false // busy, or a split vote: the silent servers cannot change that
	case len(t.grants)+n-t.replied+t.soft >= t.q.need:
		// Too few answers for any decision but ErrUnavailable: the servers past their
		// budget have their patience to answer first.
		return false, false
	}
	return true, false
}

// mayHold returns the servers that granted the attempt, or may have: all but those that
// answered without a grant.
func (t *attemptTally) mayHold() []bool {
	on := make([]bool, len(t.undo))
	for i := range on {
		on[i] = t.undo[i] || t.errs[i] == nil || t.silent[i]
	}
	return on
}

// count counts a server's reply to the attempt script.
func (t *attemptTally) count(r nodeReply) {
	a := r.v.(attemptReply)
	g, err := parseGranted(a.v)
	switch {
	case err != nil:
		t.errs[r.i] = err
		t.failed++
	case g.acquired:
		t.undo[r.i] = true
		t.grants = append(t.grants, quorumGrant{i: r.i, token: g.token, holds: g.holds, confirmed: a.confirmed})
		if a.confirmed > 0 {
			t.confirmed++
		}
		if g.holds > 1 {
			t.held++
		}
	case g.upgrade:
		t.refused = true
		t.errs[r.i] = ErrUpgrade
	default:
		t.errs[r.i] = errNotGranted
		if ms := g.pttl.Milliseconds(); ms >= 0 && (t.pttl < 0 || ms < t.pttl) {
			t.pttl = ms
		}
	}
}

// acquireQuorum makes one attempt on every server and merges their replies into one
// acquire reply, as parseGranted reads it: a grant by a majority (its token written back
// to the granting servers), busy, refused, or a *QuorumError when too few answered.
//
// Each server has its reply budget (budgets); one that has not answered by then counts
// as failed, and the attempt is decided without it when the replies in hand allow it.
// An attempt that lost with grants in hand lost a split vote (other attempts took the
// other servers): it is undone at once and reported busy, after a random pause of up to
// the budget for a caller that waits, so that the contenders do not meet again.
func (l *Locker) acquireQuorum(ctx context.Context, h *held, nonce, manner string) acquireReply {
	q := l.q
	n := len(q.nodes)
	s, args := q.acquireCall(h, nonce, manner)
	limits := q.limits(h.s.ttl)
	actx, cancel := context.WithTimeout(ctx, h.s.ttl-h.s.driftMargin())
	t := &attemptTally{q: q, errs: make([]error, n), undo: make([]bool, n), silent: make([]bool, n), pttl: -1}
	e := &attemptEnd{l: l, h: h, nonce: nonce, settled: make(chan struct{})}
	defer close(e.settled)
	_, confirmField := tokenFields(h)
	lanes := q.enterAll(h.rk.lock)
	decided := make(chan struct{}) // a call still waiting for its turn then is not made
	call := func(ctx context.Context, i int) (any, error) {
		return lanes[i].run(ctx, decided, func() (any, error) {
			return nodeAttempt(ctx, q.nodes[i], s, args, h.rk.lock, confirmField)
		})
	}
	take := func(r nodeReply) bool {
		decided, won := t.take(r)
		switch {
		case won:
			e.outcome.Store(attemptWon)
		case decided:
			e.outcome.Store(attemptLost)
		}
		return decided
	}
	l.round(actx, cancel, limits, call, take, e.late)
	close(decided)

	if e.outcome.Load() == attemptWon {
		var v any
		var err error
		if e.top, v, err = l.raiseQuorum(h, nonce, t.grants); err == nil {
			return acquireReply{v: v}
		}
		e.outcome.Store(attemptLost)
		l.undoQuorum(h, nonce, nil)
		return acquireReply{err: err}
	}
	e.outcome.Store(attemptLost) // also when every server answered without a decision
	// Undone on every server that granted it or may still: the undo waits in the lanes
	// for the calls still on their way.
	l.undoQuorum(h, nonce, t.mayHold())
	return t.lost(ctx, manner, limits)
}

// attemptEnd is what the replies that come after an attempt was decided need of it: its
// outcome and, once won, the hold's token; both are final when settled is closed.
type attemptEnd struct {
	l       *Locker
	h       *held
	nonce   string
	outcome atomic.Int32
	top     int64 // the hold's token
	settled chan struct{}
}

// late handles a reply that came after the attempt was decided.
func (e *attemptEnd) late(r nodeReply) {
	<-e.settled
	l, h := e.l, e.h
	var g granted
	var err error
	if r.err == nil {
		g, err = parseGranted(r.v.(attemptReply).v)
	}
	switch {
	case errors.Is(r.err, errNotSent), r.err != nil && isServerError(r.err), r.err == nil && (err != nil || !g.acquired):
	case e.outcome.Load() == attemptLost:
		// Undone already: the attempt's undo followed this call in its lane.
	case l.gone(h):
		// A grant (or an unknown outcome) after the acquisition was given up or the
		// hold released: undone there (the release or undo that ended the hold
		// followed this call in its lane too; this one costs a call and covers a hold
		// that ended some other way).
		l.undoQuorum(h, e.nonce, onlyAt(len(l.q.nodes), r.i))
	case r.err == nil:
		// A grant after the majority's: part of the hold (renewed and released
		// with the others), carrying the hold's token like them.
		if l.raiseOn(l.q.nodes[r.i], h, e.top) == nil {
			l.q.carries(h, r.i)
		}
	}
}

// lost is the reply of an attempt that a majority did not grant (see acquireQuorum).
func (t *attemptTally) lost(ctx context.Context, manner string, limits []replyLimit) acquireReply {
	q := t.q
	n := len(q.nodes)
	switch {
	case t.refused:
		return acquireReply{v: []any{int64(acquireRefused)}}
	case t.failed <= n-q.need && len(t.grants) > 0:
		// A split vote: no holder to wait for once the contenders undid their grants.
		var most time.Duration
		for _, lim := range limits {
			most = max(most, lim.budget)
		}
		pause := rand.N(most) + time.Millisecond
		if manner == mannerTry {
			return acquireReply{v: []any{int64(acquireBusy), pause.Milliseconds()}}
		}
		sleep(ctx, pause)
		return acquireReply{v: []any{int64(acquireBusy), int64(0)}}
	case t.failed <= n-q.need:
		// Busy: enough servers answered, or may still, for a majority to be reached
		// once the lock is free.
		return acquireReply{v: []any{int64(acquireBusy), t.pttl}}
	}
	errs := t.errs
	for i := range errs {
		switch {
		case errs[i] != nil:
		case t.undo[i]:
			errs[i] = errUndone
		default:
			errs[i] = errNoAnswer
		}
	}
	return acquireReply{err: &QuorumError{Op: "acquire", Need: q.need, Addrs: q.addrs, Errs: errs}}
}

// sleep waits for d or the end of ctx.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// raiseQuorum settles the token of a hold that a majority granted and returns it with
// the attempt's merged reply. A hold whose token a majority of the granting servers had
// confirmed (raise.lua) is a reentry through Redis and keeps that token; so is one that
// a majority held already (the attempt reentered there) with the token confirmed on some
// of them: that is the owner's current hold, whose write-back has not reached every
// server yet, and it keeps the highest confirmed token (see current). Any other hold is
// fresh: its token is the highest of all the grants' — a server that reports a hold
// of the owner's nobody confirmed is left over from an attempt of the owner's that
// failed, and one that confirms a hold a majority does not is left over from a hold that
// ended; either token was drawn before holds other owners may have had since, and must
// not be handed out. Every granting server that has not confirmed the token is told it
// (raise.lua, which also raises its fence); the attempt fails, and is undone, when
// fewer than a majority carry it afterwards.
func (l *Locker) raiseQuorum(h *held, nonce string, grants []quorumGrant) (int64, any, error) {
	q := l.q
	var top, holds int64 = 0, 1
	confirmed, held := 0, 0
	for _, g := range grants {
		if g.confirmed > 0 {
			confirmed++
		}
		if g.holds > 1 {
			held++
		}
	}
	current := q.current(confirmed, held)
	for _, g := range grants {
		switch {
		case !current:
			top = max(top, g.token)
		case g.confirmed > 0:
			top, holds = max(top, g.confirmed), max(holds, g.holds)
		}
	}
	reentry := holds > 1
	var reply any = top
	if holds > 1 {
		reply = []any{int64(acquireHeld), strconv.FormatInt(top, 10), holds}
	}
	errs := make([]error, len(q.nodes))
	var wg sync.WaitGroup
	for _, g := range grants {
		if g.token == top && g.confirmed == top {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g.i] = l.raiseOn(q.nodes[g.i], h, top)
		}()
	}
	wg.Wait()
	carried := 0
	for _, g := range grants {
		if errs[g.i] == nil {
			carried++
		} else if !reentry {
			// Its hold carries a token that is not the hold's: drop it there, so that a
			// reentry never reads it. The majority that carries the token keeps the lock.
			l.undoQuorum(h, nonce, onlyAt(len(q.nodes), g.i))
		}
	}
	if carried < q.need {
		granted := make([]bool, len(errs))
		for _, g := range grants {
			granted[g.i] = true
		}
		for i := range errs {
			if !granted[i] {
				errs[i] = errNotGranted
			}
		}
		return 0, nil, &QuorumError{Op: "acquire", Need: q.need, Addrs: q.addrs, Errs: errs}
	}
	q.record(h, grants, errs)
	return top, reply, nil
}

// current reports whether an attempt's grants, of which confirmed carried a confirmed
// token and held were reentries (the owner held the lock there already), are the
// owner's current hold rather than a fresh one: a majority confirmed its token, or a
// majority held it and some confirmed the token (the others' write-back still on its
// way).
func (q *quorum) current(confirmed, held int) bool {
	return confirmed >= q.need || held >= q.need && confirmed > 0
}

// gone reports whether h is no longer this process's record of its owner's hold: its
// acquisition failed or was given up (its context ended), or the hold was released.
func (l *Locker) gone(h *held) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[h.hk] != h
}

// onlyAt returns n flags, set at i only.
func onlyAt(n, i int) []bool {
	on := make([]bool, n)
	on[i] = true
	return on
}

// raiseOn gives h's hold on one server the token top (raise.lua).
func (l *Locker) raiseOn(c *conn, h *held, top int64) error {
	tokenField, _ := tokenFields(h)
	holderField, holderValue := string(h.hk.owner), ""
	if h.s.kind == KindWrite {
		holderField, holderValue = "#W", string(h.hk.owner)
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(l.cfg.releaseTimeout, h.s.ttl-h.s.driftMargin()))
	defer cancel()
	args := []any{nil, nil, 2, h.rk.lock, h.rk.fence, strconv.FormatInt(top, 10), tokenField, holderField, holderValue, h.args.retention}
	n, err := c.runScript(ctx, raiseScript, args, true).Int64()
	switch {
	case err != nil:
		return err
	case n != 1:
		return errNotHeld
	}
	return nil
}

// undoQuorum undoes, aside, the attempt with nonce on the servers marked in on (all when
// on is nil: the whole hold is undone); on a closed Locker, at once.
func (l *Locker) undoQuorum(h *held, nonce string, on []bool) {
	if on == nil {
		l.q.forget(h)
	}
	for i := range l.q.nodes {
		if on != nil && !on[i] {
			continue
		}
		ln := l.q.enter(h.rk.lock, i)
		l.each(onlyAt(len(l.q.nodes), i), true, func(ctx context.Context, c *conn) error {
			_, err := ln.run(ctx, nil, func() (any, error) {
				return nil, c.runScript(ctx, h.s.spec.release, h.releaseArgs(l.newNonce(), nonce), true).Err()
			})
			return err
		})
	}
}

// lane is a call's place in the lane of this Locker's calls about one lock on one
// server that may take, keep or drop a hold there (attempts, undos, releases). Calls
// sent on different connections may reach a server in any order: an attempt that
// overtook the release or the undo of this process's previous hold would find the lock
// still held there, refused by this process's own leftovers, and a release or an undo
// that overtook a straggling attempt would leave its grant behind. A lane runs its calls
// in the order they entered it, which is the order of the rounds that made them: enter
// is called on the goroutine that starts the round, before its calls go aside.
type lane struct {
	q          *quorum
	k          laneKey
	prev, mine chan struct{}
}

// enter takes the next place in the lane of lock on server i. Its call must be run.
func (q *quorum) enter(lock string, i int) *lane {
	ln := &lane{q: q, k: laneKey{lock: lock, i: i}, mine: make(chan struct{})}
	q.mu.Lock()
	ln.prev = q.lanes[ln.k]
	q.lanes[ln.k] = ln.mine
	q.mu.Unlock()
	return ln
}

// enterAll takes a place in the lanes of lock on every server.
func (q *quorum) enterAll(lock string) []*lane {
	lanes := make([]*lane, len(q.nodes))
	for i := range lanes {
		lanes[i] = q.enter(lock, i)
	}
	return lanes
}

// errNotSent is the error of an attempt's call that was still waiting for its turn in
// its lane when the attempt was decided: it was not made, and took nothing.
var errNotSent = errors.New("not sent: the attempt was decided before its turn on this server")

// run makes call once the calls ahead in the lane are over. When ctx ends first, call
// is not made and ctx's error is returned; when moot is closed first, call is not made
// and errNotSent is returned. The calls behind still wait for the ones ahead.
func (ln *lane) run(ctx context.Context, moot <-chan struct{}, call func() (any, error)) (any, error) {
	defer func() {
		if ln.prev != nil {
			<-ln.prev
		}
		ln.q.mu.Lock()
		if ln.q.lanes[ln.k] == ln.mine {
			delete(ln.q.lanes, ln.k)
		}
		ln.q.mu.Unlock()
		close(ln.mine)
	}()
	if ln.prev != nil {
		select {
		case <-ln.prev:
			ln.prev = nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-moot:
			return nil, errNotSent
		}
	}
	return call()
}

// releaseQuorum runs a release on every server and merges the replies. It is decided
// once a majority answered and every server known to carry the hold answered too, or is
// past its reply budget (a server that does not answer keeps its share until its TTL);
// or once too many failed for a majority. Waiting for the hold's own servers keeps this
// process's next attempt from reaching one of them before the release: a release
// decided by servers that never carried the hold, with the hold still on the others,
// would refuse the key to its next taker.
func (l *Locker) releaseQuorum(ctx context.Context, h *held, nonce string) (releaseReply, error) {
	q := l.q
	n := len(q.nodes)
	args := h.releaseArgs(nonce, "")
	holding := q.holding(h)
	var (
		codes  = make([]releaseReply, n)
		errs   = make([]error, n)
		ok, ko int
		wanted int // servers carrying the hold that have not answered and are within budget
	)
	for _, on := range holding {
		if on {
			wanted++
		}
	}
	lanes := q.enterAll(h.rk.lock)
	call := func(ctx context.Context, i int) (any, error) {
		return lanes[i].run(ctx, nil, func() (any, error) {
			return decodeRelease(q.nodes[i].runScript(ctx, h.s.spec.release, append([]any(nil), args...), true))
		})
	}
	take := func(r nodeReply) bool {
		switch {
		case errors.Is(r.err, errSilent), errors.Is(r.err, errMute):
		case r.err != nil:
			errs[r.i] = r.err
			ko++
		default:
			codes[r.i] = r.v.(releaseReply)
			ok++
		}
		if holding != nil && holding[r.i] {
			holding[r.i] = false
			wanted--
		}
		return ok >= q.need && wanted == 0 || ko > n-q.need
	}
	// The calls still running when the release was decided go on past the caller's
	// return, within its deadline: a release that reaches the last server frees it there too.
	d, bounded := ctx.Deadline()
	if !bounded {
		d = time.Now().Add(l.cfg.releaseTimeout)
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), d)
	l.round(rctx, cancel, q.limits(h.s.ttl), call, take, nil)
	q.forget(h)
	if ok < q.need {
		return 0, &QuorumError{Op: "release", Need: q.need, Addrs: q.addrs, Errs: errs}
	}
	return q.releaseVerdict(codes, errs), nil
}

// releaseVerdict merges the codes of the servers that answered a release (no error in
// errs) into the release's: still held when a majority still holds for the owner, else
// freed (handed on, or with this Locker next, when a server says so), else not held,
// else expired.
func (q *quorum) releaseVerdict(codes []releaseReply, errs []error) releaseReply {
	var count [releaseOwnTurn - releaseNotHeld + 1]int
	for i := range codes {
		if errs[i] == nil {
			count[codes[i]-releaseNotHeld]++
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
func (l *Locker) each(on []bool, inline bool, call func(ctx context.Context, c *conn) error) {
	for i, c := range l.q.nodes {
		if on != nil && !on[i] {
			continue
		}
		run := func() {
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.releaseTimeout)
			defer cancel()
			_ = call(ctx, c)
		}
		if !l.background(run) && inline {
			run()
		}
	}
}

// renewQuorum renews batch on every server at once, one pipeline per server, and
// decides each lease's renewal as soon as a majority confirmed it (nil), a majority
// reported it gone (errNotOwner), or neither can happen any more (a *RedisError).
func (r *renewer) renewQuorum(timeout time.Duration, batch []*held, idx []int, ttls []time.Duration, errs []error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	l := r.l
	q := l.q
	n := len(q.nodes)
	ok := make([]int, len(batch))
	gone := make([]int, len(batch))
	failed := make([][]error, len(batch))
	open := len(idx)
	call := func(ctx context.Context, i int) (any, error) {
		g := &renewGroup{node: q.nodes[i].client, legacy: &q.nodes[i].legacy, idx: idx}
		g.run(ctx, batch, ttls)
		return g, nil
	}
	decide := func(i int) bool {
		switch {
		case ok[i] >= q.need:
			errs[i] = nil
		case gone[i] > n-q.need:
			errs[i] = errNotOwner
		case n-countErrs(failed[i]) < q.need:
			errs[i] = &RedisError{Op: "renew", Key: batch[i].hk.key, Err: &QuorumError{Op: "renew", Need: q.need, Addrs: q.addrs, Errs: failed[i]}}
		default:
			return false
		}
		return true
	}
	pending := make([]bool, len(batch))
	for _, i := range idx {
		pending[i] = true
		failed[i] = make([]error, n)
		errs[i] = &RedisError{Op: "renew", Key: batch[i].hk.key, Err: &QuorumError{Op: "renew", Need: q.need, Addrs: q.addrs, Errs: failed[i]}}
	}
	take := func(nr nodeReply) bool {
		g := nr.v.(*renewGroup)
		for k, i := range g.idx {
			if !pending[i] {
				continue
			}
			v, err := g.cmds[k].Int64()
			switch {
			case err != nil:
				failed[i][nr.i] = err
			case v == 1:
				ok[i]++
			default:
				gone[i]++
				failed[i][nr.i] = errNotHeld
			}
			if decide(i) {
				pending[i] = false
				open--
			}
		}
		return open == 0
	}
	l.round(ctx, cancel, nil, call, take, nil)
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

// The bounds of a server's reply budget in a quorum round (see budgets).
const (
	budgetFloor    = 5 * time.Millisecond // the least a server is given to answer
	budgetShare    = 10                   // the most is the TTL divided by this
	patienceFactor = 8                    // a server's patience in budgets
	patienceFloor  = time.Second          // the least patience, below the cap
)

// rttEstimate is the smoothed round trip of one server and its mean deviation, after
// Jacobson and Karels (as TCP's retransmission timeout): each sample moves the mean by
// 1/8 of its error and the deviation by 1/4 of the error's size.
type rttEstimate struct {
	mu   sync.Mutex
	srtt time.Duration // 0: no sample yet
	dev  time.Duration
}

// add takes in one round trip d of a call whose budget was budget. A sample is cut to
// twice the budget: a server that answers late raises its budget step by step, doubling
// at most per sample, while one reply after a long pause does not inflate it for long.
func (e *rttEstimate) add(d, budget time.Duration) {
	d = max(min(d, 2*budget), time.Microsecond)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srtt == 0 {
		e.srtt, e.dev = d, d/2
		return
	}
	diff := d - e.srtt
	e.srtt += diff / 8
	e.dev += (max(diff, -diff) - e.dev) / 4
}

// timeout returns how long to wait for the server's reply: four smoothed round trips,
// or the smoothed round trip plus four deviations when replies vary more; false when the
// server never answered yet.
func (e *rttEstimate) timeout() (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srtt == 0 {
		return 0, false
	}
	return max(4*e.srtt, e.srtt+4*e.dev), true
}

// limits returns each server's reply limits in a round about a lock whose TTL is ttl.
// The budget is the server's timeout (rttEstimate) kept between budgetFloor and
// ttl/budgetShare; a server that never answered yet gets the largest of the others'
// (the cap when none did). The patience is patienceFactor budgets, at least
// patienceFloor, at most the cap.
func (q *quorum) limits(ttl time.Duration) []replyLimit {
	hi := max(ttl/budgetShare, time.Millisecond)
	lo := min(budgetFloor, hi)
	out := make([]replyLimit, len(q.nodes))
	var known time.Duration
	for i := range q.rtt {
		if t, ok := q.rtt[i].timeout(); ok {
			out[i].budget = min(max(t, lo), hi)
			known = max(known, out[i].budget)
		}
	}
	if known == 0 {
		known = hi
	}
	for i := range out {
		if out[i].budget == 0 {
			out[i].budget = known
		}
		out[i].patience = min(max(patienceFactor*out[i].budget, patienceFloor), hi)
	}
	return out
}

// holding returns the servers known to carry h's hold: those whose grant made it, and
// those whose late grant joined it (nil when none is known).
func (q *quorum) holding(h *held) []bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]bool(nil), q.holders[h]...)
}

// record records the servers that carry h's hold: those of grants whose write-back of
// the token succeeded (no error in errs).
func (q *quorum) record(h *held, grants []quorumGrant, errs []error) {
	on := make([]bool, len(q.nodes))
	for _, g := range grants {
		on[g.i] = errs[g.i] == nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.holders[h] = on
}

// carries records that server i carries h's hold, when h's holders are recorded.
func (q *quorum) carries(h *held, i int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if on := q.holders[h]; on != nil {
		on[i] = true
	}
}

// forget drops h's record of holders: its hold was released or undone.
func (q *quorum) forget(h *held) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.holders, h)
}
