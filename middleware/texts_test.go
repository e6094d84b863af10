package middleware_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// syncBuffer is a bytes.Buffer for a logger written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMissingRouteParam: a key naming a parameter the matched route lacks answers 500,
// not 404, and says so once in Echo's log, naming the route and the parameter; the
// catch-all not-found route of a group still answers 404, unlogged.
func TestMissingRouteParam(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	var log syncBuffer
	e.Logger.SetOutput(&log)
	ran := false
	e.POST("/orders/:id", func(c echo.Context) error { ran = true; return nil }, middleware.Lock(locker, "order:{param.nope}"))
	e.Group("/api", middleware.Lock(locker, "order:{param.id}")).GET("/orders/:id", func(c echo.Context) error { return nil })

	for range 3 {
		r := serve(e, httptest.NewRequest(http.MethodPost, "/orders/42", nil))
		if r.status != http.StatusInternalServerError {
			t.Fatalf("route without the parameter: %d %s, want 500", r.status, r.body)
		}
	}
	if ran {
		t.Fatal("the handler ran unlocked")
	}
	logged := log.String()
	t.Logf("Echo's log: %s", logged)
	if n := strings.Count(logged, "guardkit middleware"); n != 1 || !strings.Contains(logged, "parameter \\\"nope\\\"") || !strings.Contains(logged, "/orders/:id") {
		t.Fatalf("Echo's log %q: want the route /orders/:id and the parameter \"nope\", once (got %d lines)", logged, n)
	}
	if r := serve(e, httptest.NewRequest(http.MethodGet, "/api/nowhere", nil)); r.status != http.StatusNotFound {
		t.Fatalf("group's not-found route: %d, want 404", r.status)
	}
	if strings.Count(log.String(), "guardkit") != 1 {
		t.Fatalf("the not-found route was logged: %q", log.String())
	}
}

// TestResponsesKeepSecrets: busy, unavailable and lease-lost answers say what happened
// in plain words and never carry the key (an account ID), the owner, its token or
// Redis's address, in the body or a header.
func TestResponsesKeepSecrets(t *testing.T) {
	srv := redistest.Start(t)
	locker, rdb := newLocker(t, srv, guard.TTL(600*time.Millisecond))
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("current-secret-0123456789abcdef!")}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := ctxid.NewSigner([]ctxid.Key{{ID: "k9", Secret: []byte("another-secret-0123456789abcdef!")}})
	if err != nil {
		t.Fatal(err)
	}
	const account = "user-4242-secret"
	owner := ctxid.New()
	tok, err := other.Sign(owner, 1) // refused here: a key this service does not know
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{account, string(owner), tok, srv.Addr(), "127.0.0.1"}
	entered := make(chan struct{}, 1)
	route := func(l *guard.Locker) echo.MiddlewareFunc {
		return middleware.LockWithConfig(middleware.LockConfig{Locker: l, Key: "account:{param.id}", Signer: signer,
			Options: []guard.Option{guard.Retry(guard.NoRetry())}})
	}
	e := newEcho(nil)
	e.POST("/accounts/:id", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, route(locker))
	e.POST("/slow/:id", func(c echo.Context) error {
		entered <- struct{}{}
		<-c.Request().Context().Done()
		return nil
	}, middleware.LockWithConfig(middleware.LockConfig{Locker: locker, Key: "account:{param.id}"}))
	down := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	downLocker, err := guard.New(down)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = downLocker.Close() })
	e.POST("/down/:id", func(c echo.Context) error { return nil }, route(downLocker))
	base := startEcho(t, e)
	client := newClient(t)
	check := func(what string, r reply, status int) {
		t.Helper()
		if r.status != status {
			t.Errorf("%s: %d %s, want %d", what, r.status, r.body, status)
		}
		text := r.body
		for k, vs := range r.header {
			text += " " + k + ": " + strings.Join(vs, ",")
		}
		t.Logf("%s: %d %s", what, r.status, r.body)
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s: the client reads %q, which holds %q", what, text, s)
			}
		}
	}
	hdr := http.Header{ctxid.Header: {tok}}

	le, err := locker.TryAcquire(context.Background(), "account:"+account)
	if err != nil {
		t.Fatal(err)
	}
	check("busy", do(t, client, http.MethodPost, base+"/accounts/"+account, hdr), http.StatusConflict)
	_ = le.Release(context.Background())

	done := make(chan reply, 1)
	go func() { done <- do(t, client, http.MethodPost, base+"/slow/"+account, hdr) }()
	<-entered
	if err := rdb.Del(context.Background(), "guard:{account:"+account+"}").Err(); err != nil {
		t.Fatal(err)
	}
	check("lease lost", <-done, http.StatusServiceUnavailable)

	srv.Kill(t)
	check("unavailable", do(t, client, http.MethodPost, base+"/down/"+account, hdr), http.StatusServiceUnavailable)
}

// TestStatusHelper: a handler answers the error of a guarded call of its own with
// middleware.Status as the middleware answers its route's lock: 409 with Retry-After.
func TestStatusHelper(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	reserve := guard.Wrap(func(context.Context, string) (int, error) { return 1, nil },
		guard.Use(locker), guard.Key("sku:{req}"), guard.Retry(guard.NoRetry()))
	e := newEcho(nil)
	e.POST("/carts/:sku", func(c echo.Context) error {
		n, err := reserve(c.Request().Context(), c.Param("sku"))
		if err != nil {
			return middleware.Status(c, err)
		}
		return c.String(http.StatusOK, fmt.Sprint(n))
	})
	le, err := locker.TryAcquire(context.Background(), "sku:ab-12")
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(context.Background())
	r := serve(e, httptest.NewRequest(http.MethodPost, "/carts/ab-12", nil))
	if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" || strings.Contains(r.body, "ab-12") {
		t.Fatalf("busy guarded call: %d %v %s, want 409 with Retry-After and no key", r.status, r.header, r.body)
	}
	c := e.NewContext(httptest.NewRequest(http.MethodGet, "/", nil), httptest.NewRecorder())
	if err := middleware.Status(c, guard.ErrUnavailable); err.(*echo.HTTPError).Code != http.StatusServiceUnavailable {
		t.Fatalf("Status(ErrUnavailable) = %v, want 503", err)
	}
	if err := middleware.Status(c, echo.ErrTeapot); err != echo.ErrTeapot {
		t.Fatalf("Status of another error = %v, want it unchanged", err)
	}
	if middleware.Status(c, nil) != nil {
		t.Fatal("Status(nil) != nil")
	}
}
