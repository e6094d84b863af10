package httpguard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/keyfunc"
)

// TestKeyFollowsPathValue: the key is rendered from exactly what the handler reads,
// r.PathValue, which the ServeMux decoded once: two spellings of one value are one
// lock, a value and its escaped look-alike are two.
func TestKeyFollowsPathValue(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	want, err := keyfunc.Parse("order:{v}", keyfunc.Sources[string]{"v": keyfunc.Value(func(s string) string { return s })})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /orders/{id}", httpguard.Lock(locker, "order:{path.id}")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		le, _ := guard.LeaseFromContext(r.Context())
		if k, _ := want.Render(r.PathValue("id")); k != le.Key() {
			t.Errorf("handler reads %q, holds %q, want %q", r.PathValue("id"), le.Key(), k)
		}
		_, _ = w.Write([]byte(le.Key()))
	})))
	key := func(path string) string {
		u, err := url.Parse(path)
		if err != nil {
			t.Fatal(err)
		}
		r := serve(mux, &http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}})
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %q", path, r.status, r.body)
		}
		return r.body
	}
	if a, b := key("/orders/42"), key("/orders/4%32"); a != b {
		t.Errorf("/orders/42 holds %q, /orders/4%%32 %q: one order, two locks", a, b)
	}
	for _, pair := range [][2]string{{"/orders/%7B", "/orders/%257B"}, {"/orders/a%2Fb", "/orders/a%252Fb"}, {"/orders/%25", "/orders/%2525"}} {
		if a, b := key(pair[0]), key(pair[1]); a == b {
			t.Errorf("%s and %s both hold %q", pair[0], pair[1], a)
		}
	}
}

