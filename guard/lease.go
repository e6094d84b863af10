package guard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/store"
	"github.com/guardkit/guardkit/guard/internal/watchdog"
)

// heldState is where a held record is in its life.
type heldState uint8

const (
	statePending  heldState = iota // being acquired
	stateHeld                      // held and renewed
	stateLost                      // lost; holds remain to be released
	stateReleased                  // released
)

// held is one owner's hold on one key in this process, shared by all of that owner's
// Lease handles for the key (local reentrancy).
//
// Locking: every mutable field is guarded by exactly one mutex, named at the field —
// h.mu for the lease's life (state, cause, handles, validity), the watchdog's for its
// place in the watchdog's queue — and is read and written only with that mutex held,
// even where no other goroutine could reach h any more. The Locker's l.mu guards its
// table of holds, not the holds: when both are taken, l.mu is taken first. The fields
// above the first group are fixed at creation, but for hk.owner and args.owner, which an
// acquisition that reentered a section's hold through Redis sets once, under l.mu,
// before the hold is published (Locker.rekey); the second group is written once, under
// h.mu, before ready is closed, and is read-only after.
//
// A hold reaches its Locker only through env: the arguments its scripts share with the
// Locker's other holds, and the two calls that end it (lose, release).
type held struct {
	env *holdEnv
	mu  sync.Mutex
	hk  holdKey
	s   *settings
	// sh is the hold as the store sees it: its Redis names, its terms, its boxed
	// arguments, the section its attempts were sent for (see section), and, once
	// granted, its token and a quorum's record. The hold's owner (hk.owner, and sh's) is
	// the holder's once h reentered through Redis the hold of a section that one is in
	// (Locker.rekey); the store then sends an undo for both.
	sh store.Hold

	// Written by the acquiring goroutine before the hold is published under l.mu.
	releaseNonce string // nonce of the release that ends the hold, made with the first attempt's
	// unsure is the nonce of the last attempt when its outcome is unknown (the call
	// failed, but the script may have run): the next attempt is sent with it, and a wait
	// that ends without one undoes it (Locker.settleUnsure). unsureErr is its error.
	unsure    string
	unsureErr error
	// pre is the outcome of the hold's first attempt when a set's script call made it
	// for several holds (AcquireAll), with its nonce and when it was sent: the first
	// attempt of the hold's wait takes it instead of calling Redis.
	pre      *store.Grant
	preNonce string
	preSent  time.Time

	// Written under h.mu before ready is closed, read-only after (and sh.Token, sh.Q).
	acquired time.Time // when the winning attempt was sent
	tel      heldTelemetry

	// Guarded by h.mu.
	ready      chan struct{} // closed when the acquisition ended, either way; made by the first goroutine to wait on it
	state      heldState
	cause      error       // why the lease ended, once lost or released
	handles    []*Lease    // handles not yet released
	handle0    [1]*Lease   // handles' first backing array
	lease0     Lease       // the first handle, made with h: no allocation of its own
	made0      bool        // lease0 was handed out
	validUntil time.Time   // local validity deadline
	timer      *time.Timer // fires at validUntil
	// due is validUntil as a monoNow reading while the hold is held, 0 after: read
	// without h.mu by every check of the lease (overdue), so that a check made after the
	// deadline sees the loss whether or not the timer has run.
	due atomic.Int64
	// lost is the loss's cause from the moment lose decides it, before it has told the
	// handles: a check of the lease made meanwhile (Err, the lease's contexts) reads it
	// without h.mu and reports the loss then, not once lose has got round to it.
	lost     atomic.Pointer[LeaseLostError]
	renewErr error // last renewal error, cleared by a successful renewal

	// renewal is h's place in the watchdog's queue, guarded by the watchdog.
	renewal watchdog.Entry[*held]
}

// holdEnv is what the holds of one Locker share (see held).
type holdEnv struct {
	nonce func() string
	// gone reports whether h is no longer the Locker's record of its owner's hold
	// (Locker.gone); repaired records that a quorum took h back on server (telemetry).
	gone     func(h *held) bool
	repaired func(h *held, server string)
	// lose ends a held lease (Locker.lose); release drops one of its handles and gives
	// the hold back to Redis with the last (Locker.releaseHold).
	lose       func(h *held, reason string, err error)
	release    func(ctx context.Context, h *held, le *Lease) error
	releaseSet func(ctx context.Context, set *Lease) error // a set's Release (Locker.releaseSet)
}

// section is the owner h's attempts were sent for.
func (h *held) section() ctxid.ID { return ctxid.ID(h.sh.Section) }

