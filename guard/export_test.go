package guard

import (
	"context"
	"errors"
	"time"

	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// KeyFor returns the key function that Wrap builds from opts, so that benchmarks can
// measure key rendering on its own.
func KeyFor[Req any](opts ...Option) (func(context.Context, Req) (string, error), error) {
	d, err := newDecorator(opts, "Wrap", true)
	if err != nil {
		return nil, err
	}
	return keyOf[Req](d.wrap.key)
}

// SetPubSubTiming shortens the Pub/Sub receive loop's timing for a test and returns a
// function that restores it. Call it before the Locker under test first waits.
func SetPubSubTiming(poll, ping, dead time.Duration) (restore func()) {
	return feed.SetTiming(poll, ping, dead)
}

// ClassicPubSub makes l announce and hear releases with classic Pub/Sub on a Redis 7
// Cluster, exactly as it does on a Redis 6.2 Cluster, whose servers lack sharded Pub/Sub
// (release.lua and wake.lua then PUBLISH, and the waiters keep one classic feed). Call it
// before l first waits.
func ClassicPubSub(l *Locker) {
	l.st.(*store.Single).SetClassic()
}

// one returns the conn of a Locker made by New (tests in package guard).
func (l *Locker) one() *store.Conn { return l.st.(*store.Single).Scripted() }

// DeadlockWaited returns how long the victim of a deadlock waited before it failed.
func DeadlockWaited(e *DeadlockError) time.Duration { return e.waited }

// DeadlockCalls returns the Redis calls the victim's detection made, walks and
// confirmations together, and the walks.
func DeadlockCalls(e *DeadlockError) (calls, walks int) { return e.calls, e.walks }

// DeadlockTook returns how long the victim's last walk and its confirmation took.
func DeadlockTook(e *DeadlockError) time.Duration { return e.took }

// DeadlockWalks returns how many walks of the wait-for graph l's waiters have made.
func DeadlockWalks(l *Locker) int64 { return l.graph.walks.Load() }

// DefaultMaxWait, ListScanCount and MaxLabelLen are the package's limits, for tests that
// check them.
const (
	DefaultMaxWait = defaultMaxWait
	ListScanCount  = listScanCount
	MaxLabelLen    = maxLabelLen
)

// InvalidKey reports whether err holds the error of a key that cannot name a lock, and
// returns the key as the error keeps it and the key's length.
func InvalidKey(err error) (key string, n int, ok bool) {
	var e *keyError
	if !errors.As(err, &e) {
		return "", 0, false
	}
	return e.key, e.len, true
}

// NewKeyError returns the error of key, which cannot name a lock for reason.
func NewKeyError(key, reason string) error { return invalidKey(key, reason) }

// ReplicaShortfall reports whether err holds a write that too few replicas acknowledged
// (SyncReplicas), and returns the replicas wanted and reached and whether the write was
// a renewal.
func ReplicaShortfall(err error) (want, acked int, renewal, ok bool) {
	var e *replicaError
	if !errors.As(err, &e) {
		return 0, 0, false, false
	}
	return e.want, e.acked, e.renewal, true
}

// NewReplicaError returns the error of a write of key that acked of want replicas
// acknowledged, waitErr being the WAIT command's error.
func NewReplicaError(key string, want, acked int, waitErr error, renewal bool) *RedisError {
	return replicaShortfall(key, want, acked, waitErr, renewal)
}

// QuorumFailure reports whether err holds a quorum call that too few servers confirmed,
// and returns its operation and each server's error (nil for one that confirmed).
func QuorumFailure(err error) (op string, errs []error, ok bool) {
	var e *store.QuorumError
	if !errors.As(err, &e) {
		return "", nil, false
	}
	return e.Op(), e.Errs(), true
}

// NewQuorumError returns the error of a call op of a quorum of servers at addrs, of
// which need must agree, errs being each server's error.
func NewQuorumError(op string, need int, addrs []string, errs []error) error {
	return store.NewQuorumError(op, need, addrs, errs)
}

// ErrReleased is the context.Cause of a lease's context after a normal release.
var ErrReleased = errReleased

// Attempts makes at most n attempts in all, sleeping per b between them: a policy that
// counts attempts, for tests that check the count.
func Attempts(n int, b Backoff) RetryPolicy {
	return RetryPolicy{limit: limitAttempts, attempts: n, backoff: b}
}
