package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/guard/internal/fanout"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/redis/go-redis/v9"
)

// quorumGrant is one server's grant in an attempt.
type quorumGrant struct {
	i         int
	token     int64
	holds     int64
	confirmed int64  // a reentered hold's token as a quorum confirmed it there (raise.lua), 0: none
	proposed  int64  // a reentered hold's token when it was the proposal it took there (acquire.lua), 0: none
	holder    string // a reentry's holder, when a section the owner is in (see script.Granted)
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
	if e, ok := v[0].(error); ok {
		return attemptReply{}, e // the script's error reply, such as another layout's key
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
// token (see raise.lua), owner holding it.
func tokenFields(h *Hold, owner string) (token, confirmed string) {
	token = "#t"
	if h.Terms.Spec.PerHolder {
		token = owner + "#t" // each holder's own (see kinds/lib.lua)
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
// not carry it), busy, refused, or a *QuorumError when too few answered.
func (q *Quorum) acquireRound(ctx context.Context, h *Hold, nonce, manner string) Grant {
	a := q.newAttempt(h, nonce, manner)
	// The round's context ends when its last call returns; the write-back of a fresh
	// hold's token, when one is needed, runs after that, within the caller's.
	callerCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, h.Terms.Validity)
	defer a.settle()
	q.fan.Round(ctx, cancel, fanout.Limits{Budget: q.fan.Budget(h.Terms.TTL), Patience: q.patience(h.Terms)}, &a.rs, a)

	if a.outcome.Load() == attemptWon {
		g, hold, err := q.raise(callerCtx, a)
		if err == nil {
			a.top, a.hold = g.Token, hold
			return Grant{Granted: g, Q: hold}
		}
		a.outcome.Store(attemptLost)
		q.undoAt(h, a.owner, nonce, nil)
		return Grant{Err: err}
	}
	a.outcome.Store(attemptLost) // also when every server answered without a decision
	q.undoAt(h, a.owner, nonce, a.undoOn())
	if err := callerCtx.Err(); err != nil && !a.refused && len(a.grants)+a.cut >= q.need {
		// The caller's context ended while servers that could still have made a majority
		// with the grants were silent: as a call to one server that does not return in
		// time, the attempt failed with the context's error. Reported busy because one
		// server said another owner holds the lock, it would say the lock is held when
		// the owner's own servers had not answered yet.
		return Grant{Err: err}
	}
	if len(a.grants) > 0 && a.busy > 0 && manner != MannerTry {
		// A split vote: contenders that each won some servers undo at once, and the
		// undo's announcement wakes them all together. A pause of up to a budget, drawn
		// at random, keeps them from splitting the same servers again on their next
		// attempt, as Redlock's retry delay does.
		q.jitter(callerCtx, h.Terms.TTL)
	}
	return a.lost()
}

// newAttempt returns attempt nonce of h, proposing a token, with each server's command
// line (one allocation for all: a call fills its first two slots, see Conn.RunScript).
func (q *Quorum) newAttempt(h *Hold, nonce, manner string) *quorumAttempt {
	n := len(q.nodes)
	a := &quorumAttempt{q: q, h: h, owner: h.Owner(), nonce: nonce, pttl: -1, proposal: q.propose()}
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
	q        *Quorum
	h        *Hold
	owner    string // the hold's owner: the holder's, once raise found a reentry of a section's hold
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
	layout   error // a server's refusal of a key another layout wrote (LayoutOf), if any
	pttl     int64 // the shortest TTL among the busy servers' holders, ms; -1: none
	outcome  atomic.Int32
	proposal int64 // the token proposed to the servers (see propose)
	top      int64 // the hold's token, once settled
	// hold is the hold the attempt won (as raise made it), once settled: a late
	// grant joins this one. The acquisition may have given it back (granted too late,
	// see Locker.waitAttempt) and won another with a later attempt, whose h.Q a late
	// grant of this one must not touch: the undo of this attempt's nonce, sent to every
	// server, drops the grant or has it refused.
	hold *QuorumHold

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
	return a.outcome.Load() == attemptLost || a.h.Ref.Gone()
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
		if _, _, ok := LayoutOf(r.Err); ok && a.layout == nil {
			// A mixed fleet fails loudly, as on one server, whatever the others answer:
			// the old version's holds are not this one's to see.
			a.layout = r.Err
		}
		if !IsServerError(r.Err) {
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
	case a.refused, a.layout != nil:
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
	g, err := script.ParseAcquire(r.v)
	switch {
	case err != nil:
		a.fail(i, err)
		a.failed++
	case g.Acquired:
		a.undo |= 1 << i
		a.grants = append(a.grants, quorumGrant{i: i, token: g.Token, holds: g.Holds, confirmed: r.confirmed, proposed: r.proposed, holder: g.Holder})
		if r.confirmed > 0 {
			a.confirmed++
		}
		if r.proposed > 0 {
			a.proposed++
		}
		if g.Holds > 1 {
			a.held++
		}
	case g.Upgrade:
		a.refused = true
		a.fail(i, errUpgrade)
	default:
		a.fail(i, errNotGranted)
		a.busy++
		if ms := g.PTTL.Milliseconds(); ms >= 0 && (a.pttl < 0 || ms < a.pttl) {
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
	case err == fanout.ErrNotSent, err != nil && IsServerError(err), err == nil && !granted:
	case a.outcome.Load() == attemptLost:
		q.undoAt(h, a.owner, nonce, onlyAt(len(a.q.nodes), r.I)) // the attempt lost: undone
	case err == nil && late.holds == 1 && late.carries(a.top, a.proposal):
		// A fresh grant after the majority's that took the proposal that became the
		// hold's token: part of the hold (renewed and released with the others) as it
		// is. A release of the hold, like the undo of an acquisition given up, goes to
		// every server with this attempt's nonce, and drops this grant or, reaching the
		// server first, has it refused.
		a.hold.joinedLate(r.I)
	case err == nil && h.Ref.Gone():
		// Undone: its grant on this server came after the acquisition was given up or
		// the hold's release reached the server, and would stay there until its TTL.
		q.undoAt(h, a.owner, nonce, onlyAt(len(a.q.nodes), r.I))
	case late.carries(a.top, a.proposal):
		a.hold.joinedLate(r.I) // a grant after the majority's: part of the hold
	case err == nil:
		// A grant after the majority's: part of the hold, once told the hold's token
		// (aside: the reply's goroutine may have others to hand on).
		raise := func() {
			if q.raiseOn(context.Background(), q.nodes[r.I], h, a.owner, a.top, nonce) == nil {
				a.hold.joinedLate(r.I)
			}
		}
		if !q.cfg.Aside(raise) {
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
	g, err := script.ParseAcquire(ar.v)
	if err != nil || !g.Acquired {
		return quorumGrant{}, false, nil
	}
	return quorumGrant{token: g.Token, holds: g.Holds, confirmed: ar.confirmed, proposed: ar.proposed}, true, nil
}

// lost is the reply of an attempt that no majority granted: refused, busy, or a
// *QuorumError when too few servers answered for a majority to be possible.
func (a *quorumAttempt) lost() Grant {
	q := a.q
	switch {
	case a.layout != nil:
		return Grant{Err: a.layout}
	case a.refused:
		return Grant{Granted: script.Granted{Upgrade: true}}
	case a.failed <= len(q.nodes)-q.need:
		// Busy: enough servers answered, or may still, for a majority to be reached
		// once the lock is free.
		return Grant{Granted: script.Granted{PTTL: time.Duration(a.pttl) * time.Millisecond}}
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
	return Grant{Err: q.failure("acquire", a.errs)}
}
