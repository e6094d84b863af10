package middleware_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// A panicking handler still releases the lock, and the panic reaches Echo's Recover
// middleware outside the lock.
func TestPanicReleasesLock(t *testing.T) {
	srv := redistest.Start(t)
	locker, rdb := newLocker(t, srv)
	var seen atomic.Value
	e := newEcho(nil)
	e.Use(echomw.RecoverWithConfig(echomw.RecoverConfig{
		DisablePrintStack: true,
		LogErrorFunc: func(_ echo.Context, err error, _ []byte) error {
			seen.Store(err.Error())
			return err
		},
	}))
	e.POST("/orders/:id/pay", func(c echo.Context) error {
		panic("card reader on fire")
	}, middleware.Lock(locker, "order:{param.id}"))

	r := do(t, newClient(t), http.MethodPost, serveHTTPTest(t, e)+"/orders/2/pay", nil)
	if r.status != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", r.status)
	}
	if seen.Load() != "card reader on fire" {
		t.Errorf("recover saw %v", seen.Load())
	}
	if h := redistest.Holder(t, context.Background(), rdb, lockName("order:2")); h != "" {
		t.Errorf("lock still held in Redis after the panic, by %s", h)
	}
	if !isFree(t, locker, "order:2") {
		t.Error("lock still held after the panic")
	}
}

// When the lease is lost while the handler runs, the handler's context is cancelled with
// guard.ErrLeaseLost as its cause and the loss reaches Echo's error path, whether or not
// the handler had already answered.
func TestLeaseLostWhileHandling(t *testing.T) {
	for _, committed := range []bool{false, true} {
		t.Run(fmt.Sprintf("committed=%v", committed), func(t *testing.T) {
			srv := redistest.Start(t)
			locker, rdb := newLocker(t, srv, guard.TTL(300*time.Millisecond))
			var errs errorLog
			var cause atomic.Value
			entered := make(chan struct{})
			e := newEcho(&errs)
			e.POST("/orders/:id/pay", func(c echo.Context) error {
				if committed {
					c.Response().WriteHeader(http.StatusOK)
					_, _ = c.Response().Write([]byte("partial"))
					c.Response().Flush()
				}
				close(entered)
				ctx := c.Request().Context()
				select {
				case <-ctx.Done():
					cause.Store(context.Cause(ctx))
				case <-time.After(10 * time.Second):
					return errors.New("lease never lost")
				}
				if committed {
					return nil
				}
				return ctx.Err()
			}, middleware.Lock(locker, "order:{param.id}"))
			base := serveHTTPTest(t, e)

			got := make(chan reply, 1)
			go func() { got <- do(t, newClient(t), http.MethodPost, base+"/orders/1/pay", nil) }()
			waitFor(t, entered, 10*time.Second, "the handler")
			// Another party deletes the lock: the next renewal finds it gone.
			if err := rdb.Del(context.Background(), lockName("order:1")).Err(); err != nil {
				t.Fatal(err)
			}
			r := <-got

			if c, _ := cause.Load().(error); !errors.Is(c, guard.ErrLeaseLost) {
				t.Errorf("handler's context cause %v, want ErrLeaseLost", c)
			}
			if committed {
				if r.status != http.StatusOK || r.body != "partial" {
					t.Errorf("client got %d %q, want the handler's own 200 \"partial\"", r.status, r.body)
				}
			} else if r.status != http.StatusServiceUnavailable || r.message() != "lock lost while handling the request" {
				t.Errorf("client got %d %q, want 503", r.status, r.body)
			}
			logged := errs.all()
			if len(logged) != 1 || !errors.Is(logged[0], guard.ErrLeaseLost) {
				t.Fatalf("HTTPErrorHandler got %v, want one error matching ErrLeaseLost", logged)
			}
			if !committed && !errors.Is(logged[0], context.Canceled) {
				t.Errorf("the handler's own error is not in the chain: %v", logged[0])
			}
		})
	}
}

