package fanout

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// Node is one server as a Fanout calls it.
type Node interface {
	// Run runs script s with args on the server, alone (not in a batch), and with EVAL
	// when the server has not cached it. args' first two slots are Run's to fill.
	Run(ctx context.Context, s *script.Script, args []any) *redis.Cmd
	// Legacy reports whether the server wants the plain form of a script (Redis 6.2).
	Legacy() bool
	// Pipeline returns a pipeline on the server's client.
	Pipeline() redis.Pipeliner
}

// Outcomes a round hands to Ops.Take for a server, beside the server's own error.
var (
	// ErrSilent is a server still silent past the round's limits.
	ErrSilent = errors.New("no answer within the reply budget")
	// ErrNotSent is a call still in its server's batch when its round was over (see
	// StaleCall): it was never sent.
	ErrNotSent = errors.New("not sent: the attempt was over before its turn")
)

// Fanout makes calls on every one of a set of servers at once (see Round).
type Fanout struct {
	nodes   []Node
	calls   chan job // to an idle worker (see dispatch)
	batches []batch  // per server (see enqueue)

	fixed time.Duration // the reply budget when set (see Budget); 0: derived from rtt
	rtt   atomic.Int64  // smoothed round trip of a server's reply, ns

	// aside runs fn on a goroutine its owner waits for, and reports false, running
	// nothing, once the owner is closed (done).
	aside func(fn func()) bool
	done  <-chan struct{}
}

// New returns the Fanout over nodes. It makes no call until Start.
func New(nodes []Node) *Fanout {
	return &Fanout{nodes: nodes, calls: make(chan job), batches: make([]batch, len(nodes))}
}

// Start sets what the Fanout needs of its owner: aside runs a function on a goroutine
// the owner waits for when it closes, and reports false, running nothing, once it is
// closed (done closed); budget fixes the reply budget (0: derived from round trips, see
// Budget). It is called once, before the first Round.
func (f *Fanout) Start(aside func(fn func()) bool, done <-chan struct{}, budget time.Duration) {
	f.aside, f.done, f.fixed = aside, done, budget
}

// Bounds of the reply budget derived from round trips (see Budget).
const (
	budgetTrips = 8
	budgetMin   = 20 * time.Millisecond
)

// Budget returns the reply budget of a round for a lock of the given TTL: the fixed
// budget when Start set one, else 8 smoothed round trips of a server's reply, at least
// 20 ms and at most a tenth of ttl.
func (f *Fanout) Budget(ttl time.Duration) time.Duration {
	if f.fixed > 0 {
		return f.fixed
	}
	return min(max(budgetTrips*time.Duration(f.rtt.Load()), budgetMin), ttl/10)
}

// Patience returns how long a round waits for silent servers when the replies in hand
// do not contest it: 8 budgets and at least a second, within validity (a lease's TTL less
// its drift margin), and never below one budget — a loaded machine whose replies all come
// late is slow, not down.
func (f *Fanout) Patience(ttl, validity time.Duration) time.Duration {
	b := f.Budget(ttl)
	return max(min(max(budgetTrips*b, time.Second), validity), b)
}

// observe folds a server's reply time into the smoothed round trip (weight 1/8).
func (f *Fanout) observe(d time.Duration) {
	for {
		old := f.rtt.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if f.rtt.CompareAndSwap(old, next) {
			return
		}
	}
}

// Limits bounds a round's wait for silent servers: past Budget when the replies so far
// contest the round (see Ops), past Patience in any case; zero: no bound.
type Limits struct {
	Budget, Patience time.Duration
}

// Reply is one server's answer in a round: the server's index I, and the call's value V
// (a *redis.Cmd for a ScriptCall's) or its error Err.
type Reply struct {
	I   int
	V   any
	Err error
}

// Ops is what a round does (see Round), besides its calls (ScriptCall, FuncCall): Take
// is handed each reply while the round is undecided, the round's lock held, and reports
// whether it decided the round; Late is handed each reply that came after, and must not
// block (it runs on the goroutine that received the reply, which may have other replies
// to hand on); Contested reports, the lock held, whether the replies taken so far contest
// the round (Limits.Budget then applies).
type Ops interface {
	Take(r Reply) bool
	Late(r Reply)
	Contested() bool
}

// ScriptCall is a round's Ops whose call on server i runs script s with args (whose
// first two slots the call fills): the calls go out in the servers' batches (see batch),
// and each reply is a *redis.Cmd.
type ScriptCall interface {
	Line(i int) (s *script.Script, args []any)
}

// StaleCall is a ScriptCall whose calls still waiting in a batch may be over: they are
// not sent then (ErrNotSent).
type StaleCall interface {
	Stale() bool
}

// FuncCall is a round's Ops whose call on server i is a function, made on a worker.
type FuncCall interface {
	Call(ctx context.Context, i int) (any, error)
}

