package guard

import (
	"context"
	"sync"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/feed"
)

// store is the Redis side of a Locker: everything that differs between a Locker on one
// deployment (single: a server, a Sentinel group or a Cluster, made by New) and one on a
// quorum of independent servers (quorum, made by NewQuorum). The engine — the holds
// table, the wait loop, leases, the watchdog, the feed — talks to Redis through it only,
// and makes no other distinction between the two.
type store interface {
	// configure checks the Locker's settings for this store, fills in the defaults
	// that depend on it, and takes what it needs of them and of env.
	configure(cfg *settings, env storeEnv) error
	// admits checks one call's settings (its options differ from the Locker's).
	admits(s *settings) error

	// acquire makes one acquire attempt for h with nonce, in manner (mannerWait...);
	// waited reports that the caller waited before it (the call is then urgent).
	acquire(ctx context.Context, h *held, nonce, manner string, waited bool) acquireReply
	// resends reports whether an attempt whose outcome is unknown (its error is not a
	// server's reply) is sent again with its nonce by the wait's next attempt, and undone
	// when the wait ends without one (Locker.settleUnsure); else the engine undoes it at
	// once. Either way it is not left holding the lock once the acquisition is over.
	resends() bool
	// undo drops the hold taken by the attempt with nonce, if it took effect.
	undo(ctx context.Context, h *held, nonce string)
	// release drops one hold of h with its release nonce.
	release(ctx context.Context, h *held, urgent bool) (releaseReply, error)
	// leave tells Redis, aside, that h's owner no longer waits, for the kinds whose spec
	// leaves: it gives up its place in a fair lock's queue, or a waiting writer's hold
	// on new readers.
	leave(h *held)
	// renew renews the leases of batch with the TTLs asked for (0: not sent), within
	// timeout, and puts each lease's outcome in errs (see Locker.sendRenewals).
	renew(timeout time.Duration, batch []*held, ttls []time.Duration, errs []error)

	// inline reports whether a call returns by its context's deadline by itself, so
	// that it can run on the caller's goroutine; alone is true for a call sent outside
	// any batch (see conn.waitsWithContext).
	inline(alone bool) bool
	// autoPipelined reports whether the client batches calls (an auto-pipeliner): a call
	// that must not wait for a batch is then sent alone (see conn.runScript's urgent).
	autoPipelined() bool
	// refresh tells the store that a call failed with err (a Cluster reloads its map).
	refresh(err error)
	// ping reports whether the servers that serve locks answer (see Locker.Ping).
	ping(ctx context.Context) error
	// scripted is the conn whose sharded flag the scripts take (see holdEnv).
	scripted() *conn

	// routes returns the Pub/Sub feeds that carry channel ch (see feedSource).
	routes(ctx context.Context, ch string) ([]feed.Route, error)
	// conns returns the conns that keep the wait queues: a best-effort call about a
	// lock's queue (leaving it, passing a turn on) is made on each.
	conns() []*conn

	// read reads reqs on the store's servers with read and returns each one's state —
	// on a quorum, the majority's view, with each server's views (else nil) — or a
	// *RedisError with op when a lock could not be read.
	read(ctx context.Context, op string, reqs []inspectReq, read readFunc) ([]*LockState, [][]*LockState, error)
	// scanNodes returns the servers that List scans, in order.
	scanNodes(ctx context.Context) ([]scanNode, error)
}

// readFunc reads reqs on the server of c (see Locker.readStates).
type readFunc func(ctx context.Context, c *conn, reqs []inspectReq) []*LockState

// storeEnv is what a store takes of its Locker: functions and values, never the Locker.
type storeEnv struct {
	// aside runs fn on a goroutine that Close waits for, and reports false, running
	// nothing, once the Locker is closed.
	aside func(fn func()) bool
	done  <-chan struct{} // closed by Close
	// timeout bounds the calls made aside (the ReleaseTimeout).
	timeout time.Duration
	nonce   func() string
	// gone reports whether h is no longer the Locker's record of its owner's hold (see
	// Locker.gone); rekey moves h to holder in the Locker's table (see Locker.rekey).
	gone  func(h *held) bool
	rekey func(h *held, holder ctxid.ID)
	// repaired records that h's hold was taken back on server (telemetry).
	repaired func(h *held, server string)
	// retry takes an undo on c that Redis did not answer, and tries it again until Redis
	// does (Locker.retryUndo).
	retry func(c *conn, call func(ctx context.Context) error)
}

// aside is the Locker's work that runs on goroutines of its own — compensating
// releases, abandoned attempts, a quorum's calls — which Close refuses new work to and
// waits for.
type aside struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// run runs fn on a goroutine that close waits for, and reports false, running nothing,
// once close was called.
func (a *aside) run(fn func()) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		fn()
	}()
	return true
}

// close refuses new work; wait waits for the work started.
func (a *aside) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
}

func (a *aside) wait() { a.wg.Wait() }
