package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// keyOf is a handler that answers with the key of the lease it runs under.
func keyOf(c echo.Context) error {
	le, ok := guard.LeaseFromContext(c.Request().Context())
	if !ok {
		return c.String(http.StatusOK, "<no lease>")
	}
	return c.String(http.StatusOK, le.Key())
}

func TestKeySources(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	authenticate := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { c.Set("user", "alice"); return next(c) }
	}
	e.GET("/things/:id", keyOf, authenticate, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker,
		Key:    "req|{method}|{route}|{path}|{param.id}|{query.q}|{header.x-tenant}|{user}",
		Extractors: map[string]middleware.Extractor{
			"user": func(c echo.Context) (string, error) { return c.Get("user").(string), nil },
		},
	}))

	req := httptest.NewRequest(http.MethodGet, "/things/5?q=abc&q=ignored", nil)
	req.Header.Add("X-Tenant", "acme")
	req.Header.Add("X-Tenant", "ignored")
	r := serve(e, req)
	// The route's ':' is not a separator of this template, so it stays as it is.
	if want := "req|GET|/things/:id|/things/5|5|abc|acme|alice"; r.status != http.StatusOK || r.body != want {
		t.Errorf("got %d %q, want key %q", r.status, r.body, want)
	}
}

// Route parameters are percent-decoded: two spellings of one order take one lock.
func TestParamDecoded(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	e.POST("/orders/:id/pay", keyOf, middleware.Lock(locker, "order:{param.id}"))
	for path, want := range map[string]string{
		"/orders/42/pay":    "order:42",
		"/orders/4%32/pay":  "order:42",
		"/orders/a%2Fb/pay": "order:a/b",
		"/orders/50%25/pay": "order:50%",
	} {
		if r := serve(e, httptest.NewRequest(http.MethodPost, path, nil)); r.body != want {
			t.Errorf("%s: got %d %q, want key %q", path, r.status, r.body, want)
		}
	}

	held, err := locker.Acquire(context.Background(), "order:42")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	if r := serve(e, httptest.NewRequest(http.MethodPost, "/orders/4%32/pay", nil)); r.status != http.StatusConflict {
		t.Errorf("order 4%%32 while 42 is held: status %d, want 409", r.status)
	}
}

// {form.x} reads urlencoded bodies and leaves the fields to the handler; other bodies
// are not read.
func TestFormSource(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	e.POST("/pay", func(c echo.Context) error {
		le, _ := guard.LeaseFromContext(c.Request().Context())
		return c.String(http.StatusOK, le.Key()+" "+c.FormValue("note"))
	}, middleware.Lock(locker, "order:{form.id}"))

	form := url.Values{"id": {"77"}, "note": {"rush"}}.Encode()
	post := func() *http.Request {
		req := httptest.NewRequest(http.MethodPost, "/pay?id=from-query", strings.NewReader(form))
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm+"; charset=utf-8")
		return req
	}
	if r := serve(e, post()); r.status != http.StatusOK || r.body != "order:77 rush" {
		t.Errorf("got %d %q", r.status, r.body)
	}

	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	_ = w.WriteField("id", "77")
	_ = w.Close()
	req := httptest.NewRequest(http.MethodPost, "/pay", &mp)
	req.Header.Set(echo.HeaderContentType, w.FormDataContentType())
	if r := serve(e, req); r.status != http.StatusBadRequest {
		t.Errorf("multipart: got %d %q, want 400", r.status, r.body)
	}

	held, err := locker.Acquire(context.Background(), "order:77")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	if r := serve(e, post()); r.status != http.StatusConflict {
		t.Errorf("while order 77 is held: got %d, want 409", r.status)
	}
}

// A key that cannot be built is answered 400 (or what an extractor said), 404 when the
// matched route lacks the parameter, and the handler does not run.
func TestKeyErrors(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv, guard.MaxKeyLen(64))
	var errs errorLog
	e := newEcho(&errs)
	handler := func(c echo.Context) error { return c.String(http.StatusOK, "ran") }
	e.GET("/tenant", handler, middleware.Lock(locker, "tenant:{header.X-Tenant}"))
	e.GET("/search", handler, middleware.Lock(locker, "search:{query.q}"))
	e.GET("/user", handler, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker,
		Key:    "user:{user}",
		Extractors: map[string]middleware.Extractor{"user": func(c echo.Context) (string, error) {
			if c.QueryParam("anonymous") != "" {
				return "", echo.NewHTTPError(http.StatusUnauthorized, "sign in first")
			}
			return "", errors.New("session store down")
		}},
	}))
	g := e.Group("/orders/:id", middleware.Lock(locker, "order:{param.id}"))
	g.GET("/status", handler)
	e.Group("/api", middleware.Lock(locker, "order:{param.id}")).GET("/orders/:id", handler)

	for _, tc := range []struct {
		name, path string
		header     http.Header
		status     int
		message    string
	}{
		{"missing header", "/tenant", nil, 400, "cannot build the lock key from the request"},
		{"empty header", "/tenant", http.Header{"X-Tenant": {""}}, 400, "cannot build the lock key from the request"},
		{"key too long", "/tenant", http.Header{"X-Tenant": {strings.Repeat("t", 100)}}, 400, "cannot build the lock key from the request"},
		{"missing query", "/search?other=1", nil, 400, "cannot build the lock key from the request"},
		{"extractor's HTTP error", "/user?anonymous=1", nil, 401, "sign in first"},
		{"extractor's error", "/user", nil, 400, "cannot build the lock key from the request"},
		{"group's not-found route", "/api/nowhere", nil, 404, "Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			r := serve(e, req)
			if r.status != tc.status || r.message() != tc.message {
				t.Errorf("got %d %q, want %d %q", r.status, r.body, tc.status, tc.message)
			}
		})
	}
	for _, err := range errs.all() {
		if !errors.Is(err, guard.ErrInvalidKey) {
			t.Errorf("error %v does not match guard.ErrInvalidKey", err)
		}
	}
	// The group's own routes have the parameter, so its not-found routes do too.
	if r := serve(e, httptest.NewRequest(http.MethodGet, "/orders/9/nowhere", nil)); r.status != http.StatusNotFound {
		t.Errorf("group route not found: %d", r.status)
	}
}
