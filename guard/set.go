package guard

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// AcquireAll takes the locks named by keys as one lock: a transfer's two accounts, an
// order and its stock lines. It returns one Lease that holds every key, or an error and
// no key held: a key taken before the acquisition failed is released before AcquireAll
// returns, whatever ended it (the wait's budget, ctx, Redis unavailable or frozen, the
// Locker closing).
//
// The keys are taken in one canonical order, whatever order the caller lists them in:
// by Redis Cluster hash slot of their lock, then by key (Lease.Keys). Two callers that
// list {a, b} and {b, a} so never wait for each other in a cycle. Duplicates count
// once; an empty list, or any key that Acquire would refuse, fails with ErrInvalidKey
// before any Redis call. One key is Acquire.
//
// The lease is one lease: one TTL, renewed as one (its keys' renewals share one
// pipeline per server), lost as one — when any key is lost, the lease's Context ends
// with the *LeaseLostError that names that key — and released as one (Release frees
// every key). Each key keeps its own fencing token: Lease.Tokens.
//
// Reentry works per key, as for Acquire: a key that the owner in ctx (or a section it
// is in) holds already is reentered, the others are taken for a new section, which the
// Lease's Context carries. A call made inside it for any of its keys reenters at once;
// one for a set that holds more keys takes only those it lacks, in canonical order (a
// missing key that sorts before one the section holds is then taken after it: see
// "Several keys" in the package documentation).
//
// Options apply to every key: the Retry budget to the whole acquisition (a MaxWait of 2s
// waits 2s in all, not per key), the kind (Read, Write, Permits, Fair) to each key. On a
// single server or a Sentinel group, exclusive keys that are all free are taken in one
// script call; on a Cluster the keys of one slot are, and each slot in turn. Errors are
// Acquire's: a *LockedError names the key that stayed busy.
func (l *Locker) AcquireAll(ctx context.Context, keys []string, opts ...Option) (*Lease, error) {
	s, err := l.callSettings(opts, "AcquireAll")
	if err != nil {
		return nil, err
	}
	return l.acquireSet(ctx, keys, s, s.retry)
}

// TryAcquireAll is AcquireAll with a single attempt per key: a key held by another owner
// fails the call at once with a *LockedError, and the keys taken before it are
// released. The Retry option is ignored.
func (l *Locker) TryAcquireAll(ctx context.Context, keys []string, opts ...Option) (*Lease, error) {
	s, err := l.callSettings(opts, "TryAcquireAll")
	if err != nil {
		return nil, err
	}
	return l.acquireSet(ctx, keys, s, NoRetry())
}

// setKey is one key of a set with its Redis names and its hash slot.
type setKey struct {
	key  string
	rk   redisKeys
	slot uint16
}

// canonical validates keys and returns them without duplicates, in canonical order: by
// the hash slot of their lock hash, then by key.
func (l *Locker) canonical(keys []string, s *settings) ([]setKey, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("guard: acquire: %w: no keys", ErrInvalidKey)
	}
	out := make([]setKey, 0, len(keys))
	for _, k := range keys {
		rk, err := s.redisKeys(k, s.spec)
		if err != nil {
			return nil, err
		}
		out = append(out, setKey{key: k, rk: rk, slot: hashSlot(rk.Lock)})
	}
	slices.SortFunc(out, func(a, b setKey) int {
		return cmp.Or(cmp.Compare(a.slot, b.slot), cmp.Compare(a.key, b.key))
	})
	return slices.CompactFunc(out, func(a, b setKey) bool { return a.key == b.key }), nil
}

// acquireSet is AcquireAll under settings s and policy p.
func (l *Locker) acquireSet(ctx context.Context, keys []string, s *settings, p RetryPolicy) (*Lease, error) {
	order, err := l.canonical(keys, s)
	if err != nil {
		return nil, err
	}
	if len(order) == 1 {
		return l.acquire(ctx, order[0].key, s, p)
	}
	owner, section, err := l.setOwner(ctx, order[0].key, s)
	if err != nil {
		return nil, err
	}
	ms := setSettings(s, len(order))
	deadline := budgetEnd(p)
	members := make([]*Lease, 0, len(order))
	for i := 0; i < len(order); {
		j := i + 1
		if ms.syncReplicas == 0 { // an acquisition that WAITs for replicas goes alone
			j = l.oneCallEnd(i, len(order), ms, func(k int) uint16 { return order[k].slot })
		}
		var hs []*held
		if j-i > 1 {
			hs = l.acquireGroup(ctx, owner, section, order[i:j], ms, p, deadline)
		}
		for k := i; k < j; k++ {
			var h *held
			if hs != nil {
				h = hs[k-i]
			}
			le, err := l.acquireMember(ctx, order[k], h, owner, section, ms, p, deadline)
			if err != nil {
				if hs != nil {
					l.dropGroup(ctx, hs[k-i+1:])
				}
				if rerr := l.giveBack(ctx, members, deadline); rerr != nil {
					err = fmt.Errorf("%w (and giving back the keys taken before it: %w)", err, rerr)
				}
				return nil, err
			}
			members = append(members, le)
		}
		i = j
	}
	return l.joinSet(ctx, section, members), nil
}

