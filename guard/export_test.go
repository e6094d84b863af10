package guard

import (
	"context"
	"github.com/guardkit/guardkit/guard/internal/feed"
	"time"
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
	l.classic = true
	l.feedSrc.sharded.Store(1)
}

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
