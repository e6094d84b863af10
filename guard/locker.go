package guard

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/store"
	"github.com/guardkit/guardkit/guard/internal/watchdog"
)

var (
	acquireScript = script.Acquire
	releaseScript = script.Release
	renewScript   = script.Renew
)

// Locker hands out leases on Redis locks. It is safe for concurrent use; create one per
// Redis deployment and share it. Its zero value is not usable: call New.
//
// A Locker keeps, per process, a table of the leases it holds, a Pub/Sub subscription
// that wakes waiters when a lock is released (one connection for all keys; on a Redis 7
// Cluster, one sharded connection per primary waited on, however many keys), one
// watchdog that renews every held lease in pipelined batches and, while it holds
// leases, one Pub/Sub connection per server on which force releases are announced.
type Locker struct {
	st     store.Store // the Redis side: one deployment (store.Single) or a quorum of servers (store.Quorum)
	cfg    settings
	id     string        // random ID of this Locker in the Redis wait queues
	idArg  any           // id, boxed once for the scripts
	nonce  string        // prefix of attempt and release nonces: id + "."
	seq    atomic.Uint64 // suffix of nonces
	done   chan struct{} // closed by Close
	mu     sync.Mutex
	held   map[holdKey]*held // leases held or being acquired, by key and owner
	closed bool

	waits *feed.Hub
	dog   *watchdog.Dog[*held]
	env   *holdEnv // what its holds share (lease.go)
	tel   *telemetry
	hints holdTimes  // hold times seen, for LockedError.RetryAfter (hint.go)
	graph *graph     // the wait-for graph its waits' deadlock detectors walk (deadlock.go)
	aside aside      // background calls: compensating releases, abandoned attempts
	force forceWatch // listening for force releases of its holds (forced.go)
}

// maxOwnerLen bounds owner IDs set by callers with ctxid.NewContext: a root of up to 128
// bytes and ctxid.MaxDepth sections of 9 (ctxid.New makes 22-byte roots). '#' is refused
// too: it separates an owner from its fields in Redis.
const maxOwnerLen = 128 + 9*ctxid.MaxDepth

// holdKey identifies the holds of one owner on one key in this process.
type holdKey struct {
	key   string
	owner ctxid.ID
	kind  Kind
}

// New returns a Locker that keeps its locks in client, which may be a *redis.Client, a
// *redis.ClusterClient, a failover client or a *redis.Ring (all keys of one lock share a
// hash tag). It fails with a *ConfigError when an option is invalid.
//
// New makes no Redis call, so a Redis that cannot be reached is first noticed by the
// calls that need it. To fail at start-up instead, call Ping after New, with a deadline:
//
//	l, err := guard.New(client)
//	...
//	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
//	defer cancel()
//	if err := l.Ping(ctx); err != nil {
//		l.Close()
//		return err
//	}
//
// Redis 6.2 or newer is required. A client with ContextTimeoutEnabled lets context
// deadlines cut Redis calls short; without it a call on a stalled server lasts up to the
// client's read timeout. client may also be go-redis's auto-pipelining client (a
// *redis.AutoPipeliner): see "Waiting" in the package documentation for which calls
// join its batches.
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, &ConfigError{Field: "client", Reason: "must not be nil"}
	}
	return newLocker(store.NewSingle(client), "New", opts)
}

// newLocker makes a Locker on st, for the constructor named where.
func newLocker(st store.Store, where string, opts []Option) (*Locker, error) {
	var b [9]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("guard: reading random nonce prefix: %w", err)
	}
	l := &Locker{
		st:   st,
		cfg:  defaultSettings(),
		id:   base64.RawURLEncoding.EncodeToString(b[:]),
		done: make(chan struct{}),
		held: make(map[holdKey]*held),
	}
	if err := l.cfg.apply(opts, scopeLocker|scopeCall, where); err != nil {
		return nil, err
	}
	l.nonce = l.id + "." // no ':' or ' ': the scripts list nonces
	l.idArg = l.id
	l.tel = newTelemetry(l.cfg.tracerProvider, l.cfg.meterProvider, l.cfg.redactKeys)
	if err := l.configure(); err != nil {
		return nil, err
	}
	l.waits = newHub(l)
	l.graph = newGraph(l)
	l.dog = newWatchdog(l)
	l.env = &holdEnv{nonce: l.newNonce, gone: l.gone, repaired: l.tel.repaired, lose: l.lose, release: l.releaseHold, releaseSet: l.releaseSet}
	return l, nil
}

