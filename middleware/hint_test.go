package middleware_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestRetryAfterFromHoldTimes: a route whose handler takes 5 ms, under a 10 s TTL,
// answers a busy request with Retry-After: 1 once holds have been seen to end — the
// estimate of the wait, not the holder's TTL — in a burst as for a lock held by another
// owner; before any hold ended, the hint is the holder's TTL.
func TestRetryAfterFromHoldTimes(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv, guard.TTL(10*time.Second))
	e := newEcho(nil)
	e.POST("/orders/:id", func(c echo.Context) error {
		time.Sleep(5 * time.Millisecond)
		return c.NoContent(http.StatusNoContent)
	}, failFast(locker, "order:{param.id}"))
	base := startEcho(t, e)
	client := newClient(t)
	ctx := context.Background()

	busy := func(id string) reply {
		t.Helper()
		le, err := locker.TryAcquire(ctx, "order:"+id) // another owner holds the order
		if err != nil {
			t.Fatal(err)
		}
		defer le.Release(ctx)
		return do(t, client, http.MethodPost, base+"/orders/"+id, nil)
	}
	// Cold: no hold of the key or the route has ended yet; the hint is the TTL.
	if r := busy("cold"); r.status != http.StatusConflict || r.header.Get("Retry-After") != "10" {
		t.Fatalf("cold: %d Retry-After %q, want 409 and the holder's TTL, 10", r.status, r.header.Get("Retry-After"))
	}

	for range 10 { // warm-up: holds of about 5 ms
		if r := do(t, client, http.MethodPost, base+"/orders/o1", nil); r.status != http.StatusNoContent {
			t.Fatalf("warm-up: %d %s", r.status, r.body)
		}
	}
	if r := busy("o1"); r.status != http.StatusConflict || r.header.Get("Retry-After") != "1" {
		t.Fatalf("held by another owner: %d Retry-After %q, want 409 and 1", r.status, r.header.Get("Retry-After"))
	}
	// Another order of the same route: its own holds are unknown, the route's are not.
	if r := busy("o2"); r.header.Get("Retry-After") != "1" {
		t.Fatalf("another key of the route: Retry-After %q, want 1", r.header.Get("Retry-After"))
	}

	// A burst on one order: every 409 says 1.
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		conflicts int
		hints     = map[string]int{}
	)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := do(t, client, http.MethodPost, base+"/orders/o1", nil)
			if r.status == http.StatusConflict {
				mu.Lock()
				conflicts++
				hints[r.header.Get("Retry-After")]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("burst of 50: %d answered 409, Retry-After values %v", conflicts, hints)
	for v, n := range hints {
		if v != "1" {
			t.Errorf("%d of %d 409s said Retry-After: %s, want 1", n, conflicts, v)
		}
	}
}
