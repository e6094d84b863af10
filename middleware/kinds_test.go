package middleware_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// kindRoute is a LockConfig of kind opt on key that fails fast when the lock is busy.
func kindRoute(locker *guard.Locker, key string, opt guard.Option) echo.MiddlewareFunc {
	return middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker, Key: key, Options: []guard.Option{opt, guard.Retry(guard.NoRetry())},
	})
}

// TestRouteKinds: each route chooses its lock's kind through LockConfig.Options. The
// statement readers of one account are all inside at once; a posting to the account
// is refused while they are, and gets in once they are done; a semaphore route admits
// its permits and refuses one more.
func TestRouteKinds(t *testing.T) {
	const readers, permits = 4, 2
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	var (
		inside  atomic.Int32
		allIn   = make(chan struct{})
		leave   = make(chan struct{})
		posted  atomic.Int32
		exports atomic.Int32
		full    = make(chan struct{})
		done    = make(chan struct{})
	)
	e := newEcho(nil)
	e.GET("/accounts/:id/statement", func(c echo.Context) error {
		if lease, ok := guard.LeaseFromContext(c.Request().Context()); !ok || lease.Kind() != guard.KindRead {
			return echo.NewHTTPError(http.StatusInternalServerError, "no read lease in the handler's context")
		}
		if inside.Add(1) == readers {
			close(allIn)
		}
		select {
		case <-leave:
			return c.String(http.StatusOK, "statement")
		case <-time.After(10 * time.Second):
			return echo.NewHTTPError(http.StatusGatewayTimeout, "readers were never let go")
		}
	}, kindRoute(locker, "account:{param.id}", guard.Read()))
	e.POST("/accounts/:id/postings", func(c echo.Context) error {
		posted.Add(1)
		return c.String(http.StatusOK, "posted")
	}, kindRoute(locker, "account:{param.id}", guard.Write()))
	e.POST("/tenants/:id/exports", func(c echo.Context) error {
		if exports.Add(1) == permits {
			close(full)
		}
		select {
		case <-done:
			return c.String(http.StatusOK, "exported")
		case <-time.After(10 * time.Second):
			return echo.NewHTTPError(http.StatusGatewayTimeout, "exports were never let go")
		}
	}, kindRoute(locker, "exports:{param.id}", guard.Permits(permits)))
	base := startEcho(t, e)
	client := newClient(t)

	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := do(t, client, http.MethodGet, base+"/accounts/7/statement", nil); r.status != http.StatusOK {
				t.Errorf("statement: status %d, body %q", r.status, r.body)
			}
		}()
	}
	select {
	case <-allIn:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d readers inside at once: readers do not share the lock", inside.Load(), readers)
	}
	if r := do(t, client, http.MethodPost, base+"/accounts/7/postings", nil); r.status != http.StatusConflict {
		t.Errorf("posting while %d readers hold the account: status %d, want 409", readers, r.status)
	}
	close(leave)
	wg.Wait()
	if r := do(t, client, http.MethodPost, base+"/accounts/7/postings", nil); r.status != http.StatusOK {
		t.Errorf("posting after the readers left: status %d, body %q", r.status, r.body)
	}
	if posted.Load() != 1 {
		t.Errorf("%d postings ran, want 1", posted.Load())
	}

	for range permits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := do(t, client, http.MethodPost, base+"/tenants/3/exports", nil); r.status != http.StatusOK {
				t.Errorf("export: status %d, body %q", r.status, r.body)
			}
		}()
	}
	select {
	case <-full:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d exports inside at once", exports.Load(), permits)
	}
	if r := do(t, client, http.MethodPost, base+"/tenants/3/exports", nil); r.status != http.StatusConflict {
		t.Errorf("export beyond %d permits: status %d, want 409", permits, r.status)
	}
	close(done)
	wg.Wait()
}

// TestHandlerDowngradesThroughWrap: a handler holding the write lock of a route calls a
// service that reads the same data under guard.Read: the writer takes the read lock it
// implies instead of deadlocking.
func TestHandlerDowngradesThroughWrap(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	balance := guard.Wrap(func(ctx context.Context, id string) (int, error) {
		return 100, nil
	}, guard.Use(locker), guard.Key("account:{req}"), guard.Read(), guard.Retry(guard.NoRetry()))
	e := newEcho(nil)
	e.POST("/accounts/:id/postings", func(c echo.Context) error {
		if _, err := balance(c.Request().Context(), c.Param("id")); err != nil {
			return echo.NewHTTPError(http.StatusInternalServerError, err.Error())
		}
		return c.String(http.StatusOK, "posted")
	}, kindRoute(locker, "account:{param.id}", guard.Write()))
	base := startEcho(t, e)
	if r := do(t, newClient(t), http.MethodPost, base+"/accounts/9/postings", nil); r.status != http.StatusOK {
		t.Fatalf("status %d, body %q", r.status, r.body)
	}
}

// TestUpgradeRefusedIsConflict: a request that holds a key's read lock (an outer route
// middleware) and reaches a write lock on the same key (an inner one) is answered 409 at
// once, not left waiting for itself.
func TestUpgradeRefusedIsConflict(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	e.POST("/accounts/:id/postings", func(c echo.Context) error {
		return c.String(http.StatusOK, "posted")
	}, kindRoute(locker, "account:{param.id}", guard.Read()), middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker, Key: "account:{param.id}", Options: []guard.Option{guard.Write()},
	}))
	base := startEcho(t, e)
	start := time.Now()
	r := do(t, newClient(t), http.MethodPost, base+"/accounts/9/postings", nil)
	if r.status != http.StatusConflict {
		t.Fatalf("status %d, body %q; want 409", r.status, r.body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the refusal took %s: it must not wait", d)
	}
}
