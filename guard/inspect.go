package guard

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// inspectScript reads one lock (inspect.lua); it writes nothing and runs as read-only
// (runReadOnly), so that reading needs no more than read-only credentials.
var inspectScript = script.New("no-writes", script.Inspect)

// maxWaitersRead bounds the entries Inspect reads of each wait queue.
const maxWaitersRead = 1000

// LockState is what Redis holds for one lock, as Inspect and List read it: who holds it,
// who waits for it, and its fence, in one consistent view of the server that keeps it.
// Durations are the server's; nothing is locked or changed by reading them.
type LockState struct {
	// Key is the lock's key, as given to Acquire.
	Key string
	// Kind is the lock's kind: KindExclusive, KindSemaphore, KindFair, or, for the two
	// modes of a read-write lock, KindWrite while a writer holds it and KindRead
	// otherwise (each Holder says its own mode).
	Kind Kind
	// Holders are the owners holding the lock: one for an exclusive or fair lock or a
	// writer, any number of readers or permit holders; none when the lock is free.
	Holders []Holder
	// Waiters are the waiting, in the order they are served: for a fair lock its queued
	// owners; for the other kinds the Lockers (processes) queued in Redis, one entry per
	// process however many of its goroutines wait. Lockers that only try (TryAcquire)
	// never queue. At most 1,000 are read.
	Waiters []Waiter
	// WriterWaiting is, for a read-write lock, how long a waiting writer's mark keeps new
	// readers out unless the writer asks again (it asks within a third of its TTL); 0
	// when no writer waits.
	WriterWaiting time.Duration
	// Contended reports that someone had to wait for the current hold.
	Contended bool
	// Fence is the last fencing token issued for the key that Redis still shows: the
	// higher of the key's fence record (kept FenceRetention after the last grant or
	// release) and its live holders' tokens, so never below a holder's token. Every later
	// hold's token exceeds it. 0 when nobody holds the lock and its fence record has
	// expired. On a quorum Locker's majority view, the token that every majority's next
	// one exceeds.
	Fence int64
	// Time is the server's clock when the state was read.
	Time time.Time
	// Server is the address of the server read, in a quorum Locker's per-server views;
	// "" otherwise.
	Server string
	// Servers are, for a quorum Locker (NewQuorum), each server's own view, in the order
	// of the clients given to NewQuorum; the LockState itself is then the majority's
	// view: the holders that a majority of servers hold, each with the time left on the
	// majority. Nil for other Lockers.
	Servers []*LockState
	// Err is, in a quorum Locker's per-server views, why that server could not be read;
	// for a lock that List returns although another data layout wrote it, its
	// *LayoutError (its holders and waiters are then not read: see List); nil otherwise.
	Err error
}

// Holder is one owner's hold on a lock.
type Holder struct {
	// Owner is the owner ID holding the lock (see package ctxid).
	Owner ctxid.ID
	// Kind is the hold's mode: KindRead or KindWrite on a read-write lock, else the lock's kind.
	Kind Kind
	// Holds is the owner's hold count in Redis (reentries through other processes; a
	// Locker counts its own nested holds in memory, as one hold in Redis).
	Holds int
	// Token is the hold's fencing token.
	Token int64
	// TTL is the time left on the hold's lease in Redis, renewed by its holder's watchdog.
	TTL time.Duration
	// AcquiredAt is when the hold was granted, read from its token: a new token is the
	// server's clock in microseconds, or one more than the key's last token when that is
	// ahead — on a quorum Locker, the proposing Locker's clock, which a server takes only
	// within a tenth of the TTL of its own (see NewQuorum). Zero when the token is ahead
	// of the server's clock now (a clock stepped back since).
	AcquiredAt time.Time
	// Locker is the ID of the Locker holding the lock (see Locker.ID), from its Label, or
	// this Locker's when Local; "" when unknown (a hold made without Label elsewhere).
	Locker string
	// Label is the text of the hold's Label, "" when it has none.
	Label string
	// TraceID is the trace of the acquiring request, when the hold has a Label and its
	// context carried a span: hex, as tracing systems show it.
	TraceID string
	// Local reports that this Locker holds the lock: its Inspect was asked by the holding
	// process.
	Local bool
	// Granted reports a fair lock granted to Owner by a release and not yet claimed: its
	// waiter is being woken to take it, within its TTL.
	Granted bool
}

