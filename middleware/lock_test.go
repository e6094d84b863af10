package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

const concurrent = 50

// fire sends n POSTs to url at once and returns the replies.
func fire(t *testing.T, client *http.Client, url string, n int) []reply {
	t.Helper()
	replies := make([]reply, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = do(t, client, http.MethodPost, url, nil)
		}()
	}
	close(start)
	wg.Wait()
	return replies
}

// Fail fast (guard.NoRetry): while one request holds the order, every other request
// for it is answered 409 with Retry-After at once.
func TestConcurrentSameKeyFailFast(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	var log intervals
	var denied atomic.Int32
	allDenied := make(chan struct{})
	e := newEcho(nil)
	e.POST("/orders/:id/pay", func(c echo.Context) error {
		log.enter(c.Param("id"))
		defer log.exit(c.Param("id"))
		// Hold the lock until every other request has been turned away, so the
		// outcome does not depend on scheduling.
		select {
		case <-allDenied:
		case <-time.After(10 * time.Second):
			return echo.NewHTTPError(http.StatusGatewayTimeout, "others never answered")
		}
		return c.String(http.StatusOK, "paid")
	}, failFast(locker, "order:{param.id}"))
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			if err != nil { // a denial, not yet rendered by Echo's HTTPErrorHandler
				if denied.Add(1) == concurrent-1 {
					close(allDenied)
				}
			}
			return err
		}
	})
	url := startEcho(t, e) + "/orders/7/pay"

	replies := fire(t, newClient(t), url, concurrent)
	var ok, conflict int
	for _, r := range replies {
		switch r.status {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
			conflict++
			if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
				t.Errorf("409 with Retry-After %q, want whole seconds ≥ 1", r.header.Get("Retry-After"))
			}
			if got := r.message(); got != "locked by another request" {
				t.Errorf("409 body message %q", got)
			}
		default:
			t.Errorf("status %d, body %q", r.status, r.body)
		}
	}
	if ok != 1 || conflict != concurrent-1 {
		t.Errorf("%d × 200 and %d × 409, want 1 and %d", ok, conflict, concurrent-1)
	}
	log.check(t, 1)
	if !isFree(t, locker, "order:7") {
		t.Error("lock still held after the requests")
	}
}

// With MaxWait, every request gets its turn, one at a time.
func TestConcurrentSameKeyWait(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	var log intervals
	e := newEcho(nil)
	e.POST("/orders/:id/pay", func(c echo.Context) error {
		log.enter(c.Param("id"))
		defer log.exit(c.Param("id"))
		time.Sleep(2 * time.Millisecond) // long enough for an overlap to show
		return c.String(http.StatusOK, "paid")
	}, middleware.LockWithConfig(middleware.LockConfig{
		Locker:  locker,
		Key:     "order:{param.id}",
		MaxWait: 20 * time.Second,
	}))
	url := startEcho(t, e) + "/orders/7/pay"

	for _, r := range fire(t, newClient(t), url, concurrent) {
		if r.status != http.StatusOK {
			t.Errorf("status %d, body %q", r.status, r.body)
		}
	}
	log.check(t, concurrent)
}

// Different orders do not wait for each other: every handler waits inside its lock
// until all of them are inside at the same time.
func TestDifferentKeysRunConcurrently(t *testing.T) {
	const n = 8
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	var inside atomic.Int32
	allIn := make(chan struct{})
	e := newEcho(nil)
	e.POST("/orders/:id/pay", func(c echo.Context) error {
		if inside.Add(1) == n {
			close(allIn)
		}
		select {
		case <-allIn:
			return c.String(http.StatusOK, "paid")
		case <-time.After(10 * time.Second):
			return echo.NewHTTPError(http.StatusGatewayTimeout, "not all orders got in")
		}
	}, middleware.Lock(locker, "order:{param.id}"))
	base := serveHTTPTest(t, e)
	client := newClient(t)

	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := do(t, client, http.MethodPost, base+"/orders/"+strconv.Itoa(i)+"/pay", nil)
			if r.status != http.StatusOK {
				t.Errorf("order %d: status %d, body %q", i, r.status, r.body)
			}
		}()
	}
	wg.Wait()
}

