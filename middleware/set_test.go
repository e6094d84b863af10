package middleware_test

import (
	"errors"
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

// TestLockMoreKeys: a route whose config names MoreKeys runs its handler holding every
// key as one lease; transfers listed in opposite directions never overlap on an account
// nor deadlock; a bad template in MoreKeys fails at construction naming the field.
func TestLockMoreKeys(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	e := newEcho(nil)
	var inside [2]atomic.Int32
	var bad atomic.Value
	e.POST("/transfer/:from/:to", func(c echo.Context) error {
		le, ok := guard.LeaseFromContext(c.Request().Context())
		if !ok || len(le.Keys()) != 2 {
			bad.Store("the handler's lease does not hold both accounts")
		}
		for i := range inside {
			if inside[i].Add(1) != 1 {
				bad.Store("two handlers inside one account at once")
			}
		}
		time.Sleep(time.Millisecond)
		for i := range inside {
			inside[i].Add(-1)
		}
		return c.NoContent(http.StatusNoContent)
	}, middleware.LockWithConfig(middleware.LockConfig{
		Locker: l, Key: "account:{param.from}", MoreKeys: []string{"account:{param.to}"},
		MaxWait: 10 * time.Second,
	}))
	base := startEcho(t, e)
	client := newClient(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/transfer/a/b"
			if i%2 == 1 {
				path = "/transfer/b/a"
			}
			for range 20 {
				if r := do(t, client, http.MethodPost, base+path, nil); r.status != http.StatusNoContent {
					t.Errorf("POST %s = %d %s", path, r.status, r.body)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
	if !isFree(t, l, "account:a") || !isFree(t, l, "account:b") {
		t.Fatal("an account is still held after the requests")
	}

	_, err := middleware.LockConfig{Locker: l, Key: "a:{param.x}", MoreKeys: []string{"b:{nope}"}}.ToMiddleware()
	var ce *middleware.ConfigError
	if !errors.As(err, &ce) || ce.Field != "MoreKeys[0]" || !errors.Is(err, guard.ErrInvalidConfig) {
		t.Fatalf("a bad MoreKeys template = %v, want a *ConfigError naming MoreKeys[0]", err)
	}
}