// Waiter is one entry of a lock's wait queue.
type Waiter struct {
	// Locker is the ID of the waiting Locker (see Locker.ID).
	Locker string
	// Owner is, for a fair lock, the owner waiting; "" for the other kinds, whose queue
	// names processes.
	Owner ctxid.ID
	// TTL is, for a fair lock, how long the owner keeps its place unless it asks again.
	TTL time.Duration
	// Local reports that Locker is this Locker.
	Local bool
}

// ID returns the Locker's random ID, under which it queues for locks in Redis and which
// labels its holds: what Inspect's Holder.Locker and Waiter.Locker name. Log it at start
// to tell, later, which process a waiter or a holder is.
func (l *Locker) ID() string { return l.id }

// Inspect reads what Redis holds for the lock named key: its holders, its waiters and
// its fence. The kind is chosen as for Acquire (Read or Write for the read-write lock,
// Permits, Fair; exclusive by default); other options are ignored. It makes one script
// call that writes nothing (one per server on a quorum Locker, which reports each
// server's view and the majority's), takes no lock and may be called from any process.
//
// Each kind of one key is a lock of its own in Redis (see Kind): Inspect of the exclusive
// lock "doc:1" finds it free while a read lock "doc:1" is held. When the kind is not
// known, InspectKinds reads them all. Keys longer than MaxKeyLen are read too: that
// bound is on what acquisitions store, and a lock that exists was stored by some Locker.
//
// The script runs as read-only (EVALSHA_RO, flag no-writes; EVALSHA on Redis 6.2, which
// has no _RO commands), so that an ACL user with +@read +evalsha_ro +eval_ro can read.
//
// Errors: ErrInvalidKey, ErrInvalidConfig, ErrClosed, and a *RedisError
// (ErrUnavailable) when the server could not be read — on a quorum Locker, when fewer
// than a majority could, its Err saying what each server answered. A lock another
// version of guardkit wrote in another data layout, held or released, fails the read
// with a *RedisError whose Err is a *LayoutError (errors.Is ErrLayout) rather than show
// its fields read as this layout's (which could call a held lock free); on a quorum
// Locker, when a majority of the servers show such a lock.
func (l *Locker) Inspect(ctx context.Context, key string, opts ...Option) (*LockState, error) {
	r, _, err := l.inspectReq(key, opts, "Inspect")
	if err != nil {
		return nil, err
	}
	states, _, err := l.read(ctx, "inspect", []inspectReq{r}, l.readStates)
	if err != nil {
		return nil, err
	}
	return states[0], nil
}

// InspectKinds reads the lock named key of every kind at once — exclusive, read-write,
// semaphore, fair — for a caller that does not know which kind the key is used as, and
// returns one state per kind in that order (the read-write lock's Kind is KindWrite
// while a writer holds it, else KindRead; a quorum Locker reports a fair lock, which it
// does not serve, as free). Each kind of a key is a lock of its own in Redis (see Kind),
// so a key is in use as the kinds whose states have Holders, Waiters or WriterWaiting;
// a key used as more than one kind shows several. It makes one pipelined call per server
// (the kinds' keys share a hash tag: one Cluster node holds them all), reads as Inspect
// does, and has its errors.
func (l *Locker) InspectKinds(ctx context.Context, key string) ([]*LockState, error) {
	if key == "" {
		return nil, invalidKey(key, "empty")
	}
	if l.isClosed() {
		return nil, ErrClosed
	}
	kinds := []*kindSpec{exclusiveSpec, readSpec, semaphoreSpec, fairSpec}
	reqs := make([]inspectReq, len(kinds))
	for i, k := range kinds {
		rk, err := l.readKeys(key, k)
		if err != nil {
			return nil, err
		}
		reqs[i] = inspectReq{key: key, spec: k, rk: rk}
	}
	states, _, err := l.read(ctx, "inspect", reqs, l.readStates)
	if err != nil {
		return nil, err
	}
	return states, nil
}

