package middleware_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// TestBudgetWhileFrozen: LockConfig.MaxWait bounds the request while Redis is frozen
// (SIGSTOP: connections accepted, nothing answered), whatever the Redis client's own
// timeouts and retries: the request is answered 503 within the budget plus half a
// second, and the handler does not run.
func TestBudgetWhileFrozen(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	if err := locker.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	const budget = 2 * time.Second
	ran := make(chan struct{}, 2)
	e := newEcho(nil)
	e.POST("/accounts/:id/withdraw", func(c echo.Context) error {
		ran <- struct{}{}
		return c.NoContent(http.StatusOK)
	}, middleware.LockWithConfig(middleware.LockConfig{Locker: locker, Key: "account:{param.id}", MaxWait: budget}))
	url := serveHTTPTest(t, e)
	client := newClient(t)
	if r := do(t, client, http.MethodPost, url+"/accounts/warm/withdraw", nil); r.status != http.StatusOK {
		t.Fatalf("warm-up: %d", r.status)
	}
	<-ran
	srv.Pause(t)
	defer srv.Resume(t)
	start := time.Now()
	r := do(t, client, http.MethodPost, url+"/accounts/frozen/withdraw", nil)
	took := time.Since(start)
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("status %d on a frozen Redis, want 503", r.status)
	}
	if took > budget+500*time.Millisecond {
		t.Errorf("answered after %s on a frozen Redis, want within the budget %s + 500ms", took, budget)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran while Redis was frozen")
	default:
	}
}
