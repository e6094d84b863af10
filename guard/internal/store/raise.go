package store

import (
	"context"
	"slices"
	"strconv"
	"sync"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// raise settles the token of a hold that a majority granted and returns it with
// the attempt's merged reply and the quorum's record of the hold. A hold whose token a majority of the granting servers had
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
func (q *Quorum) raise(ctx context.Context, a *quorumAttempt) (script.Granted, *QuorumHold, error) {
	h, nonce, grants := a.h, a.nonce, a.grants
	top, holds, holder := q.settle(grants)
	reentry := holds > 1
	g := script.Granted{Acquired: true, Token: top, Holds: 1}
	if reentry {
		g.Holds = holds
	}
	if reentry && holder != "" {
		// A reentry of the hold of a section the owner is in: the write-back below and the
		// hold's renewals and release are the holder's (the engine moves the hold to
		// it when it takes the grant).
		g.Holder, a.owner = holder, holder
	}
	errs := q.writeBack(ctx, h, a.owner, nonce, top, a.proposal, grants)
	carried := 0
	hold := &QuorumHold{nonce: nonce}
	for _, g := range grants {
		if errs == nil || errs[g.i] == nil {
			carried++
			hold.carry.Or(1 << g.i)
		} else if !reentry {
			// Its hold carries a token that is not the hold's: drop it there, so that a
			// reentry never reads it. The majority that carries the token keeps the lock.
			q.undoAt(h, a.owner, nonce, onlyAt(len(q.nodes), g.i))
		}
	}
	if carried < q.need {
		for i := range errs {
			if !slices.ContainsFunc(grants, func(g quorumGrant) bool { return g.i == i }) {
				errs[i] = errNotGranted
			}
		}
		return script.Granted{}, nil, q.failure("acquire", errs)
	}
	// Every server that granted the attempt holds it until the attempt was sent and the
	// TTL passed at least, past the validity the engine counts from that sending. (The
	// hold is not shared yet: late grants reach it once the attempt records it.)
	hold.live.servers = hold.carry.Load()
	return g, hold, nil
}

// writeBack tells top, at once, to every granting server that does not carry it yet, and
// returns each server's error (nil where it carries top now, or did already; nil for
// all when none needed it).
func (q *Quorum) writeBack(ctx context.Context, h *Hold, owner, nonce string, top, proposal int64, grants []quorumGrant) []error {
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
			errs[g.i] = q.raiseOn(ctx, q.nodes[g.i], h, owner, top, nonce)
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
func (q *Quorum) settle(grants []quorumGrant) (top, holds int64, holder string) {
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
func (q *Quorum) reentered(confirmed, proposed, held int) int {
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
func (q *Quorum) current(confirmed, held int) bool {
	return confirmed >= q.need || held >= q.need && confirmed > 0
}

// onlyAt returns n flags, set at i only.
func onlyAt(n, i int) []bool {
	on := make([]bool, n)
	on[i] = true
	return on
}

// raiseOn gives owner's hold h on one server the token top (raise.lua), if the attempt with
// nonce made or counted it there.
func (q *Quorum) raiseOn(ctx context.Context, c *Conn, h *Hold, owner string, top int64, nonce string) error {
	ctx, cancel := context.WithTimeout(ctx, min(q.cfg.Timeout, h.Terms.Validity))
	defer cancel()
	args := raiseArgs(h, owner, top, nonce)
	n, err := c.RunScript(ctx, raiseScript, args, true).Int64()
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
func raiseArgs(h *Hold, owner string, top int64, nonce string) []any {
	tokenField, _ := tokenFields(h, owner)
	holderField, holderValue, nonces := "#o", owner, "#a"
	switch {
	case h.Terms.Spec.Write:
		holderField, nonces = "#W", "#Wa"
	case h.Terms.Spec.PerHolder:
		holderField, holderValue, nonces = owner, "", owner // a share lists its nonces in its own field
	}
	return []any{nil, nil, 1, h.Keys.Lock, strconv.FormatInt(top, 10), tokenField, holderField, holderValue, h.args.retention, nonces, nonce}
}