// Gone reports whether h is no longer its owner's hold (store.Ref).
func (h *held) Gone() bool { return h.env.gone(h) }

// Repaired records that a quorum took h back on server (store.Ref).
func (h *held) Repaired(server string) { h.env.repaired(h, server) }

// Left is how long h's validity deadline, the TTL less the drift margin from its last
// grant or renewal, is ahead (store.Ref): while it is, its hold has not expired in Redis.
func (h *held) Left() time.Duration {
	h.mu.Lock()
	v := h.validUntil
	h.mu.Unlock()
	return time.Until(v)
}

// hold records a successful acquisition, starts the lease's clocks and hands it to the
// watchdog. h.mu is held.
func (h *held) hold(g granted, dog *watchdog.Dog[*held]) {
	h.sh.Token, h.sh.Q = g.token, g.q
	h.acquired = g.sent
	h.state = stateHeld
	h.validUntil = h.validity(g.sent, h.s.ttl)
	h.due.Store(monoAt(h.validUntil))
	h.timer = time.AfterFunc(time.Until(h.validUntil), h.expire)
	dog.Add(&h.renewal, h, g.sent)
}

// holdLimit is when MaxHold ends the lease, zero when there is no limit.
func (h *held) holdLimit() time.Time {
	if h.s.maxHold <= 0 {
		return time.Time{}
	}
	return h.acquired.Add(h.s.maxHold)
}

// validity is the local deadline after a successful call sent at sent that set the TTL
// to ttl.
func (h *held) validity(sent time.Time, ttl time.Duration) time.Time {
	v := sent.Add(ttl - h.s.driftMargin())
	if lim := h.holdLimit(); !lim.IsZero() && lim.Before(v) {
		v = lim
	}
	return v
}

// renewed moves the validity deadline after a successful renewal.
func (h *held) renewed(sent time.Time, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateHeld {
		return
	}
	h.renewErr = nil
	if v := h.validity(sent, ttl); v.After(h.validUntil) {
		h.validUntil = v
		h.due.Store(monoAt(v))
		h.timer.Reset(time.Until(v))
	}
}

// renewFailed records a transient renewal error, reported if validity runs out.
func (h *held) renewFailed(err error) {
	h.mu.Lock()
	h.renewErr = err
	h.mu.Unlock()
}

// overdue ends the lease at once when its validity deadline has passed, without waiting
// for the validity timer: a process that was stopped (SIGSTOP, a VM pause, a long GC)
// past the deadline runs code before it runs timers, and whatever it asks the lease then
// must not hear that it is still held. It costs an atomic load and a clock read.
func (h *held) overdue() {
	if d := h.due.Load(); d != 0 && monoNow() >= d {
		h.expire()
	}
}

// lostNow returns the cause of h's loss once lose has decided it (see held.lost), even
// while lose is still telling the handles; nil while h is held. It costs an atomic load.
func (h *held) lostNow() *LeaseLostError {
	h.overdue()
	return h.lost.Load()
}

// expire runs when the validity timer fires, or when a check finds the deadline passed.
func (h *held) expire() {
	h.mu.Lock()
	if h.state != stateHeld || time.Now().Before(h.validUntil) {
		h.mu.Unlock() // renewed meanwhile, or already over
		return
	}
	reason, err := "validity expired without renewal", h.renewErr
	if lim := h.holdLimit(); !lim.IsZero() && !time.Now().Before(lim) {
		reason, err = "hold time limit reached", nil
	}
	h.mu.Unlock()
	h.env.lose(h, reason, err)
}

// lose ends a held lease: its contexts are cancelled with a *LeaseLostError, renewal
// stops and the owner's next acquisition of the key starts afresh in Redis.
func (l *Locker) lose(h *held, reason string, err error) {
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return
	}
	lost := &LeaseLostError{Key: h.hk.key, Reason: reason, Err: err}
	h.lost.Store(lost) // before due goes: a check between the two must see one or the other
	h.state = stateLost
	h.due.Store(0)
	h.cause = lost
	h.timer.Stop()
	handles := append([]*Lease(nil), h.handles...)
	h.mu.Unlock()
	l.forget(h)
	l.dog.Remove(context.Background(), &h.renewal, false)
	// Telemetry first: once the work's context is done, the loss is on its span and in
	// the counters for whoever looks (the work may end the span at once).
	l.tel.ended(h, lost)
	for _, le := range handles {
		le.end(lost)
	}
}

