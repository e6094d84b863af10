package store

import (
	"context"
	"time"

	"github.com/guardkit/guardkit/guard/internal/fanout"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/redis/go-redis/v9"
)

// undoAt undoes, aside, owner's attempt with nonce (see callArgs.undo) on the servers
// marked in on (all when on is nil); on a closed Locker, at once.
// An undo whose call failed without a server's answer (a timeout: the command may have
// been dropped with its connection) is sent once more: the undo nonce makes a second
// run a no-op.
func (q *Quorum) undoAt(h *Hold, owner, nonce string, on []bool) {
	q.each(on, true, func(ctx context.Context, c *Conn) error {
		var err error
		for _, args := range q.args(q.nodes[0]).undo(h, owner, nonce, q.cfg.Nonce) {
			call := func(ctx context.Context) error { return c.RunScript(ctx, h.Terms.Spec.Release, args, true).Err() }
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
func (q *Quorum) untilAnswered(c *Conn, err error, call func(context.Context) error) {
	if !answered(err) {
		q.retry(c, call)
	}
}

// releaseAll runs a release on every server and merges the replies: decided once a
// majority answered (the servers still silent keep their share until its TTL).
func (q *Quorum) releaseAll(ctx context.Context, h *Hold, nonce string) (script.Released, error) {
	n := len(q.nodes)
	// A server without the hold is told the winning attempt's nonce: its copy of the
	// attempt may still be on its way, and must not take the lock after this release.
	rr := q.releaseLines(h, nonce)
	// The calls still running when a majority answered go on past the caller's return,
	// within its deadline: a release that reaches the last server frees it there too.
	d, bounded := ctx.Deadline()
	if !bounded {
		d = time.Now().Add(q.cfg.Timeout)
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), d)
	q.fan.Round(rctx, cancel, fanout.Limits{Patience: q.patience(h.Terms)}, &rr.rs, rr)
	if rr.ok < q.need {
		errs := make([]error, n)
		for i := range errs {
			errs[i] = rr.slots[i].err
		}
		return 0, q.failure("release", errs)
	}
	return q.mergeRelease(rr.slots), nil
}

// releaseLines makes the release of h on every server (see releaseAll): each server's
// command line with the winning attempt's nonce (release.lua's ARGV[7]) and, where the
// hold was granted or renewed in the round the lease's validity counts from (fresh)
// and that validity has not run out, what the engine's clock says of the hold (ARGV[8],
// see releaseLive): those servers need not read their clock, nor touch the hash's TTL.
func (q *Quorum) releaseLines(h *Hold, nonce string) *releaseRound {
	n := len(q.nodes)
	line := q.args(q.nodes[0]).release(h, nonce, "")
	w := len(line) + 2
	// The validity first, then the servers: a renewal stores its servers before the
	// engine moves the validity (see quorumRenewal.decide).
	live := liveFlag(h)
	fresh := h.Q.live.set()
	rr := &releaseRound{q: q, h: h, width: w, lines: make([]any, n*w), slots: make([]releaseSlot, n),
		// The release waits for every server known to carry the hold besides a majority
		// (within the round's patience): the owner's next attempt, on other connections,
		// must not reach one of them before the release does and find the lock held.
		carriers: h.Q.carry.Load()}
	for i := range n {
		copy(rr.lines[i*w:], line)
		rr.lines[i*w+w-2] = h.Q.nonce
		rr.lines[i*w+w-1] = argNoLabel
		if fresh&(1<<i) != 0 {
			rr.lines[i*w+w-1] = live
		}
	}
	return rr
}

// releaseRound is one release of releaseAll in progress: the replies taken so far.
type releaseRound struct {
	rs       fanout.Run
	q        *Quorum
	h        *Hold
	lines    []any // each server's command line, width long, one after the other
	width    int
	slots    []releaseSlot
	carriers uint64 // the servers known to carry the hold that have not answered
	ok, ko   int
}

// releaseSlot is one server's answer to a release.
type releaseSlot struct {
	code script.Released
	err  error
}

// Line returns the script and command line of the release on server i (see
// fanout.ScriptCall).
func (rr *releaseRound) Line(i int) (*script.Script, []any) {
	w := rr.width
	return rr.h.Terms.Spec.Release, rr.lines[i*w : (i+1)*w : (i+1)*w]
}

// Take records one server's reply and reports whether the release is decided.
func (rr *releaseRound) Take(r fanout.Reply) bool {
	rr.carriers &^= 1 << r.I
	rr.Late(r)
	var code script.Released
	if r.Err == nil {
		code, r.Err = script.ParseRelease(r.V.(*redis.Cmd).Int64())
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
	if r.Err != nil && r.Err != fanout.ErrSilent && !IsServerError(r.Err) {
		// A line of its own: the first call may still be on its way (given up when the
		// round's context ended), its first two slots being filled.
		w := rr.width
		line := make([]any, w)
		copy(line[2:], rr.lines[r.I*w+2:(r.I+1)*w])
		line[w-1] = argNoLabel // sent later: the server reads its clock
		rr.q.each(onlyAt(len(rr.slots), r.I), false, func(ctx context.Context, c *Conn) error {
			call := func(ctx context.Context) error { return c.RunScript(ctx, rr.h.Terms.Spec.Release, line, true).Err() }
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
func (q *Quorum) mergeRelease(slots []releaseSlot) script.Released {
	var count [script.OwnTurn - script.NotHeld + 1]int
	for _, s := range slots {
		if s.err == nil {
			count[s.code-script.NotHeld]++
		}
	}
	at := func(c script.Released) int { return count[c-script.NotHeld] }
	switch {
	case at(script.StillHeld) >= q.need:
		return script.StillHeld
	case at(script.OwnTurn) > 0:
		return script.OwnTurn
	case at(script.HandedOn) > 0:
		return script.HandedOn
	case at(script.Freed) > 0 || at(script.StillHeld) > 0:
		return script.Freed
	case at(script.NotHeld) > 0:
		return script.NotHeld
	}
	return script.Expired
}

// each runs call on the servers marked in on (all when on is nil) at once, aside, each
// bounded by the release timeout: undoing attempts and the best-effort calls (leaving a
// wait queue, passing a turn on, a writer leaving its wait). On a closed Locker the
// calls run at once when inline is set, else not at all.
func (q *Quorum) each(on []bool, inline bool, call func(ctx context.Context, c *Conn) error) {
	for i, c := range q.nodes {
		if on != nil && !on[i] {
			continue
		}
		run := func() {
			ctx, cancel := context.WithTimeout(context.Background(), q.cfg.Timeout)
			defer cancel()
			_ = call(ctx, c)
		}
		if !q.cfg.Aside(run) && inline {
			run()
		}
	}
}
