package store

import (
	"context"
	"sync"
	"time"

	"github.com/guardkit/guardkit/guard/internal/fanout"
	"github.com/guardkit/guardkit/guard/internal/script"
)

// renewAt renews batch on every server at once, one pipeline per server, and
// decides each lease's renewal as soon as a majority confirmed it (nil), a majority
// reported it gone (ErrGone), or neither can happen any more (a *QuorumError).
func (q *Quorum) renewAt(timeout time.Duration, batch []*Hold, idx []int, ttls []time.Duration, errs []error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	n := len(q.nodes)
	qr := newQuorumRenewal(q, batch, idx, errs)
	call := func(ctx context.Context, c *Conn) (any, error) {
		g := &renewGroup{node: c.client, legacy: &c.legacy, idx: idx}
		g.run(ctx, batch, ttls)
		return g, nil
	}
	// A server that reports the hold gone after the renewal was decided is repaired too.
	var lateMu sync.Mutex
	late := func(nr fanout.Reply) {
		g := nr.V.(*renewGroup)
		for k, i := range g.idx {
			v, err := g.cmds[k].Int64()
			switch {
			case err != nil || errs[i] != nil:
			case v != 1:
				lateMu.Lock()
				q.repair(batch[i], nr.I)
				lateMu.Unlock()
			case qr.rounds[i] > 0 && batch[i].Q != nil:
				batch[i].Q.live.joined(qr.rounds[i], nr.I) // renewed there too
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
	callF func(context.Context, *Conn) (any, error)
	takeF func(fanout.Reply) bool
	lateF func(fanout.Reply)
	q     *Quorum
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
	q       *Quorum
	batch   []*Hold
	errs    []error   // the outcome per lease, set once decided
	ok      []int     // servers that renewed the hold
	gone    []int     // servers that reported it gone
	failed  [][]error // per server, what went wrong there
	pending []bool    // the leases not yet decided
	missing []uint64  // the servers that reported the hold gone
	renewed []uint64  // the servers that renewed the hold
	rounds  []int     // the hold's round of liveness this renewal is, once decided
	open    int       // how many are pending
}

// newQuorumRenewal starts the renewal of the leases idx of batch: each pending, its
// outcome in errs a failure until a majority renews it.
func newQuorumRenewal(q *Quorum, batch []*Hold, idx []int, errs []error) *quorumRenewal {
	m := len(batch)
	qr := &quorumRenewal{q: q, batch: batch, errs: errs, open: len(idx),
		ok: make([]int, m), gone: make([]int, m), failed: make([][]error, m), pending: make([]bool, m),
		missing: make([]uint64, m), renewed: make([]uint64, m), rounds: make([]int, m)}
	for _, i := range idx {
		qr.pending[i] = true
		qr.failed[i] = make([]error, len(q.nodes))
		errs[i] = q.failure("renew", qr.failed[i])
	}
	return qr
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
		qr.renewed[i] |= 1 << j
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
		// The engine counts the lease's validity from this round now: the servers that
		// renewed it so far are those that hold it that long (the others, and those
		// that answer after, read their clock when it is released).
		if hq := qr.batch[i].Q; hq != nil {
			qr.rounds[i] = hq.live.renewed(qr.renewed[i])
		}
	case qr.gone[i] > n-q.need:
		qr.errs[i] = ErrGone
	case n-countErrs(qr.failed[i]) < q.need:
		qr.errs[i] = q.failure("renew", qr.failed[i])
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
func (q *Quorum) repair(h *Hold, i int) {
	q.cfg.Aside(func() {
		if h.Q == nil || h.Ref.Gone() {
			return
		}
		c := q.nodes[i]
		ctx, cancel := context.WithTimeout(context.Background(), min(q.cfg.Timeout, h.Terms.Validity))
		defer cancel()
		nonce := q.cfg.Nonce()
		s, args := q.acquireCall(h, nonce, MannerTry)
		ar, err := parseAttempt(c.RunScript(ctx, s, args, true))
		if err != nil {
			if !IsServerError(err) {
				q.undoAt(h, h.Owner(), nonce, onlyAt(len(q.nodes), i))
			}
			return
		}
		g, err := script.ParseAcquire(ar.v)
		if err != nil || !g.Acquired {
			return
		}
		if g.Holds > 1 || q.raiseOn(ctx, c, h, h.Owner(), h.Token, nonce) != nil || h.Ref.Gone() {
			// A reentry (the owner took it there through another Locker meanwhile) is
			// not this hold's to count; a failed write-back or a release leaves it.
			q.undoAt(h, h.Owner(), nonce, onlyAt(len(q.nodes), i))
			return
		}
		h.Q.carry.Or(1 << i)
		h.Ref.Repaired(q.addrs[i])
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
