package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// forcedWithin is how soon a force-released holder's lease must end.
const forcedWithin = time.Second

// TestForceReleaseHeardAtOnce: a holder whose lock an operator force-releases (another
// Locker, as the guardkit command is) loses its lease within a second — its context ends
// with ErrLeaseLost — announced by the release, not found at the next renewal, which
// with the default TTL is 10 s away. On one server, on every primary of a Cluster, and
// on a quorum of three.
func TestForceReleaseHeardAtOnce(t *testing.T) {
	check := func(t *testing.T, holder, operator *guard.Locker, subscribers func() int64, key string) {
		t.Helper()
		ctx := ctxTimeout(t, 30*time.Second)
		le := mustAcquire(t, holder, ctx, key)
		defer func() { _ = le.Release(context.Background()) }()
		lctx := le.Context()
		waitUntil(t, 5*time.Second, "the holder's Locker to listen for force releases", func() bool { return subscribers() > 0 })
		start := time.Now()
		if _, err := operator.ForceRelease(ctx, key); err != nil {
			t.Fatalf("ForceRelease: %v", err)
		}
		select {
		case <-lctx.Done():
		case <-time.After(forcedWithin):
			t.Fatalf("the holder's lease was still on %s after the force release", forcedWithin)
		}
		if took := time.Since(start); took > forcedWithin {
			t.Fatalf("the holder's lease ended %s after the force release, want within %s", took, forcedWithin)
		}
		if err := context.Cause(lctx); !errors.Is(err, guard.ErrLeaseLost) {
			t.Fatalf("the lease's context ended with %v, want ErrLeaseLost", err)
		}
	}
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		holder, c := newLocker(t, srv)
		operator, _ := newLocker(t, srv)
		check(t, holder, operator, func() int64 { return forceListeners(c) }, "forced")
	})
	t.Run("cluster", func(t *testing.T) {
		c := cluster.Get(t)
		holder := lockerOn(t, c.Client(t))
		operator := lockerOn(t, c.Client(t))
		var clients []*redis.Client
		for _, q := range c.Primaries() {
			clients = append(clients, q.Client(t))
		}
		subs := func() int64 {
			var n int64
			for _, qc := range clients {
				n += forceListeners(qc)
			}
			return n
		}
		// Classic Pub/Sub in a Cluster: the holder listens on one node, the release runs
		// on the lock's primary, and the cluster bus carries the message.
		for i, p := range c.Primaries() {
			check(t, holder, operator, subs, keyOn(t, c, p, fmt.Sprintf("forced%d", i)))
		}
	})
	t.Run("quorum", func(t *testing.T) {
		r := startQuorum(t, 3, false)
		holder := r.locker(t, guard.RestartDelay(0))
		operator := r.locker(t, guard.RestartDelay(0))
		c := r.servers[0].Client(t)
		check(t, holder, operator, func() int64 { return forceListeners(c) }, "forced")
	})
}