func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// inspectReq is one lock to read.
type inspectReq struct {
	key  string
	spec *kindSpec
	rk   redisKeys
}

func (r inspectReq) keys() []string { return r.rk.List() }

// readStates reads reqs from c in one pipeline; a state whose read failed has its Err set.
func (l *Locker) readStates(ctx context.Context, c *store.Conn, reqs []inspectReq) []*LockState {
	keys := make([][]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.keys()
	}
	replies := c.ReadOnly(ctx, inspectScript, keys, []any{maxWaitersRead})
	out := make([]*LockState, len(reqs))
	for i, r := range reqs {
		st := &LockState{Key: r.key, Kind: r.spec.kind}
		if st.Err = replies[i].Err; st.Err == nil {
			st.Err = l.parseState(st, r, replies[i].V)
		}
		out[i] = st
	}
	return out
}

// parseState fills st from inspect.lua's reply.
func (l *Locker) parseState(st *LockState, r inspectReq, reply any) error {
	v, ok := reply.([]any)
	if !ok || len(v) < 5 {
		return fmt.Errorf("guard: inspect: unexpected reply %v", reply)
	}
	// No server time: a user who may not call TIME read a lock none of whose keys
	// exists (see inspect.lua's server_time), so nothing depends on the clock.
	nowUs := time.Now().UnixMicro()
	if v[0] != nil {
		var err error
		if nowUs, err = serverTime(v[0]); err != nil {
			return err
		}
	}
	st.Time = time.UnixMicro(nowUs)
	fields := map[string]string{}
	if kv, _ := v[1].([]any); len(kv)%2 == 0 {
		for i := 0; i < len(kv); i += 2 {
			fields[fmt.Sprint(kv[i])] = fmt.Sprint(kv[i+1])
		}
	}
	st.Fence = leadingNumber(v[3])
	if err := otherLayout(r.key, fields); err != nil {
		// Another version's data: its fields mean what its layout says, and read as this
		// one's they would show a held lock free. Its fence record leads with the last
		// token in every layout that has one.
		return err
	}
	st.Contended = fields["#w"] == "1"
	var aux, aux2 []any
	if len(v) > 5 {
		aux, _ = v[5].([]any)
	}
	if len(v) > 6 {
		aux2, _ = v[6].([]any)
	}
	fillHolders(st, r.spec, fields, aux, aux2, nowUs/1000)
	for i := range st.Holders {
		if h := &st.Holders[i]; h.Token > 0 && h.Token <= nowUs {
			h.AcquiredAt = time.UnixMicro(h.Token)
		}
	}
	raiseFence(st)
	if q, _ := v[4].([]any); r.spec.kind != KindFair {
		for _, id := range q {
			st.Waiters = append(st.Waiters, Waiter{Locker: fmt.Sprint(id)})
		}
	}
	l.markLocal(st, r)
	return nil
}

// fillHolders fills st's holders, waiters of a fair lock and mode of a read-write lock
// from the lock's hash fields and the kind's extra replies (aux, aux2), at the server's
// time nowMs.
func fillHolders(st *LockState, spec *kindSpec, fields map[string]string, aux, aux2 []any, nowMs int64) {
	switch spec.kind {
	case KindExclusive, KindFair:
		st.Holders = holdersOfHash(fields, spec.kind, nowMs)
		if spec.kind == KindFair {
			st.Waiters = fairWaiters(aux, aux2, nowMs)
		}
		return
	}
	live := leases(fields, nowMs)
	st.Holders = holdersOfShares(fields, spec, live)
	if until, err := strconv.ParseInt(fields["#ww"], 10, 64); err == nil && until > nowMs {
		st.WriterWaiting = time.Duration(until-nowMs) * time.Millisecond
	}
	if _, ok := live["#W"]; ok && spec != semaphoreSpec {
		st.Kind = KindWrite
	} else if spec != semaphoreSpec {
		st.Kind = KindRead
	}
}