// setOwner checks a set's call before any Redis call — its terms, ctx, the owner in ctx
// — and returns the owner (a fresh one when ctx has none) and a new section in it, for
// the set's holds. first is the set's first key, for errors.
func (l *Locker) setOwner(ctx context.Context, first string, s *settings) (owner, section ctxid.ID, err error) {
	if s != &l.cfg {
		if err := l.st.Admits(&s.t); err != nil {
			return "", "", configError(err)
		}
	}
	if err := ctx.Err(); err != nil {
		return "", "", fmt.Errorf("guard: acquire %s: %w", quoteKey(first), err)
	}
	if owner, section, err = ownerOf(ctx, first); err != nil || section != "" {
		return owner, section, err
	}
	if section, err = ctxid.Section(owner); err != nil {
		return "", "", fmt.Errorf("guard: acquire %s: %w", quoteKey(first), err)
	}
	return owner, section, nil
}

// acquireMember acquires key k of a set for section: through its hold h made by its
// group's script call, or by itself when h is nil (acquireIn).
func (l *Locker) acquireMember(ctx context.Context, k setKey, h *held, owner, section ctxid.ID, s *settings, p RetryPolicy, deadline time.Time) (le *Lease, err error) {
	a := acquisition{caller: ctx}
	rctx := l.tel.startAcquire(ctx, &a, s, k.key, string(owner))
	if h != nil {
		le, err = l.acquireRemote(ctx, rctx, &a, h, p, deadline)
	} else {
		le, err = l.acquireIn(ctx, rctx, &a, k.key, k.rk, owner, section, s, p, deadline)
	}
	a.end(rctx, le, err, p)
	return le, err
}

// oneCallEnd returns the end of the run of n items, from item i on, that one set script
// call may take or give back together (store.SetAcquirer): exclusive locks of one
// server, or on a Cluster of one hash slot (slot(j) is item j's). i+1 when item i goes
// alone.
func (l *Locker) oneCallEnd(i, n int, s *settings, slot func(int) uint16) int {
	sa, ok := l.st.(store.SetAcquirer)
	if !ok || s.spec != exclusiveSpec {
		return i + 1
	}
	switch sa.SetScope() {
	case store.SetServer:
		return n
	case store.SetSlot:
		j := i + 1
		for j < n && slot(j) == slot(i) {
			j++
		}
		return j
	}
	return i + 1
}

// acquireGroup makes the first attempt at the keys of ks, exclusive locks that one
// script call may take, in that one call, all or none: it returns their holds, made for
// section and in the table, each with the call's outcome as its first attempt's (held.pre)
// when the call took them all or its outcome is unknown; without it when a key was not
// free (nothing was taken: each wait then attempts by itself). Each hold is then
// acquired by its own wait (acquireRemote), in order. It returns nil, taking nothing,
// when a key is held or being acquired by the owner's chain in this process, when this
// process queues for one: the keys then go one by one.
func (l *Locker) acquireGroup(ctx context.Context, owner, section ctxid.ID, ks []setKey, s *settings, p RetryPolicy, deadline time.Time) []*held {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	for _, k := range ks {
		if l.heldIn(k.key, owner, s.kind) != nil {
			l.mu.Unlock()
			return nil
		}
		if _, queued, yielding := l.waits.State(k.rk.Channel()); queued || yielding {
			l.mu.Unlock()
			return nil
		}
	}
	hs := make([]*held, len(ks))
	shs := make([]*store.Hold, len(ks))
	label := l.labelArg(ctx, s)
	for i, k := range ks {
		h := &held{env: l.env, hk: holdKey{key: k.key, owner: section, kind: s.kind}, s: s}
		h.sh = store.Hold{Keys: k.rk, Terms: &s.t, Section: string(section), Ref: h}
		h.sh.Box(string(section), label)
		l.held[h.hk] = h
		hs[i], shs[i] = h, &h.sh
	}
	l.mu.Unlock()
	nonces := make([]string, len(hs))
	for i, h := range hs {
		nonces[i] = l.attemptNonce(h)
	}
	manner := mannerWait
	if p.limit == limitAttempts && p.attempts == 1 {
		manner = mannerTry
	}
	actx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		actx, cancel = context.WithDeadlineCause(ctx, deadline.Add(attemptGrace), errBudgetSpent)
		defer cancel()
	}
	sent := time.Now()
	grants := l.setCall(actx, shs, nonces, manner)
	for i, h := range hs {
		if grants != nil {
			h.pre, h.preNonce, h.preSent = &grants[i], nonces[i], sent
		}
	}
	return hs
}