// A handler that calls a service decorated with guard.Wrap on the same key reenters
// the request's lock through the request's context instead of deadlocking.
func TestHandlerReentersThroughWrap(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)

	type payRequest struct{ OrderID string }
	var reentrant atomic.Bool
	var sameToken atomic.Bool
	pay := guard.Wrap(func(ctx context.Context, req payRequest) (string, error) {
		le, _ := guard.LeaseFromContext(ctx)
		reentrant.Store(le != nil && le.Reentrant())
		return "paid " + req.OrderID, nil
	}, guard.Key("order:{req.OrderID}"), guard.Use(locker), guard.Retry(guard.NoRetry()))

	e := newEcho(nil)
	e.POST("/orders/:id/pay", func(c echo.Context) error {
		ctx := c.Request().Context()
		outer, _ := tokenIn(ctx)
		msg, err := pay(ctx, payRequest{OrderID: c.Param("id")})
		if err != nil {
			return err
		}
		inner, _ := tokenIn(ctx)
		sameToken.Store(outer != 0 && outer == inner)
		return c.String(http.StatusOK, msg)
	}, middleware.Lock(locker, "order:{param.id}"))

	r := do(t, newClient(t), http.MethodPost, serveHTTPTest(t, e)+"/orders/42/pay", nil)
	if r.status != http.StatusOK || r.body != "paid 42" {
		t.Fatalf("status %d, body %q", r.status, r.body)
	}
	if !reentrant.Load() {
		t.Error("the wrapped service did not run under a reentrant lease")
	}
	if !sameToken.Load() {
		t.Error("the handler's context carries no fencing token")
	}
	if !isFree(t, locker, "order:42") {
		t.Error("lock still held after the request")
	}
}

// An uncontended request costs two Redis round trips: acquire and release.
func TestUncontendedRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	counter := redistest.NewCounter()
	client.AddHook(counter)
	locker, err := guard.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	e := newEcho(nil)
	e.POST("/orders/:id/pay", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
		middleware.Lock(locker, "order:{param.id}"))
	url := serveHTTPTest(t, e) + "/orders/1/pay"
	httpClient := newClient(t)

	do(t, httpClient, http.MethodPost, url, nil) // loads the scripts
	// The Locker listens for force releases while it holds leases (a subscription made
	// aside, on this client): let it be made before counting.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, err := client.PubSubNumSub(context.Background(), "guardkit:force-released").Result()
		if err == nil && n["guardkit:force-released"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Locker did not subscribe to force releases within 5s")
		}
	}
	counter.Reset()
	if r := do(t, httpClient, http.MethodPost, url, nil); r.status != http.StatusNoContent {
		t.Fatalf("status %d, body %q", r.status, r.body)
	}
	if got := counter.RoundTrips(); got != 2 {
		t.Errorf("%d Redis round trips, want 2", got)
	}
}

// Routes of a group share the group's lock when their keys render the same text.
func TestGroupRoutesShareLock(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	entered, leave := make(chan struct{}), make(chan struct{})
	e := newEcho(nil)
	g := e.Group("/orders/:id", failFast(locker, "order:{param.id}"))
	g.POST("/pay", func(c echo.Context) error {
		close(entered)
		<-leave
		return c.String(http.StatusOK, "paid")
	})
	g.POST("/cancel", func(c echo.Context) error { return c.String(http.StatusOK, "cancelled") })
	base := serveHTTPTest(t, e)
	client := newClient(t)

	paid := make(chan reply, 1)
	go func() { paid <- do(t, client, http.MethodPost, base+"/orders/5/pay", nil) }()
	waitFor(t, entered, 10*time.Second, "the pay handler")
	if r := do(t, client, http.MethodPost, base+"/orders/5/cancel", nil); r.status != http.StatusConflict {
		t.Errorf("cancel while paying: status %d, want 409", r.status)
	}
	if r := do(t, client, http.MethodPost, base+"/orders/6/cancel", nil); r.status != http.StatusOK {
		t.Errorf("cancel of another order: status %d, want 200", r.status)
	}
	close(leave)
	if r := <-paid; r.status != http.StatusOK {
		t.Errorf("pay: status %d", r.status)
	}
	if r := do(t, client, http.MethodPost, base+"/orders/5/cancel", nil); r.status != http.StatusOK {
		t.Errorf("cancel after paying: status %d, want 200", r.status)
	}
}

// A skipped request runs without owner, key or lease.
func TestSkipper(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	var leased atomic.Bool
	e := newEcho(nil)
	e.GET("/orders/:id", func(c echo.Context) error {
		_, ok := guard.LeaseFromContext(c.Request().Context())
		leased.Store(ok)
		return c.NoContent(http.StatusNoContent)
	}, middleware.LockWithConfig(middleware.LockConfig{
		Locker:  locker,
		Key:     "order:{param.id}",
		Skipper: func(c echo.Context) bool { return c.Request().Method == http.MethodGet },
	}))
	held, err := locker.Acquire(context.Background(), "order:3")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	if r := do(t, newClient(t), http.MethodGet, serveHTTPTest(t, e)+"/orders/3", nil); r.status != http.StatusNoContent {
		t.Fatalf("status %d, body %q", r.status, r.body)
	}
	if leased.Load() {
		t.Error("a skipped request ran under a lease")
	}
}

