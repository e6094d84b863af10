package middleware_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/middleware"
)

func pay(c echo.Context) error    { return c.String(http.StatusOK, "paid") }
func cancel(c echo.Context) error { return c.String(http.StatusOK, "cancelled") }

// Lock one route, or several routes on the same resource: the key "order:42" is one
// lock, whichever route rendered it.
func ExampleLock() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	e := echo.New()
	lockOrder := middleware.Lock(locker, "order:{param.id}")
	e.POST("/orders/:id/pay", pay, lockOrder)
	e.POST("/orders/:id/cancel", cancel, lockOrder)
	// Concurrent POSTs for one order now run one at a time. A request that finds
	// its order busy waits for it, up to 5s, then gets 409 Conflict with Retry-After.
}

// Lock every route of a group.
func ExampleLock_group() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	e := echo.New()
	orders := e.Group("/orders/:id", middleware.Lock(locker, "order:{param.id}"))
	orders.POST("/pay", pay)
	orders.POST("/cancel", cancel)
}

// Wait up to two seconds for a busy lock, and answer 429 with a message of your own
// when it stays busy.
func ExampleLockWithConfig() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	e := echo.New()
	e.POST("/orders/:id/pay", pay, middleware.LockWithConfig(middleware.LockConfig{
		Locker:  locker,
		Key:     "order:{param.id}",
		TTL:     10 * time.Second,
		MaxWait: 2 * time.Second,
		DenyHandler: func(c echo.Context, err *guard.LockedError) error {
			c.Response().Header().Set(echo.HeaderRetryAfter, "1")
			return echo.NewHTTPError(http.StatusTooManyRequests, "this order is being paid").SetInternal(err)
		},
	}))
}

// Answer a busy lock at once with 409 Conflict instead of waiting for it.
func ExampleLockWithConfig_failFast() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	e := echo.New()
	e.POST("/orders/:id/pay", pay, middleware.LockWithConfig(middleware.LockConfig{
		Locker:  locker,
		Key:     "order:{param.id}",
		Options: []guard.Option{guard.Retry(guard.NoRetry())},
	}))
}

// Bad configuration is reported when the middleware is built, naming the field.
// (guard.New does not connect: no Redis is needed to check a config.)
func ExampleLockConfig_ToMiddleware() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	_, err = middleware.LockConfig{Locker: locker, Key: "order:{cookie.id}"}.ToMiddleware()
	fmt.Println(err)
	_, err = middleware.LockConfig{Locker: locker, Key: "order:{param.id}", TTL: -time.Second}.ToMiddleware()
	fmt.Println(err)
	// Output:
	// middleware: invalid configuration: Key: template "order:{cookie.id}" at column 7: {cookie.id}: unknown source "cookie" (known: form, header, method, param, path, query, route)
	// middleware: invalid configuration: TTL: must be ≥ 0 (0 means the Locker's TTL), got -1s
}

// What a client whose request was denied receives from the default DenyHandler,
// rendered by Echo's default HTTPErrorHandler.
func Example_denied() {
	e := echo.New()
	rec := httptest.NewRecorder()
	c := e.NewContext(httptest.NewRequest(http.MethodPost, "/orders/42/pay", nil), rec)

	busy := &guard.LockedError{Key: "order:42", RetryAfter: 2300 * time.Millisecond, Attempts: 1}
	e.HTTPErrorHandler(middleware.DefaultLockConfig.DenyHandler(c, busy), c)

	fmt.Println(rec.Code, "Retry-After:", rec.Header().Get("Retry-After"))
	fmt.Println(strings.TrimSpace(rec.Body.String()))
	// Output:
	// 409 Retry-After: 3
	// {"message":"locked by another request"}
}

// Read a locked route's resource with middleware.Param: it is the value the lock key
// used, decoded exactly once however the client spelled it, where Echo's c.Param is raw
// for some spellings and decoded for others. On a route locked on {param.id}, the last
// request below is refused with 400: its c.Param reads like the third's, whose order
// differs. (Param needs no Redis: it reads the request.)
func ExampleParam() {
	e := echo.New()
	e.GET("/orders/:id", func(c echo.Context) error {
		return c.String(http.StatusOK, fmt.Sprintf("c.Param %q, middleware.Param %q", c.Param("id"), middleware.Param(c, "id")))
	})
	for _, path := range []string{"/orders/42", "/orders/4%32", "/orders/a%2Fb", "/orders/a%252Fb"} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Printf("%-16s %s\n", path, rec.Body)
	}
	// Output:
	// /orders/42       c.Param "42", middleware.Param "42"
	// /orders/4%32     c.Param "4%32", middleware.Param "42"
	// /orders/a%2Fb    c.Param "a%2Fb", middleware.Param "a/b"
	// /orders/a%252Fb  c.Param "a%2Fb", middleware.Param "a%2Fb"
}