// Acquire takes the lock named key within the owner in ctx, waiting while another owner
// holds it as the Retry option says (by default until ctx ends). When ctx carries no
// owner, a fresh one is made (see package ctxid).
//
// If the section of ctx, or a section it is in, holds the lock in this process, Acquire
// returns at once with a reentrant Lease and makes no Redis call; if it holds the lock
// through another process (a downstream service reached with a token signed inside the
// section), Redis counts the hold. Otherwise the lock is taken for a new section directly
// in the owner of ctx (ctxid.Section), which the returned Lease's Context carries: another
// goroutine with ctx itself is another section, and waits. Each Lease must be released;
// the lock is freed when the last hold is released.
//
// While it waits, Redis being unreachable or its primary moving (a failover: refused
// connections, timeouts, READONLY, LOADING, CLUSTERDOWN and the like) is waited out like
// a busy lock, with the same backoff and within the same budget; a single attempt
// (TryAcquire, NoRetry) fails at once.
//
// Errors: a *LockedError (ErrLocked) when the wait gave up with the lock busy, with
// ctx.Err() in its chain when ctx ended it; a *RedisError (ErrUnavailable) when Redis
// could not be reached or did not answer in time — when ctx ended while a call was
// outstanding, ctx.Err() is in its chain too; ErrInvalidKey, ErrInvalidConfig,
// ErrUpgrade, ErrClosed.
func (l *Locker) Acquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	s, err := l.callSettings(opts, "Acquire")
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, key, s, s.retry)
}

// TryAcquire is Acquire with a single attempt: a lock held by another owner fails at once
// with a *LockedError. The Retry option is ignored.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts ...Option) (*Lease, error) {
	s, err := l.callSettings(opts, "TryAcquire")
	if err != nil {
		return nil, err
	}
	return l.acquire(ctx, key, s, NoRetry())
}

// Close stops the Locker's background work: renewal, the Pub/Sub subscription and
// pending compensating releases. Leases still held are lost at once (their contexts are
// cancelled with ErrLeaseLost) and expire in Redis after their TTL; release them before
// closing to free them sooner. Calls after Close fail with ErrClosed. Close does not close
// the Redis client.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.aside.close()
	close(l.done)
	var hs []*held
	for _, h := range l.held {
		h.mu.Lock()
		if h.state == stateHeld {
			hs = append(hs, h)
		}
		h.mu.Unlock()
	}
	l.mu.Unlock()
	for _, h := range hs {
		l.lose(h, "locker closed", nil)
	}
	l.dog.Close()
	l.waits.Close()
	l.aside.wait()
	return nil
}

// callSettings resolves the settings of one call.
func (l *Locker) callSettings(opts []Option, where string) (*settings, error) {
	if len(opts) == 0 {
		return &l.cfg, nil
	}
	s := l.cfg
	if err := s.apply(opts, scopeCall, where); err != nil {
		return nil, err
	}
	return &s, nil
}

