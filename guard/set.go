package guard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/script"
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
	if s != &l.cfg {
		if err := l.st.Admits(&s.t); err != nil {
			return nil, configError(err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("guard: acquire %s: %w", quoteKey(order[0].key), err)
	}
	owner, err := ownerOf(ctx, order[0].key)
	if err != nil {
		return nil, err
	}
	section, err := ctxid.Section(owner)
	if err != nil {
		return nil, fmt.Errorf("guard: acquire %s: %w", quoteKey(order[0].key), err)
	}
	ms := setSettings(s, len(order))
	deadline := budgetEnd(p)
	members := make([]*Lease, 0, len(order))
	for i := 0; i < len(order); {
		j := l.groupEnd(order, i, ms)
		var hs []*held
		if j-i > 1 {
			hs = l.acquireGroup(ctx, owner, section, order[i:j], ms, p, deadline)
		}
		for k := i; k < j; k++ {
			a := acquisition{caller: ctx}
			rctx := l.tel.startAcquire(ctx, &a, ms, order[k].key, string(owner))
			var le *Lease
			if hs != nil {
				le, err = l.acquireRemote(ctx, rctx, &a, hs[k-i], p, deadline)
			} else {
				le, err = l.acquireIn(ctx, rctx, &a, order[k].key, order[k].rk, owner, section, ms, p, deadline)
			}
			a.end(rctx, le, err, p)
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

// groupEnd returns the end of the group of order that starts at i: the keys after it
// that one script call may take with it (store.SetAcquirer), exclusive locks of one
// server or, on a Cluster, of one slot. i+1 when it goes alone.
func (l *Locker) groupEnd(order []setKey, i int, s *settings) int {
	sa, ok := l.st.(store.SetAcquirer)
	if !ok || s.spec != exclusiveSpec || s.syncReplicas > 0 {
		return i + 1
	}
	switch sa.SetScope() {
	case store.SetServer:
		return len(order)
	case store.SetSlot:
		j := i + 1
		for j < len(order) && order[j].slot == order[i].slot {
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

// releaseSet drops set's handle from each of its holds and gives back to Redis those it
// was the last handle of: the exclusive holds of one server (or one Cluster slot) in
// one script call (store.SetAcquirer), the others each by its own release, all at once.
// It joins their errors, in the set's order.
func (l *Locker) releaseSet(ctx context.Context, set *Lease) error {
	hs := set.set
	errs := make([]error, len(hs))
	var ends []ending
	var at []int // ends[j] is the hold hs[at[j]]
	for i, h := range hs {
		r, cause := l.dropHandle(h, set)
		if r.h == nil {
			errs[i] = cause
			continue
		}
		ends, at = append(ends, r), append(at, i)
	}
	// The work is over: end its context before the Redis calls (see releaseHold).
	set.end(errReleased)
	if len(ends) == 0 {
		return joinReleaseErrors(errs)
	}
	rctx, cancel := l.releaseCtx(ctx)
	defer cancel()
	for _, r := range ends {
		l.dog.Remove(rctx, &r.h.renewal, true)
	}
	var wg sync.WaitGroup
	for i := 0; i < len(ends); {
		j := l.releaseGroupEnd(ends, i)
		group, idx := ends[i:j], at[i:j]
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes, cerrs := l.releaseGroup(rctx, group)
			for k, r := range group {
				errs[idx[k]] = l.released(r, codes[k], cerrs[k])
			}
		}()
		i = j
	}
	wg.Wait()
	return joinReleaseErrors(errs)
}

// releaseGroupEnd returns the end of the group of ends that starts at i: the holds after
// it that one release call may give back with it (see groupEnd).
func (l *Locker) releaseGroupEnd(ends []ending, i int) int {
	sa, ok := l.st.(store.SetAcquirer)
	if !ok || ends[i].h.s.spec != exclusiveSpec {
		return i + 1
	}
	switch sa.SetScope() {
	case store.SetServer:
		return len(ends)
	case store.SetSlot:
		slot := hashSlot(ends[i].h.sh.Keys.Lock)
		j := i + 1
		for j < len(ends) && hashSlot(ends[j].h.sh.Keys.Lock) == slot {
			j++
		}
		return j
	}
	return i + 1
}

// releaseGroup gives the holds of group back to Redis, in one call when there are
// several, and returns each one's code and error as releaseRemote would (settleRelease).
// The call returns by ctx's deadline even when the client does not honour deadlines.
func (l *Locker) releaseGroup(ctx context.Context, group []ending) ([]releaseReply, []error) {
	codes, errs := make([]releaseReply, len(group)), make([]error, len(group))
	if len(group) == 1 {
		codes[0], errs[0] = l.releaseRemote(ctx, group[0].h)
		return codes, errs
	}
	sa := l.st.(store.SetAcquirer)
	shs, nonces := make([]*store.Hold, len(group)), make([]string, len(group))
	urgent := false
	for k, r := range group {
		shs[k], nonces[k] = &r.h.sh, r.h.finalNonce()
		if l.st.AutoPipelined() {
			_, q, _ := l.waits.State(r.h.sh.Keys.Channel())
			urgent = urgent || q // this process's waiters are next
		}
	}
	type reply struct {
		codes []script.Released
		err   error
	}
	call := func() reply {
		cs, err := sa.ReleaseSet(ctx, shs, nonces, urgent)
		return reply{cs, err}
	}
	var r reply
	if l.st.Inline(urgent) {
		r = call()
	} else {
		replies := make(chan reply, 1)
		if !l.background(func() { replies <- call() }) {
			replies <- call()
		}
		select {
		case r = <-replies:
		case <-ctx.Done():
			r.err = ctx.Err()
		}
	}
	for k, e := range group {
		var c releaseReply
		if r.err == nil {
			c = releaseReply(r.codes[k])
		}
		codes[k], errs[k] = l.settleRelease(e.h, c, r.err)
	}
	return codes, errs
}

// giveBack releases the keys of a set whose acquisition failed, all at once, and waits
// for their releases until the call's own deadline — the wait budget's end plus the
// grace of its last attempt (attemptGrace), or ctx's deadline if sooner, or now once ctx
// has ended — and giveBackGrace at least: on a healthy Redis, which answers within
// that, the keys are free when the call returns; on a stalled one the call's deadline
// holds, and the releases go on aside, each bounded by the ReleaseTimeout (a release
// that reaches the server when it wakes still frees its key). Without any deadline it
// waits for the releases. It returns their errors when they ended in time.
func (l *Locker) giveBack(ctx context.Context, members []*Lease, deadline time.Time) error {
	if len(members) == 0 {
		return nil
	}
	done := make(chan error, 1)
	if !l.background(func() { done <- releaseAll(ctx, members) }) {
		return releaseAll(ctx, members) // closed: the holds are lost already, and release makes no call
	}
	return awaitGiveBack(ctx, done, callDeadline(ctx, deadline))
}

// releaseAll releases members at once and joins their errors.
func releaseAll(ctx context.Context, members []*Lease) error {
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Release(ctx)
		}()
	}
	wg.Wait()
	return joinReleaseErrors(errs)
}

// callDeadline is the deadline of a call whose wait budget ends at budget (zero: none)
// under ctx: the budget plus the grace of its last attempt, or ctx's deadline if sooner,
// or now once ctx has ended; zero when there is none.
func callDeadline(ctx context.Context, budget time.Time) time.Time {
	var until time.Time
	if !budget.IsZero() {
		until = budget.Add(attemptGrace)
	}
	if d, ok := ctx.Deadline(); ok && (until.IsZero() || d.Before(until)) {
		until = d
	}
	if ctx.Err() != nil {
		until = time.Now()
	}
	return until
}

// awaitGiveBack waits for done until until (zero: no limit), giveBackGrace at least, or
// giveBackGrace after ctx ends, and returns what done delivered in time.
func awaitGiveBack(ctx context.Context, done <-chan error, until time.Time) error {
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(max(time.Until(until), giveBackGrace))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case err := <-done:
		return err
	case <-timeout:
		return nil
	case <-ctx.Done():
	}
	// The caller left: wait the grace, not the rest of the deadline.
	t := time.NewTimer(giveBackGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	case <-timeout:
	}
	return nil
}

// giveBackGrace is how long a failed set waits for its keys' releases past the call's
// deadline at most: a healthy Redis answers well within it.
const giveBackGrace = 20 * time.Millisecond

// joinReleaseErrors joins the errors of a set's releases: nil when all are nil, the
// one error when one failed.
func joinReleaseErrors(errs []error) error {
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return errors.Join(out...)
}

// hashSlot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash tag,
// the part between the first '{' and the next '}' when not empty, else of the whole key,
// modulo 16384.
func hashSlot(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				break
			}
		}
		break
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[i]]
	}
	return crc % 16384
}

// crcTable is the CRC16 (XMODEM: polynomial 0x1021, no reflection) of each byte value.
var crcTable = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()
