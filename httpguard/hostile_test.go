package httpguard_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// TestHostileInputsAsEcho sends the same hostile requests — a 1 MiB header in the key, a
// 1 MiB, malformed, foreign-signed or doubled owner token, a key naming a path value the
// route lacks — to a ServeMux guarded by httpguard and to an Echo server guarded by the
// Echo middleware, with the same templates, Signer and lock state, and checks that
// both answer with the same status, the same words and the same headers, and that no
// answer quotes what the client sent.
func TestHostileInputsAsEcho(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	signer := mustSigner(t, "k1", "0123456789abcdef0123456789abcdef")
	foreign := mustSigner(t, "k9", "fedcba9876543210fedcba9876543210")
	failFast := []guard.Option{guard.Retry(guard.NoRetry())}
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }

	mux := http.NewServeMux()
	mux.Handle("POST /tenant", httpguard.Lock(locker, "tenant:{header.X-Tenant}")(http.HandlerFunc(ok)))
	mux.Handle("POST /orders/{id}", httpguard.LockWithConfig(httpguard.LockConfig{
		Locker: locker, Key: "order:{path.id}", Signer: signer, Options: failFast})(http.HandlerFunc(ok)))
	var logs logBuffer
	mux.Handle("POST /nope/{id}", httpguard.LockWithConfig(httpguard.LockConfig{
		Locker: locker, Key: "order:{path.nope}", Logger: logs.logger()})(http.HandlerFunc(ok)))

	e := echo.New()
	e.Logger.SetOutput(&logBuffer{})
	eok := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	e.POST("/tenant", eok, middleware.Lock(locker, "tenant:{header.X-Tenant}"))
	e.POST("/orders/:id", eok, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker, Key: "order:{param.id}", Signer: signer, Options: failFast}))
	e.POST("/nope/:id", eok, middleware.Lock(locker, "order:{param.nope}"))

	big := strings.Repeat("x", 1<<20)
	other, err := foreign.Sign(ctxid.New(), 1)
	if err != nil {
		t.Fatal(err)
	}
	valid, err := signer.Sign(ctxid.New(), 1)
	if err != nil {
		t.Fatal(err)
	}
	le, err := locker.TryAcquire(t.Context(), "order:busy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = le.Release(t.Context()) }()

	for _, tc := range []struct {
		name, path string
		header     http.Header
		status     int
	}{
		{"1 MiB header in the key", "/tenant", http.Header{"X-Tenant": {big}}, 400},
		{"missing header", "/tenant", nil, 400},
		{"empty header", "/tenant", http.Header{"X-Tenant": {""}}, 400},
		{"1 MiB owner token, free", "/orders/free", http.Header{ctxid.Header: {big}}, 204},
		{"1 MiB owner token, busy", "/orders/busy", http.Header{ctxid.Header: {big}}, 409},
		{"malformed owner token, busy", "/orders/busy", http.Header{ctxid.Header: {"not a token"}}, 409},
		{"foreign owner token, busy", "/orders/busy", http.Header{ctxid.Header: {other}}, 409},
		{"two owner tokens, busy", "/orders/busy", http.Header{ctxid.Header: {valid, valid}}, 409},
		{"valid token of another owner, busy", "/orders/busy", http.Header{ctxid.Header: {valid}}, 409},
		{"path value the route lacks", "/nope/1", nil, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, tc.path, nil)
				for k, v := range tc.header {
					r.Header[k] = v
				}
				return r
			}
			got, want := serve(mux, req()), serve(e, req())
			if got.status != tc.status || want.status != tc.status {
				t.Errorf("httpguard %d %q, Echo %d %q; want %d", got.status, got.body, want.status, want.body, tc.status)
			}
			if text := strings.TrimSuffix(got.body, "\n"); want.body != "" && text != echoMessage(t, want.body) {
				t.Errorf("httpguard says %q, Echo %q", text, echoMessage(t, want.body))
			}
			for _, h := range []string{"Retry-After", httpguard.HeaderOwnerRejected} {
				if g, w := got.header.Get(h), want.header.Get(h); g != w {
					t.Errorf("%s: httpguard %q, Echo %q", h, g, w)
				}
			}
			for _, vs := range tc.header {
				for _, v := range vs {
					if v != "" && strings.Contains(got.body+strings.Join(got.header.Values(httpguard.HeaderOwnerRejected), ""), v) {
						t.Errorf("the answer quotes what the client sent: %q", got.body)
					}
				}
			}
		})
	}
	serve(mux, httptest.NewRequest(http.MethodPost, "/nope/2", nil))
	if n := strings.Count(logs.String(), "names a path value the route lacks"); n != 1 {
		t.Errorf("the route's mistake was logged %d times, want once:\n%s", n, logs.String())
	}
}

// echoMessage decodes Echo's JSON error body.
func echoMessage(t *testing.T, body string) string {
	t.Helper()
	var m struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Errorf("Echo body %q: %v", body, err)
	}
	return m.Message
}

// TestMissingPathValue: a template naming a path value the route lacks, or a middleware
// wrapped around the mux (which has routed nothing yet), is a mistake in the code: 500,
// with a log line that says which; an empty value of a wildcard the route has is the
// request's: 400.
func TestMissingPathValue(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	var logs logBuffer
	lock := func(key string) func(http.Handler) http.Handler {
		return httpguard.LockWithConfig(httpguard.LockConfig{Locker: locker, Key: key, Logger: logs.logger()})
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux := http.NewServeMux()
	mux.Handle("GET /files/{rest...}", lock("file:{path.rest}")(ok))
	mux.Handle("GET /orders/{id}", ok)
	outside := lock("order:{path.id}")(mux) // wrong: around the mux

	for _, tc := range []struct {
		name   string
		h      http.Handler
		path   string
		status int
		log    string
	}{
		{"wildcard value", mux, "/files/a/b", 204, ""},
		{"empty wildcard value", mux, "/files/", 400, ""},
		{"middleware around the mux", outside, "/orders/1", 500, "wrap the route's handler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := serve(tc.h, httptest.NewRequest(http.MethodGet, tc.path, nil)); r.status != tc.status {
				t.Errorf("%s: %d %q, want %d", tc.path, r.status, r.body, tc.status)
			}
			if tc.log != "" && !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log %q lacks %q", logs.String(), tc.log)
			}
		})
	}
}