// Round makes ops' call on every server at once and hands the replies to ops.Take, in
// arrival order and one at a time, until it reports the round decided; replies that come
// later go to ops.Late. A server still silent past lim (see Limits) is handed to Take as
// failed (ErrSilent), and one still silent when ctx ends with ctx's error; its reply,
// when it comes, goes to Late. rs is the round's zero record, kept by the caller. Round
// returns once the round is decided or every server answered; the calls still running go
// on aside (the owner's Close waits for them), and cancel is called when the last one
// returns.
func (f *Fanout) Round(ctx context.Context, cancel context.CancelFunc, lim Limits, rs *Run, ops Ops) {
	nodes := f.nodes
	rs.f, rs.cancel, rs.lim, rs.ops = f, cancel, lim, ops
	rs.left, rs.finished, rs.start = len(nodes), make(chan struct{}), time.Now()
	for i := range nodes {
		if sc, ok := ops.(ScriptCall); ok {
			s, args := sc.Line(i)
			f.enqueue(i, queued{rs: rs, ctx: ctx, s: s, args: args})
		} else if !f.dispatch(job{rs: rs, ctx: ctx, i: i}) {
			rs.one(ctx, i)
		}
	}
	rs.await(ctx)
}

// job is a job for a worker (see dispatch): a FuncCall's call on server i in round rs,
// or, without rs, sending server i's batches (see drain).
type job struct {
	rs  *Run
	ctx context.Context
	i   int
}

// run does the job.
func (j job) run(f *Fanout) {
	if j.rs == nil {
		f.drain(j.i)
		return
	}
	j.rs.one(j.ctx, j.i)
}

// workerIdle is how long a worker waits for another job before it ends (see dispatch).
const workerIdle = 250 * time.Millisecond

// dispatch runs job j on an idle worker, or on a new one, and reports false, running
// nothing, once the owner is closed. A worker is a goroutine that the owner's Close
// waits for and that takes the next job of any round for a while after its own: a round
// that started a goroutine per server would grow each one's stack for the client's call,
// anew every time, which costs more than the call itself.
func (f *Fanout) dispatch(j job) bool {
	select {
	case f.calls <- j:
		return true
	default:
	}
	return f.aside(func() { f.work(j, f.done) })
}

// work runs job j, then the jobs dispatched to it until it has been idle for workerIdle
// or the owner closes (done).
func (f *Fanout) work(j job, done <-chan struct{}) {
	j.run(f)
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case j = <-f.calls:
			j.run(f)
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-done:
			return
		}
	}
}

// batch is one server's script calls waiting to go out. One batch of a server is in
// flight at a time (maxSenders): the calls made meanwhile wait, and go out together in
// the next, one pipeline — as many rounds in flight at once cost the client and the
// server one write and one read each, not one per round — and the server runs the calls
// in the order they were made.
type batch struct {
	mu      sync.Mutex
	queue   []queued
	spare   []queued // an empty queue's storage, kept for the next
	senders int      // batches being sent (see drain)
}

// maxSenders is the most batches of one server in flight at once: with one, a server
// gets the calls of each batch after it answered the previous one, and batches are
// largest.
const maxSenders = 1

// queued is one script call waiting in a batch.
type queued struct {
	rs   *Run
	ctx  context.Context
	s    *script.Script
	args []any
}

// enqueue puts call c on server i in its batch, and starts sending the batch unless
// maxSenders are at it (on the caller's goroutine once the owner is closed).
func (f *Fanout) enqueue(i int, c queued) {
	b := &f.batches[i]
	b.mu.Lock()
	if b.queue == nil {
		b.queue, b.spare = b.spare, nil
	}
	b.queue = append(b.queue, c)
	start := b.senders < maxSenders
	if start {
		b.senders++
	}
	b.mu.Unlock()
	if start && !f.dispatch(job{i: i}) {
		f.drain(i)
	}
}

// drain sends server i's batches until its queue is empty.
func (f *Fanout) drain(i int) {
	b := &f.batches[i]
	var buf []queued
	for {
		b.mu.Lock()
		calls := b.queue
		if len(calls) == 0 {
			b.senders--
			if b.spare == nil {
				b.spare = buf
			}
			b.mu.Unlock()
			return
		}
		b.queue = buf
		b.mu.Unlock()
		f.send(i, calls)
		clear(calls)
		buf = calls[:0]
	}
}