func (l *Locker) acquire(ctx context.Context, key string, s *settings, p RetryPolicy) (*Lease, error) {
	rk, err := l.redisKeys(key, s.spec)
	if err != nil {
		return nil, err
	}
	if s != &l.cfg {
		if err := l.st.Admits(&s.t); err != nil {
			return nil, configError(err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("guard: acquire %s: %w", quoteKey(key), err)
	}
	owner, section, err := ownerOf(ctx, key)
	if err != nil {
		return nil, err
	}
	a := acquisition{caller: ctx}
	rctx := l.tel.startAcquire(ctx, &a, s, key, string(owner))
	le, err := l.acquireIn(ctx, rctx, &a, key, rk, owner, section, s, p, budgetEnd(p))
	a.end(rctx, le, err, p)
	return le, err
}

// ownerOf returns the owner in ctx, or a fresh one when ctx carries none, with, for a
// fresh one, its first section (made with it, in one allocation; "" otherwise). A fresh
// owner is put in a context only when the lease's Context is asked for: a caller that
// just holds and releases the lock never needs one.
func ownerOf(ctx context.Context, key string) (owner, section ctxid.ID, err error) {
	owner, ok := ctxid.FromContext(ctx)
	if !ok {
		section = ctxid.NewSection()
		owner = section.Root()
	}
	if owner == "" || len(owner) > maxOwnerLen || strings.IndexByte(string(owner), '#') >= 0 {
		return "", "", fmt.Errorf("guard: acquire %s: owner %q: %w", quoteKey(key), owner, ctxid.ErrInvalid)
	}
	return owner, section, nil
}

// budgetEnd is when a wait under p gives up, zero when p has no time limit.
func budgetEnd(p RetryPolicy) time.Time {
	if p.limit == limitMaxWait {
		return time.Now().Add(p.maxWait)
	}
	return time.Time{}
}

// acquireIn acquires key within the section owner: it reenters a hold of owner's, or of a
// section owner is in, that this process has; otherwise it acquires key in Redis for
// section, a section directly in owner ("": a new one; which reenters there a hold of
// owner's chain that another process has), waiting until deadline (zero: no limit). ctx
// carries the owner and becomes the lease's context; rctx, ctx plus the acquire span, is
// what Redis calls are made with.
func (l *Locker) acquireIn(ctx, rctx context.Context, a *acquisition, key string, rk redisKeys, owner, section ctxid.ID, s *settings, p RetryPolicy, deadline time.Time) (*Lease, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, ErrClosed
		}
		h := l.heldIn(key, owner, s.kind)
		if h == nil {
			if section == "" {
				var err error
				if section, err = ctxid.Section(owner); err != nil {
					l.mu.Unlock()
					return nil, fmt.Errorf("guard: acquire %s: %w", quoteKey(key), err)
				}
			}
			h = &held{env: l.env, hk: holdKey{key: key, owner: section, kind: s.kind}, s: s}
			h.sh = store.Hold{Keys: rk, Terms: &s.t, Section: string(section), Ref: h}
			h.sh.Box(string(section), l.labelArg(ctx, s))
			l.held[h.hk] = h
			l.mu.Unlock()
			return l.acquireRemote(ctx, rctx, a, h, p, deadline)
		}
		h.mu.Lock()
		if h.state == stateHeld {
			le := h.newLease(ctx, true)
			h.mu.Unlock()
			l.mu.Unlock()
			return le, nil
		}
		if h.ready == nil {
			h.ready = make(chan struct{})
		}
		ready := h.ready
		h.mu.Unlock()
		l.mu.Unlock()
		// Another goroutine of the same section is acquiring this key: its outcome decides.
		if p.limit == limitAttempts && p.attempts == 1 {
			return nil, &LockedError{Key: key}
		}
		if err := waitReady(ctx, ready, deadline, l.done); err != nil {
			if errors.Is(err, ErrClosed) {
				return nil, err
			}
			return nil, &LockedError{Key: key, Err: ctx.Err()}
		}
	}
}

// heldIn returns this process's hold of key by owner or by the nearest section owner is
// in, held or being acquired, or nil. A hold lost or released that is still in the
// table (its forget has yet to run) is removed and passed over. l.mu is held.
func (l *Locker) heldIn(key string, owner ctxid.ID, kind Kind) *held {
	for id, ok := owner, true; ok; id, ok = id.Parent() {
		hk := holdKey{key: key, owner: id, kind: kind}
		if h := l.held[hk]; h != nil {
			if h.ended() {
				delete(l.held, hk)
				continue
			}
			return h
		}
	}
	return nil
}

// ended reports whether h was lost or released.
func (h *held) ended() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == stateLost || h.state == stateReleased
}

// rekey makes h, an acquisition that reentered through Redis the hold of holder (a
// section its owner is in), that section's hold here: renewed and released as the holder,
// and found in the table as the holder's unless this process has a record of that hold
// already (see adopt). l.mu is held; h is not held yet.
func (l *Locker) rekey(h *held, holder ctxid.ID) {
	if l.held[h.hk] == h {
		delete(l.held, h.hk)
	}
	h.hk.owner = holder
	h.sh.SetOwner(string(holder))
	if l.held[h.hk] == nil {
		l.held[h.hk] = h
	}
}