// A handler that streams for several TTLs keeps its lock: renewal runs while it writes.
func TestStreamingKeepsLock(t *testing.T) {
	const (
		ttl    = 150 * time.Millisecond
		chunks = 12
		every  = 50 * time.Millisecond // chunks·every = 4 TTLs
	)
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv, guard.TTL(ttl))
	var errs errorLog
	var streamErr atomic.Value
	e := newEcho(&errs)
	e.GET("/orders/:id/events", func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderContentType, "text/event-stream")
		c.Response().WriteHeader(http.StatusOK)
		ctx := c.Request().Context()
		for i := range chunks {
			if _, err := fmt.Fprintf(c.Response(), "data: %d\n", i); err != nil {
				return err
			}
			c.Response().Flush()
			select {
			case <-time.After(every):
			case <-ctx.Done():
				streamErr.Store(context.Cause(ctx))
				return ctx.Err()
			}
		}
		return nil
	}, middleware.Lock(locker, "order:{param.id}"))
	e.POST("/orders/:id/pay", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
		failFast(locker, "order:{param.id}"))
	base := serveHTTPTest(t, e)
	client := newClient(t)

	resp, err := client.Get(base + "/orders/3/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	n := 0
	for lines.Scan() {
		if want := "data: " + strconv.Itoa(n); lines.Text() != want {
			t.Fatalf("line %d: %q, want %q", n, lines.Text(), want)
		}
		n++
		if n == 2*chunks/3 { // past 2 TTLs: only renewal can still be holding the lock
			if r := do(t, client, http.MethodPost, base+"/orders/3/pay", nil); r.status != http.StatusConflict {
				t.Errorf("pay while streaming: status %d, want 409", r.status)
			}
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	if n != chunks {
		t.Errorf("stream had %d chunks, want %d", n, chunks)
	}
	if c := streamErr.Load(); c != nil {
		t.Errorf("stream cancelled: %v", c)
	}
	for _, err := range errs.all() {
		if !errors.Is(err, guard.ErrLocked) { // the 409 above
			t.Errorf("unexpected error: %v", err)
		}
	}
}

// With Redis down, a request is answered 503 by default, or runs unlocked with FailOpen.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	// Without client retries, a refused connection fails at once instead of after
	// go-redis's backoff.
	locker, err := guard.New(srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	var ran atomic.Int32
	var leased, owned atomic.Bool
	handler := func(c echo.Context) error {
		ran.Add(1)
		_, ok := guard.LeaseFromContext(c.Request().Context())
		leased.Store(ok)
		_, ok = ctxid.FromContext(c.Request().Context())
		owned.Store(ok)
		return c.NoContent(http.StatusNoContent)
	}
	var errs errorLog
	e := newEcho(&errs)
	e.POST("/orders/:id/pay", handler, middleware.Lock(locker, "order:{param.id}"))
	e.POST("/open/orders/:id/pay", handler, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker, Key: "order:{param.id}", FailOpen: true,
	}))
	base := serveHTTPTest(t, e)
	client := newClient(t)
	srv.Stop()

	t.Run("default", func(t *testing.T) {
		r := do(t, client, http.MethodPost, base+"/orders/1/pay", nil)
		if r.status != http.StatusServiceUnavailable || r.message() != "lock service unavailable" {
			t.Errorf("got %d %q, want 503", r.status, r.body)
		}
		if ran.Load() != 0 {
			t.Error("handler ran without the lock")
		}
		if logged := errs.all(); len(logged) != 1 || !errors.Is(logged[0], guard.ErrUnavailable) {
			t.Errorf("HTTPErrorHandler got %v, want ErrUnavailable", logged)
		}
	})
	t.Run("fail open", func(t *testing.T) {
		r := do(t, client, http.MethodPost, base+"/open/orders/1/pay", nil)
		if r.status != http.StatusNoContent {
			t.Errorf("got %d %q, want 204 from the handler", r.status, r.body)
		}
		if ran.Load() != 1 || leased.Load() || !owned.Load() {
			t.Errorf("handler ran %d times, leased %v, owner %v; want once, unleased, with an owner",
				ran.Load(), leased.Load(), owned.Load())
		}
	})
}