// send makes calls on server i: alone, or in one pipeline bounded by the latest of their
// deadlines. A call whose context ended before it went out is not sent. A reply of
// NOSCRIPT (the server does not have the script yet) makes that call again alone (see
// Node.Run).
func (f *Fanout) send(i int, calls []queued) {
	c := f.nodes[i]
	live := 0
	var last time.Time
	bounded := true
	for k, qc := range calls {
		if err := qc.ctx.Err(); err != nil {
			qc.rs.reply(i, nil, err)
			continue
		}
		if st, ok := qc.rs.ops.(StaleCall); ok && st.Stale() {
			qc.rs.reply(i, nil, ErrNotSent)
			continue
		}
		calls[live] = calls[k]
		live++
		d, ok := qc.ctx.Deadline()
		bounded = bounded && ok
		if d.After(last) {
			last = d
		}
	}
	calls = calls[:live]
	if live == 1 {
		cmd := c.Run(calls[0].ctx, calls[0].s, calls[0].args)
		calls[0].rs.reply(i, cmd, cmd.Err())
		return
	}
	if live == 0 {
		return
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, last)
		defer cancel()
	}
	legacy := c.Legacy()
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, live)
	for k, qc := range calls {
		sha, _ := qc.s.Form(legacy)
		qc.args[0], qc.args[1] = "evalsha", sha
		cmds[k] = pipe.Do(ctx, qc.args...)
	}
	_, _ = pipe.Exec(ctx)
	for k, qc := range calls {
		cmd := cmds[k]
		if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			cmd = c.Run(qc.ctx, qc.s, qc.args)
		}
		qc.rs.reply(i, cmd, cmd.Err())
	}
}

// Run is one round in progress (see Round). Its zero value is ready for Round; the
// caller keeps it, for example in the record of what the round does.
type Run struct {
	f      *Fanout
	cancel context.CancelFunc
	lim    Limits
	ops    Ops
	start  time.Time

	finished chan struct{} // closed once the round is decided
	mu       sync.Mutex
	decided  bool
	overdue  bool   // past the budget: a contested round gives up on its silent servers
	left     int    // calls still running
	answered uint64 // the servers that answered (bit i: server i)
}

// decide hands r to Take; mu is held. It reports whether the round just ended.
func (rs *Run) decide(r Reply) bool {
	rs.answered |= 1 << r.I
	if rs.decided {
		return false
	}
	rs.decided = rs.ops.Take(r)
	return rs.decided
}

// giveUp hands the servers still silent to Take as failed with err, when the round is
// past its patience or its context ended (all), or past its budget and contested; mu is
// held. It reports whether the round just ended (also undecided, once every server
// answered or was given up).
func (rs *Run) giveUp(all bool, err error) bool {
	if rs.decided || !all && !(rs.overdue && rs.ops.Contested()) {
		return false
	}
	for i := range rs.f.nodes {
		if rs.answered&(1<<i) == 0 && !rs.decided {
			rs.decide(Reply{I: i, Err: err})
		}
	}
	if all {
		rs.decided = true
	}
	return rs.decided
}

// one makes the FuncCall's call on server i and hands its reply on.
func (rs *Run) one(ctx context.Context, i int) {
	v, err := rs.ops.(FuncCall).Call(ctx, i)
	rs.reply(i, v, err)
}

// reply hands server i's reply on: to Take while the round is undecided, else to Late.
func (rs *Run) reply(i int, v any, err error) {
	if err == nil {
		rs.f.observe(time.Since(rs.start))
	}
	r := Reply{I: i, V: v, Err: err}
	rs.mu.Lock()
	was := rs.answered&(1<<i) != 0 || rs.decided
	ended := rs.decide(r) || rs.giveUp(false, ErrSilent)
	rs.left--
	last := rs.left == 0
	if last && !was && !ended && !rs.decided {
		ended, rs.decided = true, true // every server answered, undecided
	}
	rs.mu.Unlock()
	if ended {
		close(rs.finished)
	}
	if was {
		rs.ops.Late(r)
	}
	if last {
		rs.cancel()
	}
}

// timeUp marks the round past its budget (or its patience or context, all set) and gives
// up what that allows, with err.
func (rs *Run) timeUp(all bool, err error) {
	rs.mu.Lock()
	was := rs.decided
	rs.overdue = true
	ended := !was && rs.giveUp(all, err)
	rs.mu.Unlock()
	if ended {
		close(rs.finished)
	}
}

// await returns once the round is decided: by its replies, by its limits, or by the end
// of ctx, its calls' context — a call that waits in a batch (see batch) does not end
// with it, and the servers still silent are then given up with its error.
func (rs *Run) await(ctx context.Context) {
	lim := rs.lim
	var budget, patience <-chan time.Time
	if lim.Budget > 0 && lim.Budget < lim.Patience {
		t := getTimer(lim.Budget)
		defer putTimer(t)
		budget = t.C
	}
	if lim.Patience > 0 {
		t := getTimer(lim.Patience)
		defer putTimer(t)
		patience = t.C
	}
	done := ctx.Done()
	for {
		select {
		case <-rs.finished:
			return
		case <-budget:
			budget = nil
			rs.timeUp(false, ErrSilent)
		case <-patience:
			patience = nil
			rs.timeUp(true, ErrSilent)
		case <-done:
			done = nil
			rs.timeUp(true, ctx.Err())
		}
	}
}

// timers are stopped timers for rounds to wait with (see getTimer).
var timers sync.Pool

// getTimer returns a timer that fires after d, from timers when one is there; putTimer
// stops it and gives it back.
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func putTimer(t *time.Timer) {
	if !t.Stop() {
		// Fired, and maybe not received: a program built for Go before 1.23 keeps the
		// value in the channel, where the next user would find it.
		select {
		case <-t.C:
		default:
		}
	}
	timers.Put(t)
}