// adopt rekeys h to g.holder (see rekey). When another goroutine of this process had
// the same hold first, adopt returns that hold, locked (o.mu), which the caller joins,
// giving h's count in Redis back (after unlocking l.mu). l.mu and h.mu are held; h is
// not held yet.
func (l *Locker) adopt(h *held, g granted) *held {
	if h.hk.owner != g.holder {
		l.rekey(h, g.holder)
	}
	if o := l.held[h.hk]; o != h {
		if o != nil {
			o.mu.Lock()
			if o.state == stateHeld {
				h.state = stateReleased
				h.acquireEnded()
				return o
			}
			o.mu.Unlock()
		}
		l.held[h.hk] = h
	}
	return nil
}

// acquireRemote acquires h in Redis for its owner and publishes the outcome to the
// owner's other goroutines waiting on h.ready.
func (l *Locker) acquireRemote(ctx, rctx context.Context, a *acquisition, h *held, p RetryPolicy, deadline time.Time) (*Lease, error) {
	g, err := l.wait(rctx, a, h, p, deadline)
	l.mu.Lock()
	h.mu.Lock()
	if err == nil && l.closed {
		err = ErrClosed
	}
	if err != nil {
		if l.held[h.hk] == h {
			delete(l.held, h.hk)
		}
		if g.acquired {
			h.state = stateReleased
		}
		h.acquireEnded()
		h.mu.Unlock()
		l.mu.Unlock()
		if g.acquired { // closed while acquiring: give it back, within ctx's deadline
			l.compensate(ctx, h, g.nonce, nil)
		}
		return nil, err
	}
	if g.holder != "" {
		if o := l.adopt(h, g); o != nil {
			le := o.newLease(ctx, true)
			o.mu.Unlock()
			h.mu.Unlock()
			l.mu.Unlock()
			l.compensate(ctx, h, g.nonce, nil)
			return le, nil
		}
	}
	// The hold's telemetry first: hold hands h to the watchdog, whose goroutine reads it.
	h.tel = l.tel.held(ctx, a.name, a.kind)
	h.hold(g, l.dog)
	le := h.newLease(ctx, g.holds > 1)
	h.acquireEnded()
	h.mu.Unlock()
	l.mu.Unlock()
	return le, nil
}

// acquireEnded wakes the goroutines of h's owner waiting for its acquisition. h.mu is held.
func (h *held) acquireEnded() {
	if h.ready != nil {
		close(h.ready)
	}
}

func waitReady(ctx context.Context, ready <-chan struct{}, deadline time.Time, done <-chan struct{}) error {
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return context.DeadlineExceeded
	case <-done:
		return ErrClosed
	}
}

// background runs fn on a goroutine that Close waits for, and reports false, running
// nothing, once the Locker is closed.
func (l *Locker) background(fn func()) bool { return l.aside.run(fn) }

// gone reports whether h is no longer this process's record of its owner's hold: its
// acquisition failed or was given up (its context ended), or the hold was released.
func (l *Locker) gone(h *held) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[h.hk] != h || h.ended()
}

// newNonces returns two nonces, made in one allocation: an acquire attempt's, and the
// one its hold will be released with.
func (l *Locker) newNonces() (string, string) {
	var b [128]byte
	n := l.appendNonce(b[:0])
	m := l.appendNonce(n)
	s := string(m)
	return s[:len(n)], s[len(n):]
}

func (l *Locker) appendNonce(b []byte) []byte {
	var digits [13]byte // 2^64 in base 36 has 13 digits
	i := len(digits)
	for n := l.seq.Add(1); ; n /= 36 {
		i--
		digits[i] = base36[n%36]
		if n < 36 {
			break
		}
	}
	return append(append(b, l.nonce...), digits[i:]...)
}

func (l *Locker) newNonce() string {
	var b [64]byte
	return string(l.appendNonce(b[:0]))
}

const base36 = "0123456789abcdefghijklmnopqrstuvwxyz"
