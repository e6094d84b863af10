package guard_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// newLocker returns a Locker on a client of srv, closed at cleanup.
func newLocker(t testing.TB, srv *redistest.Server, opts ...guard.Option) (*guard.Locker, *redis.Client) {
	t.Helper()
	c := srv.Client(t)
	return lockerOn(t, c, opts...), c
}

// lockerOn returns a Locker on client c, closed at cleanup.
func lockerOn(t testing.TB, c redis.UniversalClient, opts ...guard.Option) *guard.Locker {
	t.Helper()
	l, err := guard.New(c, opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// ctxTimeout is a test context bounded so that a hang fails instead of blocking.
func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, l *guard.Locker, ctx context.Context, key string, opts ...guard.Option) *guard.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return le
}

func mustRelease(t testing.TB, le *guard.Lease) {
	t.Helper()
	if err := le.Release(context.Background()); err != nil {
		t.Fatalf("Release(%q): %v", le.Key(), err)
	}
}

// lockName is the Redis hash of key under the default prefix (key must need no escaping).
func lockName(key string) string { return "guard:{" + key + "}" }

// waitUntil polls cond every 5ms until it holds or d passes.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// parallel runs f(0) … f(n-1) on 32 goroutines and fails t with the first error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// envInt is the positive integer in the environment variable name, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// waitEnded waits up to d for ctx, a lease's context, to end and fails t with what
// when it does not: a lease whose loss is never announced must fail its test, not hang
// it until the package timeout.
func waitEnded(t testing.TB, ctx context.Context, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(d):
		t.Fatalf("%s: the lease's context was not cancelled within %s", what, d)
	}
}

// waitForceListening waits until a Locker of the server c reaches listens for force
// releases (it does while it holds leases, and a moment after: see forced.go). Tests
// that drop a reply, or count goroutines, wait for it first, so that the subscription's
// reply and goroutines are not the ones they look at.
func waitForceListening(t testing.TB, c redis.UniversalClient) {
	t.Helper()
	waitUntil(t, 5*time.Second, "the force-release subscription", func() bool { return forceListeners(c) > 0 })
}

// forceListeners is how many connections listen for force releases on the server c
// reaches (0 when it cannot tell).
func forceListeners(c redis.UniversalClient) int64 {
	n, err := c.PubSubNumSub(context.Background(), "guardkit:force-released").Result()
	if err != nil {
		return 0
	}
	return n["guardkit:force-released"]
}

// warmUp acquires and releases "warm-up" with l (its scripts are then loaded), and waits
// for l's force-release subscription, which its first lease opens aside, on the
// server c reaches directly: a test that drops or delays the next reply through a proxy
// then drops its own, not the subscription's.
func warmUp(t testing.TB, l *guard.Locker, c redis.UniversalClient, ctx context.Context) {
	t.Helper()
	le := mustAcquire(t, l, ctx, "warm-up")
	waitForceListening(t, c)
	mustRelease(t, le)
}

// waitQueued waits until a waiter of l for key has found the lock busy and waits for
// its release: Redis's wait queue of key lists l, and the key's release channel has a
// subscriber. Tests wait on this, not on a sleep, for "the waiter is queued".
func waitQueued(t testing.TB, c redis.UniversalClient, key string, l *guard.Locker) {
	t.Helper()
	ch := lockName(key) + ":release"
	waitUntil(t, 30*time.Second, "a waiter of Locker "+l.ID()+" to queue for "+key+" and subscribe", func() bool {
		ctx := context.Background()
		if _, err := c.LPos(ctx, lockName(key)+":queue", l.ID(), redis.LPosArgs{}).Result(); err != nil {
			return false
		}
		subs, err := c.PubSubNumSub(ctx, ch).Result()
		return err == nil && subs[ch] > 0
	})
}

// tokenIn returns the fencing token of the innermost Lease carried by ctx.
func tokenIn(ctx context.Context) (int64, bool) {
	if le, ok := guard.LeaseFromContext(ctx); ok {
		return le.Token(), true
	}
	return 0, false
}

// lockHolder returns the owner that holds the exclusive or fair lock in its Redis hash
// name, "" for none (redistest.Holder).
func lockHolder(t testing.TB, c redis.Cmdable, name string) string {
	t.Helper()
	return redistest.Holder(t, context.Background(), c, name)
}

// holdCount returns owner's hold count in the exclusive or fair lock of key, 0 when it
// does not hold it.
func holdCount(t testing.TB, c redis.Cmdable, key, owner string) int {
	t.Helper()
	if lockHolder(t, c, lockName(key)) != owner {
		return 0
	}
	n, _ := c.HGet(context.Background(), lockName(key), "#n").Int()
	return n
}

// leaseLeft returns how long the hold of the exclusive or fair lock of key has left in
// Redis (its #e, by the server's clock), 0 when nobody holds it.
func leaseLeft(t testing.TB, c redis.Cmdable, key string) time.Duration {
	t.Helper()
	if lockHolder(t, c, lockName(key)) == "" {
		return 0
	}
	ctx := context.Background()
	until, _ := c.HGet(ctx, lockName(key), "#e").Int64()
	now, _ := c.Time(ctx).Result()
	return time.Duration(until-now.UnixMilli()) * time.Millisecond
}

// setFence writes the fence record of key's exclusive lock on c as a record whose last
// token is token (as a counter ahead of the others would be), kept for an hour.
func setFence(ctx context.Context, c redis.Cmdable, key string, token int64) error {
	if err := c.HSet(ctx, lockName(key), "#v", "5", "#f", strconv.FormatInt(token, 10)).Err(); err != nil {
		return err
	}
	return c.Expire(ctx, lockName(key), time.Hour).Err()
}
