package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

func mustSigner(t *testing.T, id, secret string) *ctxid.Signer {
	t.Helper()
	s, err := ctxid.NewSigner([]ctxid.Key{{ID: id, Secret: []byte(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustOutbound(t *testing.T, s *ctxid.Signer, ctx context.Context) string {
	t.Helper()
	tok, ok := s.Outbound(ctx)
	if !ok {
		t.Fatal("Outbound made no token")
	}
	return tok
}

// An inbound owner header reenters the caller's lock only when its token verifies with
// the configured key; anything else is ignored and the request is a stranger to the lock.
func TestOwnerHeader(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	upstream, _ := newLocker(t, srv) // the calling service: another process, same Redis

	signer := mustSigner(t, "k1", "0123456789abcdef0123456789abcdef")
	forger := mustSigner(t, "k1", "a different secret, same key ID!")
	stranger := mustSigner(t, "k9", "0123456789abcdef0123456789abcdef")

	ctx, caller := ctxid.Ensure(context.Background())
	held, err := upstream.Acquire(ctx, "order:9")
	if err != nil {
		t.Fatal(err)
	}
	good := mustOutbound(t, signer, ctx)
	_, other := ctxid.Ensure(context.Background())
	tampered := strings.Replace(good, string(caller), string(other), 1)

	type seen struct {
		owner     ctxid.ID
		reentrant bool
	}
	var mu sync.Mutex
	var last seen
	handler := func(c echo.Context) error {
		ctx := c.Request().Context()
		owner, _ := ctxid.FromContext(ctx)
		le, _ := guard.LeaseFromContext(ctx)
		mu.Lock()
		last = seen{owner: owner, reentrant: le != nil && le.Reentrant()}
		mu.Unlock()
		return c.NoContent(http.StatusNoContent)
	}
	e := newEcho(nil)
	e.POST("/orders/:id/pay", handler, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker, Key: "order:{param.id}", Signer: signer,
	}))
	e.POST("/unsigned/orders/:id/pay", handler, middleware.Lock(locker, "order:{param.id}"))

	spoofs := []struct {
		name   string
		path   string
		values []string
	}{
		{"unsigned owner ID", "/orders/9/pay", []string{string(caller)}},
		{"signed with another secret", "/orders/9/pay", []string{mustOutbound(t, forger, ctx)}},
		{"signed with an unknown key", "/orders/9/pay", []string{mustOutbound(t, stranger, ctx)}},
		{"owner swapped in a good token", "/orders/9/pay", []string{tampered}},
		{"oversized", "/orders/9/pay", []string{good + "." + strings.Repeat("A", ctxid.MaxTokenLen)}},
		{"CR/LF after a good token", "/orders/9/pay", []string{good + "\r\nGuardkit-Owner: " + good}},
		{"LF inside a good token", "/orders/9/pay", []string{good[:10] + "\n" + good[10:]}},
		{"forged first of two", "/orders/9/pay", []string{mustOutbound(t, forger, ctx), good}},
		{"good token, no Signer configured", "/unsigned/orders/9/pay", []string{good}},
	}
	for _, s := range spoofs {
		t.Run(s.name, func(t *testing.T) {
			// Through ServeHTTP: net/http clients refuse to send CR/LF in a header.
			req := httptest.NewRequest(http.MethodPost, s.path, nil)
			req.Header[ctxid.Header] = s.values
			if r := serve(e, req); r.status != http.StatusConflict {
				t.Errorf("status %d, want 409 (no reentry); body %q", r.status, r.body)
			}
		})
	}

	t.Run("signed by the caller", func(t *testing.T) {
		hdr := http.Header{ctxid.Header: {good}}
		r := do(t, newClient(t), http.MethodPost, serveHTTPTest(t, e)+"/orders/9/pay", hdr)
		if r.status != http.StatusNoContent {
			t.Fatalf("status %d, want 204 (reentry); body %q", r.status, r.body)
		}
		mu.Lock()
		defer mu.Unlock()
		if last.owner != caller || !last.reentrant {
			t.Errorf("handler ran as %q (reentrant %v), want the caller %q reentering", last.owner, last.reentrant, caller)
		}
	})

	// None of the requests took or dropped a hold of the caller's: it still holds the
	// lock, and once it releases, the lock is free.
	if err := held.Err(); err != nil {
		t.Fatalf("caller's lease: %v", err)
	}
	if isFree(t, locker, "order:9") {
		t.Fatal("the caller's lock was released by a request")
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !isFree(t, locker, "order:9") {
		t.Error("a request left a hold on the caller's lock")
	}
}

// An owner already in the request's context, put there by an earlier middleware, is
// kept: a group lock and a route lock on the same key reenter instead of deadlocking.
func TestOwnerFromEarlierMiddlewareKept(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	g := e.Group("/orders/:id", middleware.Lock(locker, "order:{param.id}"))
	g.POST("/pay", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) },
		middleware.Lock(locker, "order:{param.id}"))
	if r := do(t, newClient(t), http.MethodPost, serveHTTPTest(t, e)+"/orders/4/pay", nil); r.status != http.StatusNoContent {
		t.Fatalf("status %d, body %q", r.status, r.body)
	}
}
