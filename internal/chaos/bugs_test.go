//go:build chaosbugs

// Reproductions of engine faults the fault suite found that are not fixed yet. They fail
// until the engine is fixed, so they stay out of `make test` and `make chaos`; run them
// with `go test -race -tags chaosbugs -run . ./internal/chaos/`. Once one passes, it moves to
// regress_test.go.

package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/internal/redistest"
)

// TestRetriedReleaseAfterManyHandoffs: TestRetriedReleaseAfterHandoff with a busy key.
// release.lua recognises a retry of a final release by its nonce among the newest (about 20) kept
// beside the fencing token; when more other owners than that took and released the lock
// before go-redis's retry arrived, the retry reports ErrNotHeld or ErrExpired although
// the release took effect (and guard.Wrap reports ErrLeaseLost for a protected call).
func TestRetriedReleaseAfterManyHandoffs(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	slow := srv.Client(t, func(o *redis.Options) {
		o.Addr, o.ReadTimeout, o.ContextTimeoutEnabled = proxy.Addr(), 100*time.Millisecond, true
	})
	holder := warmLocker(t, slow)
	churn := warmLocker(t, srv.Client(t))
	ctx := context.Background()
	le, err := holder.Acquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan int)
	for range 4 {
		go func() {
			n := 0
			for {
				select {
				case <-stop:
					done <- n
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				x, err := churn.Acquire(cctx, "busy")
				cancel()
				if err == nil {
					n++
					_ = x.Release(ctx)
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the churners are parked on the holder's lock
	proxy.DelayNextReply(300 * time.Millisecond)
	err = le.Release(ctx)
	close(stop)
	handoffs := 0
	for range 4 {
		handoffs += <-done
	}
	if err != nil {
		t.Fatalf("Release = %v after taking effect (%d handoffs meanwhile)", err, handoffs)
	}
}
