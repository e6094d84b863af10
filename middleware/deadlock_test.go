package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// TestDeadlockRoutes: two requests, each holding its route's account lock, each
// waiting in its handler for the other's account (guard.Do inside the route's section).
// Exactly one of them is answered 409 Conflict without Retry-After, its message naming
// neither account; the other completes once the victim's route lock is released.
func TestDeadlockRoutes(t *testing.T) {
	srv := redistest.Start(t)
	l1, _ := newLocker(t, srv, guard.Label("web-1"))
	l2, _ := newLocker(t, srv, guard.Label("web-2")) // another process, as far as Redis sees
	var held sync.WaitGroup
	held.Add(2)
	handler := func(l *guard.Locker) echo.HandlerFunc {
		return func(c echo.Context) error {
			held.Done()
			held.Wait() // both routes hold their account
			err := guard.Do(c.Request().Context(), func(context.Context) error { return nil },
				guard.Use(l), guard.Key("account:"+c.QueryParam("then")), guard.Retry(guard.MaxWait(20*time.Second, nil)))
			if err != nil {
				return middleware.Status(c, err)
			}
			return c.String(http.StatusOK, "paid")
		}
	}
	e1, e2 := newEcho(nil), newEcho(nil)
	e1.POST("/pay/:id", handler(l1), middleware.Lock(l1, "account:{param.id}"))
	e2.POST("/pay/:id", handler(l2), middleware.Lock(l2, "account:{param.id}"))
	replies := make([]reply, 2)
	var wg sync.WaitGroup
	for i, r := range []struct {
		e   *echo.Echo
		url string
	}{{e1, "/pay/ac-31?then=ac-77"}, {e2, "/pay/ac-77?then=ac-31"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = serve(r.e, httptest.NewRequest(http.MethodPost, r.url, nil))
		}()
	}
	wg.Wait()
	conflicts := 0
	for i, r := range replies {
		switch r.status {
		case http.StatusOK:
		case http.StatusConflict:
			conflicts++
			t.Logf("request %d: 409 %s", i+1, r.body)
			if r.header.Get(echo.HeaderRetryAfter) != "" || strings.Contains(r.body, "ac-") || !strings.Contains(r.body, "deadlock") {
				t.Errorf("deadlock answer %v %s: want no Retry-After, no key, the word deadlock", r.header, r.body)
			}
		default:
			t.Errorf("request %d: %d %s, want 200 or 409", i+1, r.status, r.body)
		}
	}
	if conflicts != 1 {
		t.Fatalf("%d requests answered 409, want exactly 1", conflicts)
	}
}

// TestDeadlockStatusHelper: Status maps a wrapped *guard.DeadlockError to 409 without
// Retry-After, with the error as Internal.
func TestDeadlockStatusHelper(t *testing.T) {
	e := newEcho(nil)
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), rec)
	de := &guard.DeadlockError{Key: "acct-1", Cycle: []guard.DeadlockEdge{{Key: "acct-1"}, {Key: "acct-2"}}}
	err := middleware.Status(c, fmt.Errorf("wrapped: %w", de))
	var he *echo.HTTPError
	if !errors.As(err, &he) || he.Code != http.StatusConflict || !errors.Is(he.Internal, guard.ErrDeadlock) ||
		rec.Header().Get(echo.HeaderRetryAfter) != "" || strings.Contains(fmt.Sprint(he.Message), "acct") {
		t.Fatalf("Status(deadlock) = %#v, Retry-After %q: want 409, no Retry-After, no key, ErrDeadlock inside", err, rec.Header().Get(echo.HeaderRetryAfter))
	}
}