// TestLifecycle: a panicking handler's lock is released before the panic goes on; a
// lease lost before the handler answers is 503, after it started its response the
// response stands; a skipped request runs without a lease; an extractor's *Error is
// answered as it says; a custom DenyHandler answers busy requests; Respond answers a
// handler's own guarded call as the middleware would.
func TestLifecycle(t *testing.T) {
	srv := redistest.Start(t)
	locker, rdb := newLocker(t, srv, guard.TTL(time.Second)) // a loss is found within a renewal
	failFast := []guard.Option{guard.Retry(guard.NoRetry())}
	var logs logBuffer
	lock := func(key string) func(http.Handler) http.Handler {
		return httpguard.LockWithConfig(httpguard.LockConfig{Locker: locker, Key: key, Options: failFast, Logger: logs.logger(),
			Skipper: func(r *http.Request) bool { return r.URL.Query().Has("skip") },
			Extractors: map[string]httpguard.Extractor{"user": func(r *http.Request) (string, error) {
				if u := r.Header.Get("X-User"); u != "" {
					return u, nil
				}
				return "", &httpguard.Error{Code: http.StatusUnauthorized, Text: "sign in first"}
			}},
		})
	}
	mux := http.NewServeMux()
	mux.Handle("GET /panic/{id}", lock("p:{path.id}")(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })))
	lose := func(started bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if started {
				w.WriteHeader(http.StatusAccepted)
			}
			le, _ := guard.LeaseFromContext(r.Context())
			if err := rdb.Del(r.Context(), "guard:{"+le.Key()+"}").Err(); err != nil {
				t.Error(err)
			}
			<-r.Context().Done() // cancelled when the loss is found
		})
	}
	mux.Handle("GET /lost/{id}", lock("l:{path.id}")(lose(false)))
	mux.Handle("GET /lost-started/{id}", lock("ls:{path.id}")(lose(true)))
	mux.Handle("GET /user", lock("u:{user}")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, leased := guard.LeaseFromContext(r.Context())
		if !leased != r.URL.Query().Has("skip") {
			t.Errorf("leased %v with skip=%v", leased, r.URL.Query().Has("skip"))
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	mux.Handle("GET /own/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := guard.Do(r.Context(), func(ctx context.Context) error { return nil },
			guard.Use(locker), guard.RawKey("own:"+r.PathValue("id")), guard.Retry(guard.NoRetry()))
		if !httpguard.Respond(w, r, err) {
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	deny := httpguard.LockWithConfig(httpguard.LockConfig{Locker: locker, Key: "own:{path.id}", Options: failFast,
		DenyHandler: func(w http.ResponseWriter, r *http.Request, err *guard.LockedError) {
			http.Error(w, "try later", http.StatusTooManyRequests)
		}})
	mux.Handle("GET /deny/{id}", deny(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	t.Run("panic releases", func(t *testing.T) {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not go on")
				}
			}()
			serve(mux, httptest.NewRequest(http.MethodGet, "/panic/1", nil))
		}()
		if !isFree(t, locker, "p:1") {
			t.Error("p:1 held after the handler panicked")
		}
	})
	t.Run("lease lost", func(t *testing.T) {
		if r := serve(mux, httptest.NewRequest(http.MethodGet, "/lost/1", nil)); r.status != http.StatusServiceUnavailable || r.body != "lock lost while handling the request\n" {
			t.Errorf("%d %q, want 503", r.status, r.body)
		}
		if r := serve(mux, httptest.NewRequest(http.MethodGet, "/lost-started/1", nil)); r.status != http.StatusAccepted || r.body != "" {
			t.Errorf("%d %q, want the handler's 202", r.status, r.body)
		}
		if !strings.Contains(logs.String(), "its response had started") {
			t.Errorf("the loss after the response started was not logged: %q", logs.String())
		}
	})
	t.Run("skipper and extractor", func(t *testing.T) {
		for path, want := range map[string]int{"/user": 401, "/user?skip": 204} {
			if r := serve(mux, httptest.NewRequest(http.MethodGet, path, nil)); r.status != want {
				t.Errorf("%s: %d %q, want %d", path, r.status, r.body, want)
			}
		}
		req := httptest.NewRequest(http.MethodGet, "/user", nil)
		req.Header.Set("X-User", "ann")
		if r := serve(mux, req); r.status != http.StatusNoContent {
			t.Errorf("/user as ann: %d", r.status)
		}
	})
	t.Run("deny handler and Respond", func(t *testing.T) {
		le, err := locker.TryAcquire(t.Context(), "own:1")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = le.Release(t.Context()) }()
		if r := serve(mux, httptest.NewRequest(http.MethodGet, "/deny/1", nil)); r.status != http.StatusTooManyRequests {
			t.Errorf("custom deny: %d", r.status)
		}
		r := serve(mux, httptest.NewRequest(http.MethodGet, "/own/1", nil))
		if r.status != http.StatusConflict || r.header.Get("Retry-After") == "" || r.body != "locked by another request\n" {
			t.Errorf("Respond: %d %v %q, want 409 with Retry-After", r.status, r.header, r.body)
		}
	})
}

// TestUnclassifiedErrorAnswered: an error that is not one of guard's answers (here an
// owner put in the request's context by an outer middleware that guard refuses:
// ctxid.ErrInvalid) is answered 503 with the plain unavailable text, as the Echo
// middleware answers it, not an empty 200; the handler does not run.
func TestUnclassifiedErrorAnswered(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	ran := false
	lock := httpguard.Lock(locker, "order:{path.id}")
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", lock(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true })))
	badOwner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r.WithContext(ctxid.NewContext(r.Context(), "an#owner")))
	})
	u, _ := url.Parse("/orders/1")
	r := serve(badOwner, &http.Request{Method: http.MethodPost, URL: u, Header: http.Header{}})
	if r.status != http.StatusServiceUnavailable || strings.TrimSpace(r.body) != "lock service unavailable" || ran {
		t.Fatalf("status %d, body %q, handler ran %v; want 503 \"lock service unavailable\" and no handler", r.status, r.body, ran)
	}
}