// forget removes h, lost or released, from the table of holds, unless another hold of
// the owner has taken its place meanwhile. Until then an acquisition that finds h there
// passes it over (see heldIn).
func (l *Locker) forget(h *held) {
	l.mu.Lock()
	if l.held[h.hk] == h {
		delete(l.held, h.hk)
	}
	l.mu.Unlock()
}

// isHeld reports whether h is held.
func (h *held) isHeld() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == stateHeld
}

// lostCause returns why the lease was lost, or nil when it was not.
func (h *held) lostCause() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == stateLost || h.state == stateReleased && h.cause != errReleased {
		return h.cause
	}
	return nil
}

// newLease makes a Lease handle on h. h.mu is held and h is held.
func (h *held) newLease(parent context.Context, reentrant bool) *Lease {
	le := &h.lease0
	if h.made0 {
		le = &Lease{}
	}
	h.made0 = true
	le.h, le.parent, le.reentrant = h, parent, reentrant
	if h.handles == nil {
		h.handles = h.handle0[:0]
	}
	h.handles = append(h.handles, le)
	return le
}

// end ends the lease with cause, once: its Context, if made, is cancelled with it.
func (le *Lease) end(cause error) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.cause != nil {
		return
	}
	le.cause = cause
	if le.cancel != nil {
		le.cancel(cause)
	}
}

// Lease is one hold on a lock. It is safe for concurrent use.
//
// Its Context ends when the lease is lost or released: guarded work should run under it
// (or under a context from Bind) so that it stops when exclusivity ends. Every Lease must
// be released, including reentrant ones; Release is idempotent.
type Lease struct {
	h         *held
	parent    context.Context // the context acquired with: its values are the lease's
	reentrant bool
	set       []*held  // a set's holds (AcquireAll), in canonical order, h first; nil for one key
	sec       ctxid.ID // the section a set's holds were acquired for

	// The lease's context is made on the first call of Context or Bind: a Lease used
	// only to hold and release a lock never needs one.
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
	cause  error // why the lease ended; nil while held

	once sync.Once
	err  error
}

// Key returns the lock key; of a lease on several keys (AcquireAll), the first of Keys.
func (le *Lease) Key() string { return le.h.hk.key }

// Kind returns the lock's kind: KindExclusive unless the lease was acquired with Read,
// Write, Permits or Fair.
func (le *Lease) Kind() Kind { return le.h.hk.kind }

// Owner returns the section that holds the lock: for a fresh hold, a new section made
// directly in the owner of the context Acquire was called with (ctxid.Section); for a
// reentrant lease, the section that held the lock already, which the caller is in.
//
// The keys of a lease acquired with AcquireAll are held by one section, made directly in
// the owner of its context, which Owner returns; a key the owner held already is held by
// its holder, a section the returned one is in.
func (le *Lease) Owner() ctxid.ID {
	if le.set != nil {
		return le.sec
	}
	return le.h.hk.owner
}

// Token returns the fencing token: strictly greater than every token issued before for
// this key, and the same for every reentrant hold of one acquisition. Of a lease on
// several keys it is the first key's: see Tokens. Pass it to the
// storage the guarded work writes, and have the storage reject writes with a token lower
// than the highest it has seen: that is what keeps a paused or partitioned former holder
// from overwriting newer data after its lease ran out.
func (le *Lease) Token() int64 { return le.h.sh.Token }

// Reentrant reports whether the owner already held the lock when this Lease was made,
// in this process or, through Redis, in another one.
func (le *Lease) Reentrant() bool { return le.reentrant }

// Context returns a context that carries the owner and the Lease (see LeaseFromContext)
// and ends when the lease is lost (cause: a *LeaseLostError matching ErrLeaseLost) or
// released (cause: an error reading "guard: lease released", which matches no sentinel;
// a cause that is not ErrLeaseLost means the lease was released). It carries the values
// of the context the lease was acquired with, but not its cancellation.
//
// Its Err and Done read the validity deadline when they are called: once ValidUntil has
// passed without a renewal, they report the loss at that call, even when the process was
// stopped past the deadline and its timers have not run yet. Contexts derived from it
// (context.WithTimeout and the like) learn of the loss when it is announced, by such a
// call or by the validity timer.
func (le *Lease) Context() context.Context {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.ctx == nil {
		parent := le.parent
		if id, ok := ctxid.FromContext(parent); !ok || !id.Within(le.Owner()) {
			parent = ctxid.Enter(parent, le.Owner()) // the section made by Acquire
		} // else a reentry: keep the caller's section, within the holder's
		ctx := context.WithValue(context.WithoutCancel(parent), leaseKey{}, le)
		var inner context.Context
		inner, le.cancel = context.WithCancelCause(ctx)
		le.ctx = &leaseCtx{Context: inner, le: le}
		if le.cause != nil {
			le.cancel(le.cause)
		}
	}
	return le.ctx
}