// A custom DenyHandler decides the response to a busy lock.
func TestCustomDenyHandler(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	var gotKey atomic.Value
	e := newEcho(nil)
	e.POST("/orders/:id/pay", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
		middleware.LockWithConfig(middleware.LockConfig{
			Locker:  locker,
			Key:     "order:{param.id}",
			Options: []guard.Option{guard.Retry(guard.NoRetry())},
			DenyHandler: func(c echo.Context, err *guard.LockedError) error {
				gotKey.Store(err.Key)
				return echo.NewHTTPError(http.StatusTooManyRequests, "order is being paid").SetInternal(err)
			},
		}))
	held, err := locker.Acquire(context.Background(), "order:8")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	r := do(t, newClient(t), http.MethodPost, serveHTTPTest(t, e)+"/orders/8/pay", nil)
	if r.status != http.StatusTooManyRequests || r.message() != "order is being paid" {
		t.Errorf("status %d, body %q", r.status, r.body)
	}
	if gotKey.Load() != "order:8" {
		t.Errorf("DenyHandler got key %v", gotKey.Load())
	}
}

// defaultMaxWait is how long guard's entry points wait for a busy lock when no Retry is
// given, on the route or on guard.New.
const defaultMaxWait = 5 * time.Second

// The Retry you configure wins — LockConfig.Options, else MaxWait, else the one given
// to guard.New — and without any a request waits at most defaultMaxWait, then gets 409
// with Retry-After.
func TestWaitDefaults(t *testing.T) {
	srv := redistest.Start(t)
	plain, _ := newLocker(t, srv)
	noRetry, _ := newLocker(t, srv, guard.Retry(guard.NoRetry()))
	brief, _ := newLocker(t, srv, guard.Retry(guard.MaxWait(200*time.Millisecond, nil)))
	holder, _ := newLocker(t, srv)
	held, err := holder.Acquire(context.Background(), "order:1", guard.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	var errs errorLog
	e := newEcho(&errs)
	ok := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	route := func(path string, l *guard.Locker, maxWait time.Duration, opts ...guard.Option) string {
		e.POST(path+"/:id", ok, middleware.LockWithConfig(middleware.LockConfig{
			Locker: l, Key: "order:{param.id}", MaxWait: maxWait, Options: opts,
		}))
		return path + "/1"
	}
	for _, tc := range []struct {
		name     string
		path     string
		deadline time.Duration // of the request's context; 0: none
		attempts func(int) bool
		ctxErr   error // ended the wait
	}{
		{"none: 5s", route("/default", plain, 0), 0, func(n int) bool { return n > 1 }, nil},
		{"New's NoRetry", route("/new-noretry", noRetry, 0), 0, func(n int) bool { return n == 1 }, nil},
		{"New's MaxWait", route("/new-maxwait", brief, 0), 0, func(n int) bool { return n > 1 }, nil},
		{"MaxWait over New's", route("/maxwait", noRetry, 200*time.Millisecond), 0, func(n int) bool { return n > 1 }, nil},
		{"negative MaxWait: until the request ends", route("/forever", brief, -1), 500 * time.Millisecond,
			func(n int) bool { return n > 1 }, context.DeadlineExceeded},
		{"Options over MaxWait", route("/options", plain, time.Minute, guard.Retry(guard.NoRetry())), 0,
			func(n int) bool { return n == 1 }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(errs.all())
			req := httptest.NewRequest(http.MethodPost, tc.path, nil)
			if tc.deadline > 0 {
				ctx, cancel := context.WithTimeout(req.Context(), tc.deadline)
				defer cancel()
				req = req.WithContext(ctx)
			}
			// Generous: a request that ignored every bound would hang until the test
			// binary's timeout instead.
			bound := 3 * defaultMaxWait
			done := make(chan reply, 1)
			go func() { done <- serve(e, req) }()
			var r reply
			select {
			case r = <-done:
			case <-time.After(bound):
				t.Fatalf("no answer within %s", bound)
			}
			if n, err := strconv.Atoi(r.header.Get("Retry-After")); r.status != http.StatusConflict || err != nil || n < 1 {
				t.Errorf("got %d with Retry-After %q, want 409 with whole seconds ≥ 1", r.status, r.header.Get("Retry-After"))
			}
			got := errs.all()[before:]
			var busy *guard.LockedError
			if len(got) != 1 || !errors.As(got[0], &busy) {
				t.Fatalf("errors %v, want one *guard.LockedError", got)
			}
			if !tc.attempts(busy.Attempts) {
				t.Errorf("%d attempts", busy.Attempts)
			}
			if !errors.Is(busy.Err, tc.ctxErr) {
				t.Errorf("the wait ended with %v, want %v", busy.Err, tc.ctxErr)
			}
		})
	}
}
