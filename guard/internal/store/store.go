package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/guardkit/guardkit/guard/internal/script"
)

// Store is the Redis side of a Locker: everything that differs between a Locker on one
// deployment (Single: a server, a Sentinel group or a Cluster) and one on a quorum of
// independent servers (Quorum). The engine talks to Redis through it only, and makes no
// other distinction between the two.
type Store interface {
	Protocol
	Transport
	Router
	Reader
	// Configure checks the Locker's settings for this store and takes what it needs of
	// them; a setting it refuses is a *Refusal.
	Configure(cfg Config) error
	// Admits checks one call's terms (its options differ from the Locker's): a *Refusal.
	Admits(t *Terms) error
	// Detects reports whether one server sees every hold of a lock, so that the wait-for
	// graph of deadlock detection can be kept there.
	Detects() bool
}

// Protocol is the lock protocol: attempts, undos, releases, renewals.
type Protocol interface {
	// Acquire makes one acquire attempt for h with nonce, in manner (MannerWait...);
	// urgent: the call must not wait for a batch (the caller waited before it).
	Acquire(ctx context.Context, h *Hold, nonce, manner string, urgent bool) Grant
	// Resends reports whether an attempt whose outcome is unknown (its error is not a
	// server's reply) is sent again with its nonce by the wait's next attempt, and undone
	// when the wait ends without one; else the engine undoes it at once. Either way it is
	// not left holding the lock once the acquisition is over.
	Resends() bool
	// Undo drops the hold taken by the attempt with nonce, if it took effect. An undo
	// that gets no answer goes on in the server's lane (see undo.go).
	Undo(ctx context.Context, h *Hold, nonce string)
	// Release drops one hold of h with its release nonce.
	Release(ctx context.Context, h *Hold, nonce string, urgent bool) (script.Released, error)
	// Leave tells Redis, aside, that h's owner no longer waits, for the kinds whose
	// waiters leave: it gives up its place in a fair lock's queue, or a waiting writer's
	// hold on new readers.
	Leave(h *Hold)
	// Renew renews the leases of batch with the TTLs asked for (0: not sent), within
	// timeout, and puts each lease's outcome in errs: nil, ErrGone, a *Shortfall, or the
	// error of the call.
	Renew(timeout time.Duration, batch []*Hold, ttls []time.Duration, errs []error)
}

// Transport is what the engine needs to know of the clients.
type Transport interface {
	// Inline reports whether a call returns by its context's deadline by itself, so that
	// it can run on the caller's goroutine; alone is true for a call sent outside any
	// batch.
	Inline(alone bool) bool
	// AutoPipelined reports whether the client batches calls: a call that must not wait
	// for a batch is then sent alone.
	AutoPipelined() bool
	// Refresh tells the store that a call failed with err (a Cluster reloads its map).
	Refresh(err error)
	// Ping reports whether the servers that serve locks answer.
	Ping(ctx context.Context) error
	// Scripted is the conn of the engine's own scripts (the wait-for graph).
	Scripted() *Conn
}

// Router is where the feeds and the wait queues are.
type Router interface {
	// Routes returns the Pub/Sub feeds that carry channel ch.
	Routes(ctx context.Context, ch string) ([]feed.Route, error)
	// Conns returns the conns that keep the wait queues: a best-effort call about a
	// lock's queue (leaving it, passing a turn on) is made on each.
	Conns() []*Conn
}

// Reader is what the operators' reads (Inspect, List, ForceRelease) run on.
type Reader interface {
	// Servers returns the servers a lock is read on, and how many of them must agree.
	Servers() (servers []Server, need int)
	// ScanNodes returns the servers that List scans, in order.
	ScanNodes(ctx context.Context) ([]ScanNode, error)
}

// Server is one server, or deployment, that a lock is read on.
type Server struct {
	Conn *Conn
	Addr string // for errors and views; "" for a single deployment
}

// ScanNode is one server List scans.
type ScanNode struct {
	Addr string
	// Spare: a quorum's server, which may be passed over (every lock a majority holds is
	// on another server too).
	Spare  bool
	client redis.Cmdable
}

// Config is what a store takes of its Locker: settings, functions and values, never the
// Locker.
type Config struct {
	ID     any    // the Locker's ID, boxed once for the scripts
	Prefix string // the Locker's key prefix
	TTL    time.Duration
	// RestartDelay and ReplyBudget are a quorum's options; Set: given by the user.
	RestartDelay    time.Duration
	RestartDelaySet bool
	ReplyBudget     time.Duration
	ReplyBudgetSet  bool
	// Aside runs fn on a goroutine that the Locker's Close waits for, and reports false,
	// running nothing, once the Locker is closed.
	Aside func(fn func()) bool
	Done  <-chan struct{} // closed by Close
	// Timeout bounds the calls made aside (the ReleaseTimeout).
	Timeout time.Duration
	Nonce   func() string
}

// Refusal is a setting a store refuses: the engine reports it as a configuration error.
type Refusal struct {
	Field, Reason string
}

// Error names the field and the reason.
func (r *Refusal) Error() string { return r.Field + ": " + r.Reason }

// Grant is the typed outcome of one acquire attempt.
type Grant struct {
	script.Granted             // what the attempt came to, when Err and Bad are nil
	Err            error       // the call's error: the outcome is unknown unless it is a server's reply
	Bad            error       // the reply could not be read: the attempt ran, and its outcome is unknown
	Q              *QuorumHold // a quorum's record of the hold the attempt won

	Synced bool  // a WAIT followed the script (SyncReplicas)
	Acked  int64 // replicas that acknowledged, when Synced
	AckErr error // the WAIT's error, when Synced
}

// decode is the typed outcome of an acquire script call that returned v and err.
func decode(v any, err error) Grant {
	if err != nil {
		return Grant{Err: err}
	}
	g, bad := script.ParseAcquire(v)
	return Grant{Granted: g, Bad: bad}
}

// Shortfall is a renewal that too few replicas acknowledged (SyncReplicas).
type Shortfall struct {
	Want, Acked int
	Err         error // the WAIT's error
}

// Error says what fell short.
func (e *Shortfall) Error() string { return "too few replicas acknowledged the renewal" }

// errGone is the renewal of a hold that is not its owner's any more.
type errGone struct{}

// Error says the hold is not the owner's.
func (errGone) Error() string { return "not the owner" }

// ErrGone is a renewal's outcome when the hold is gone.
var ErrGone error = errGone{}

// base is what every store keeps of its Locker's config.
type base struct {
	cfg Config
	undoLanes
}

// take keeps cfg.
func (b *base) take(cfg Config) {
	b.cfg = cfg
	b.undoLanes.cfg = &b.cfg
}

// args returns the call arguments of c.
func (b *base) args(c *Conn) callArgs { return callArgs{id: b.cfg.ID, conn: c} }

// Layout is the version of the data layout the scripts read and write (see
// script/lua/acquire.lua): a key another layout wrote makes them fail with an error
// "GUARDKIT_LAYOUT <found> <want>", writing nothing.
const Layout = "5"

// LayoutOf reports whether err is a script's refusal of a key another layout wrote, and
// the layout found and the one wanted.
func LayoutOf(err error) (found, want string, ok bool) {
	var re redis.Error
	if err == nil || !errors.As(err, &re) {
		return "", "", false
	}
	msg := re.Error()
	i := strings.Index(msg, "GUARDKIT_LAYOUT ")
	if i < 0 {
		return "", "", false
	}
	f := strings.Fields(msg[i+len("GUARDKIT_LAYOUT "):])
	if len(f) < 2 {
		return "", "", false
	}
	return f[0], f[1], true
}