// setCall makes a set's script call (store.SetAcquirer) and returns its grants, nil
// when a key was not free. On a client that does not honour context deadlines it
// returns when ctx ends even if Redis has not answered, with that error as every
// grant's: the outcome is unknown, and each key's wait sends its attempt again or undoes
// it, as after any attempt of unknown outcome.
func (l *Locker) setCall(ctx context.Context, hs []*store.Hold, nonces []string, manner string) []store.Grant {
	sa := l.st.(store.SetAcquirer)
	if ctx.Done() == nil || l.st.Inline(false) {
		grants, _ := sa.AcquireSet(ctx, hs, nonces, manner)
		return grants
	}
	replies := make(chan []store.Grant, 1)
	if !l.background(func() {
		grants, _ := sa.AcquireSet(context.WithoutCancel(ctx), hs, nonces, manner)
		replies <- grants
	}) {
		return nil // closed: nothing sent, and each wait finds the Locker closed
	}
	select {
	case grants := <-replies:
		return grants
	case <-ctx.Done():
		err := cutByBudget(ctx, ctx.Err()) // settle names the key
		out := make([]store.Grant, len(hs))
		for i := range out {
			out[i] = store.Grant{Err: err}
		}
		return out
	}
}

// dropGroup gives up the holds of a group that no wait took up (an earlier key of the
// set failed): each leaves the table, ends, and is undone in Redis when the group's call
// took it or may have.
func (l *Locker) dropGroup(ctx context.Context, hs []*held) {
	for _, h := range hs {
		l.mu.Lock()
		if l.held[h.hk] == h {
			delete(l.held, h.hk)
		}
		h.mu.Lock()
		h.state = stateReleased
		h.acquireEnded()
		h.mu.Unlock()
		l.mu.Unlock()
		if r := h.pre; r != nil && (r.Err != nil && !store.IsServerError(r.Err) || r.Bad != nil || r.Err == nil && r.Acquired) {
			l.compensate(ctx, h, h.preNonce, r.Err)
		}
	}
}

// setSettings returns s for the keys of a set of n keys: its label says that each hold
// is part of one (Inspect, the guardkit command).
func setSettings(s *settings, n int) *settings {
	ms := *s
	ms.inSet = true
	tag := "set of " + strconv.Itoa(n) + " keys"
	if ms.label == "" {
		ms.label = tag
	} else {
		ms.label += " (" + tag + ")"
	}
	return &ms
}

// joinSet makes the one Lease of a set from the handles of its keys, acquired in
// canonical order: each hold's handle is replaced by the set's, so that losing any key
// ends the set's lease and its Release drops every key. The keys' renewals are brought
// to one time, so that each renewal of the set is one batch (see watchdog).
func (l *Locker) joinSet(ctx context.Context, section ctxid.ID, members []*Lease) *Lease {
	set := &Lease{h: members[0].h, parent: ctx, reentrant: true, sec: section, set: make([]*held, len(members))}
	var first, last time.Time
	for i, m := range members {
		h := m.h
		set.set[i] = h
		set.reentrant = set.reentrant && m.reentrant
		h.mu.Lock()
		for j, x := range h.handles {
			if x == m {
				h.handles[j] = set
			}
		}
		if h.hk.owner == section && h.state == stateHeld {
			if first.IsZero() || h.acquired.Before(first) {
				first = h.acquired
			}
			if h.acquired.After(last) {
				last = h.acquired
			}
		}
		var lost error
		if h.state == stateLost {
			lost = h.cause // lost before it joined the set: lose told m, not set
		}
		h.mu.Unlock()
		if lost != nil {
			set.end(lost)
		}
	}
	if last.Sub(first) > renewAlign {
		// Taken over more than one renewal batch's window (some key was waited for):
		// renew the set's own holds now, together, and they stay together after.
		for _, h := range set.set {
			if h.hk.owner == section {
				l.dog.Soon(&h.renewal)
			}
		}
	}
	return set
}

// renewAlign is how far apart a set's holds may have been granted and still be renewed
// in one batch: the watchdog's batch window.
const renewAlign = 5 * time.Millisecond

// Keys returns the keys the lease holds: the one key, or those of a lease acquired with
// AcquireAll (or the Keys and RawKeys options), without duplicates and in the canonical
// order they were acquired in (see AcquireAll).
func (le *Lease) Keys() []string {
	if le.set == nil {
		return []string{le.h.hk.key}
	}
	keys := make([]string, len(le.set))
	for i, h := range le.set {
		keys[i] = h.hk.key
	}
	return keys
}

// Tokens returns the fencing token of each key of Keys, in the same order: each key
// keeps its own token (see Token), and storage that a set's work writes checks each
// record against the token of the key that guards it.
func (le *Lease) Tokens() []int64 {
	if le.set == nil {
		return []int64{le.h.sh.Token}
	}
	tokens := make([]int64, len(le.set))
	for i, h := range le.set {
		tokens[i] = h.sh.Token
	}
	return tokens
}

// lostNow returns the cause of the loss of the lease's hold (held.lostNow), of the first
// of a set's holds lost; nil while they are held.
func (le *Lease) lostNow() *LeaseLostError {
	if le.set == nil {
		return le.h.lostNow()
	}
	for _, h := range le.set {
		if lost := h.lostNow(); lost != nil {
			return lost
		}
	}
	return nil
}