// raiseFence makes st's fence at least each live holder's token: the fence record
// expires FenceRetention after the last grant or release, and a hold may outlive it (a
// hold renewed longer than that); its token was issued all the same, and every later
// token exceeds it (a new token is one more than the last recorded, and never below the
// server's clock, which a token in microseconds was drawn from).
func raiseFence(st *LockState) {
	for _, h := range st.Holders {
		st.Fence = max(st.Fence, h.Token)
	}
}

// serverTime returns the reply of TIME in microseconds.
func serverTime(reply any) (int64, error) {
	clock, _ := reply.([]any)
	if len(clock) != 2 {
		return 0, fmt.Errorf("guard: inspect: unexpected server time %v", reply)
	}
	sec, err1 := strconv.ParseInt(fmt.Sprint(clock[0]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(clock[1]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("guard: inspect: unexpected server time %v", reply)
	}
	return sec*1e6 + usec, nil
}

// leadingNumber returns the number that the fence's value starts with, 0 for none.
func leadingNumber(reply any) int64 {
	f, _ := reply.(string)
	end := 0
	for end < len(f) && f[end] >= '0' && f[end] <= '9' {
		end++
	}
	n, _ := strconv.ParseInt(f[:end], 10, 64)
	return n
}

// holdersOfHash returns the holder of an exclusive or fair lock's hash (its fields #o,
// #e, #n, #t, #l and #g, see acquire.lua) at the server's time nowMs: none once the
// hold's lease (#e) has run out.
func holdersOfHash(fields map[string]string, k Kind, nowMs int64) []Holder {
	o := fields["#o"]
	until, _ := strconv.ParseInt(fields["#e"], 10, 64)
	if o == "" || until <= nowMs {
		return nil
	}
	token := fields["#t"] // a quorum's confirmed token (#tq) is written here too (raise.lua)
	h := Holder{Owner: ctxid.ID(o), Kind: k, TTL: time.Duration(until-nowMs) * time.Millisecond, Granted: fields["#g"] == o}
	h.Holds, _ = strconv.Atoi(fields["#n"])
	h.Token, _ = strconv.ParseInt(token, 10, 64)
	h.Locker, h.Label, h.TraceID = parseLabel(fields["#l"])
	return []Holder{h}
}

// leases returns the holds of a read-write lock's or a semaphore's hash whose leases
// have not run out at the server's time nowMs, with the time left on each: a share is
// its owner's field (owners have no '#'), "<count> <lease end> <nonces>" (see
// share), the writer's lease is "#We", listed as "#W" while #W names a writer (see
// kinds/lib.lua).
func leases(fields map[string]string, nowMs int64) map[string]time.Duration {
	out := map[string]time.Duration{}
	for f, v := range fields {
		var until int64
		switch {
		case f == "#We" && fields["#W"] != "":
			f = "#W"
			until, _ = strconv.ParseInt(v, 10, 64)
		case f == "" || strings.IndexByte(f, '#') >= 0:
			continue
		default:
			_, until = share(v)
		}
		if left := until - nowMs; left > 0 {
			out[f] = time.Duration(left) * time.Millisecond
		}
	}
	return out
}

// share returns the hold count and the lease end (server ms) of a share's field value,
// "<count> <lease end> <nonces>" (kinds/lib.lua); zeros when it is not one.
func share(v string) (holds int, until int64) {
	n, rest, _ := strings.Cut(v, " ")
	e, _, _ := strings.Cut(rest, " ")
	holds, _ = strconv.Atoi(n)
	until, _ = strconv.ParseInt(e, 10, 64)
	return holds, until
}

// holdersOfShares returns the holders of a read-write lock or a semaphore: those of its
// hash whose leases (see leases) have not run out.
func holdersOfShares(fields map[string]string, spec *kindSpec, live map[string]time.Duration) []Holder {
	var hs []Holder
	if w, ok := fields["#W"]; ok {
		if ttl, ok := live["#W"]; ok {
			h := Holder{Owner: ctxid.ID(w), Kind: KindWrite, TTL: ttl}
			h.Holds, _ = strconv.Atoi(fields["#Wn"])
			h.Token = tokenField(fields, "#t")
			h.Locker, h.Label, h.TraceID = parseLabel(fields["#Wl"])
			hs = append(hs, h)
		}
	}
	k := spec.kind
	if k == KindWrite {
		k = KindRead
	}
	for f, n := range fields {
		ttl, ok := live[f]
		if strings.IndexByte(f, '#') >= 0 || !ok {
			continue
		}
		h := Holder{Owner: ctxid.ID(f), Kind: k, TTL: ttl}
		h.Holds, _ = share(n)
		h.Token = tokenField(fields, f+"#t")
		h.Locker, h.Label, h.TraceID = parseLabel(fields[f+"#l"])
		hs = append(hs, h)
	}
	return hs
}

// tokenField returns the token in field f, or in its confirmed copy (a quorum's).
func tokenField(fields map[string]string, f string) int64 {
	v, ok := fields[f+"q"]
	if !ok {
		v = fields[f]
	}
	t, _ := strconv.ParseInt(v, 10, 64)
	return t
}

// fairWaiters returns a fair lock's queued owners whose places have not lapsed.
func fairWaiters(owners, entries []any, nowMs int64) []Waiter {
	var ws []Waiter
	for i, o := range owners {
		if i >= len(entries) || entries[i] == nil {
			continue
		}
		// "<deadline ms> <TTL ms> <Locker ID>"
		parts := strings.SplitN(fmt.Sprint(entries[i]), " ", 3)
		if len(parts) != 3 {
			continue
		}
		deadline, _ := strconv.ParseInt(parts[0], 10, 64)
		if deadline <= nowMs {
			continue
		}
		ws = append(ws, Waiter{Locker: parts[2], Owner: ctxid.ID(fmt.Sprint(o)), TTL: time.Duration(deadline-nowMs) * time.Millisecond})
	}
	return ws
}

// markLocal marks the holds and the waiters of this Locker, and sorts the holders by
// owner, the writer first.
func (l *Locker) markLocal(st *LockState, r inspectReq) {
	l.mu.Lock()
	for i := range st.Holders {
		h := &st.Holders[i]
		local := l.held[holdKey{key: r.key, owner: h.Owner, kind: h.Kind}]
		if local != nil && local.isHeld() || h.Locker == l.id {
			h.Local = true
			h.Locker = l.id
		}
	}
	l.mu.Unlock()
	for i := range st.Waiters {
		st.Waiters[i].Local = st.Waiters[i].Locker == l.id
	}
	sort.Slice(st.Holders, func(i, j int) bool {
		a, b := st.Holders[i], st.Holders[j]
		if (a.Kind == KindWrite) != (b.Kind == KindWrite) {
			return a.Kind == KindWrite
		}
		return a.Owner < b.Owner
	})
}

// readKeys builds the Redis names of key's lock of kind k for an operator's call
// (Inspect, List, ForceRelease), without MaxKeyLen's bound. That bound keeps what an
// acquisition stores in check; a lock that exists was stored by some Locker, whatever
// its MaxKeyLen, and an operator must be able to read it and end it: a Locker of the
// default settings (the guardkit command's) would otherwise never see it.
func (l *Locker) readKeys(key string, k *kindSpec) (redisKeys, error) {
	s := l.cfg
	s.maxKeyLen = math.MaxInt
	return s.redisKeys(key, k)
}

// inspectReq checks key and opts for an operator's call named where (Inspect,
// ForceRelease) and returns what the call reads or writes, with the call's settings.
func (l *Locker) inspectReq(key string, opts []Option, where string) (inspectReq, *settings, error) {
	s, err := l.callSettings(opts, where)
	if err != nil {
		return inspectReq{}, nil, err
	}
	rk, err := l.readKeys(key, s.spec)
	if err != nil {
		return inspectReq{}, nil, err
	}
	if l.isClosed() {
		return inspectReq{}, nil, ErrClosed
	}
	return inspectReq{key: key, spec: s.spec, rk: rk}, s, nil
}