// leaseCtx is the context of a lease (Context, Bind): its Err and Done first end the
// lease if its validity deadline has passed (held.overdue). Done returns the inner
// context's channel and Value reaches the inner context, so context.Cause and the
// contexts derived from it work as on the inner one, without a goroutine each.
type leaseCtx struct {
	context.Context
	le *Lease
	// bound ends a Bind context with the lease's cause at once, where the lease's end
	// reaches it otherwise through a context.AfterFunc goroutine; nil for Context's.
	bound context.CancelCauseFunc
}

func (c *leaseCtx) Done() <-chan struct{} {
	c.check()
	return c.Context.Done()
}

func (c *leaseCtx) Err() error {
	c.check()
	return c.Context.Err()
}

func (c *leaseCtx) check() {
	if lost := c.le.lostNow(); lost != nil {
		c.le.end(lost) // at once, if lose has not reached this handle yet
	}
	if c.bound != nil {
		if cause := c.le.ended(); cause != nil {
			c.bound(cause)
		}
	}
}

// Err returns nil while the lease is held, and context.Cause of its Context after. It
// reads the validity deadline when called: once ValidUntil has passed without a
// renewal, it returns the lease's *LeaseLostError, even when the process was stopped
// past the deadline and the validity timer has not run yet.
func (le *Lease) Err() error {
	if lost := le.lostNow(); lost != nil {
		le.end(lost) // at once, if lose has not reached this handle yet
	}
	return le.ended()
}

// ended returns why the lease ended, nil while it is held.
func (le *Lease) ended() error {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.cause
}

// ValidUntil returns the local validity deadline: the time, on this process's monotonic
// clock, until which the lock is known to be held. It moves forward with each renewal.
// Of a lease on several keys it is the earliest of their deadlines.
func (le *Lease) ValidUntil() time.Time {
	if le.set == nil {
		return le.h.valid()
	}
	v := le.h.valid()
	for _, h := range le.set[1:] {
		if u := h.valid(); u.Before(v) {
			v = u
		}
	}
	return v
}

// valid returns h's validity deadline.
func (h *held) valid() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.validUntil
}

// Bind returns a context derived from ctx that carries the owner and the Lease and is
// cancelled, with the lease's cause, when the lease ends. Like Context's, its Err and
// Done read the validity deadline when called. Call the returned function when done
// with it.
func (le *Lease) Bind(ctx context.Context) (context.Context, context.CancelFunc) {
	if id, ok := ctxid.FromContext(ctx); !ok || !id.Within(le.Owner()) {
		ctx = ctxid.Enter(ctx, le.Owner())
	} // else keep ctx's owner as it is (a section within the holder's), with its hop count
	ctx = context.WithValue(ctx, leaseKey{}, le)
	ctx, cancel := context.WithCancelCause(ctx)
	lctx := le.Context()
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	return &leaseCtx{Context: ctx, le: le, bound: cancel}, func() {
		stop()
		cancel(context.Canceled)
	}
}

// Release drops this hold. The last hold of the owner in this process releases the lock
// in Redis, with ctx's values but not its cancellation (a cancelled request still frees
// its lock), bounded by the ReleaseTimeout option. Later calls return the first result.
//
// It returns nil when the hold was dropped; the lease's *LeaseLostError (ErrLeaseLost)
// when the lease had been lost; an error matching ErrExpired when the lock had expired in
// Redis, ErrNotHeld when another owner holds it now, ErrUnavailable when Redis could not
// be reached (the lock then expires after its TTL).
//
// A lease on several keys releases them all at once and returns their errors joined
// (errors.Join): an error matching ErrLeaseLost names the key that was lost.
func (le *Lease) Release(ctx context.Context) error {
	le.once.Do(func() {
		if le.set == nil {
			le.err = le.h.env.release(ctx, le.h, le)
			return
		}
		le.err = le.h.env.releaseSet(ctx, le)
	})
	return le.err
}

type leaseKey struct{}

// LeaseFromContext returns the innermost Lease carried by ctx; its Token is the fencing
// token to pass to storage.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	le, ok := ctx.Value(leaseKey{}).(*Lease)
	return le, ok
}
