package middleware_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// TestHTTPCallChainReenters: service A holds order:9 and calls B over HTTP with a token
// signed inside its section; B, guarding the same key, reenters; B calls back A, which
// reenters too, with the same fencing token all along (A → B → A). A call made with the
// request's root owner instead (a sibling section) is refused.
func TestHTTPCallChainReenters(t *testing.T) {
	srv := redistest.Start(t)
	lockerA, _ := newLocker(t, srv)
	lockerB, _ := newLocker(t, srv) // another process, same Redis
	signer := mustSigner(t, "k1", "0123456789abcdef0123456789abcdef")
	client := newClient(t)
	guarded := func(l *guard.Locker) echo.MiddlewareFunc {
		return middleware.LockWithConfig(middleware.LockConfig{
			Locker: l, Key: "order:{param.id}", Signer: signer, Options: []guard.Option{guard.Retry(guard.NoRetry())},
		})
	}
	call := func(c echo.Context, url string) int {
		tok, ok := signer.Outbound(c.Request().Context())
		if !ok {
			t.Error("no token for the outbound call")
		}
		return do(t, client, http.MethodPost, url, http.Header{ctxid.Header: {tok}}).status
	}
	var (
		urlA, urlB string
		mu         sync.Mutex
		tokens     []int64
		reentered  []bool
	)
	record := func(c echo.Context) {
		le, _ := guard.LeaseFromContext(c.Request().Context())
		mu.Lock()
		tokens, reentered = append(tokens, le.Token()), append(reentered, le.Reentrant())
		mu.Unlock()
	}
	a, b := newEcho(nil), newEcho(nil)
	a.POST("/orders/:id/pay", func(c echo.Context) error {
		record(c)
		return c.NoContent(call(c, urlB+"/orders/"+c.Param("id")+"/ship"))
	}, guarded(lockerA))
	a.POST("/orders/:id/check", func(c echo.Context) error {
		record(c)
		return c.NoContent(http.StatusNoContent)
	}, guarded(lockerA))
	b.POST("/orders/:id/ship", func(c echo.Context) error {
		record(c)
		return c.NoContent(call(c, urlA+"/orders/"+c.Param("id")+"/check"))
	}, guarded(lockerB))
	urlA, urlB = serveHTTPTest(t, a), serveHTTPTest(t, b)

	if r := do(t, client, http.MethodPost, urlA+"/orders/9/pay", nil); r.status != http.StatusNoContent {
		t.Fatalf("A → B → A: status %d, want 204; body %q", r.status, r.body)
	}
	if len(tokens) != 3 || tokens[1] != tokens[0] || tokens[2] != tokens[0] || reentered[0] || !reentered[1] || !reentered[2] {
		t.Fatalf("tokens %v reentrant %v, want one token and reentries after the first", tokens, reentered)
	}

	// A sibling section of the same request holds order:10; a token signed at the
	// request's root, or inside another section, does not open it.
	base, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := ctxid.Ensure(base)
	sibling, err := lockerA.Acquire(req, "order:10")
	if err != nil {
		t.Fatal(err)
	}
	defer sibling.Release(req)
	other, err := lockerA.Acquire(req, "order:11")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(req)
	for _, from := range []struct {
		name string
		ctx  context.Context
	}{{"request's root", req}, {"another section", other.Context()}} {
		tok := mustOutbound(t, signer, from.ctx)
		if r := do(t, client, http.MethodPost, urlA+"/orders/10/check", http.Header{ctxid.Header: {tok}}); r.status != http.StatusConflict {
			t.Errorf("token from the %s: status %d, want 409", from.name, r.status)
		}
	}
	tok := mustOutbound(t, signer, sibling.Context())
	if r := do(t, client, http.MethodPost, urlA+"/orders/10/check", http.Header{ctxid.Header: {tok}}); r.status != http.StatusNoContent {
		t.Errorf("token from inside the holding section: status %d, want 204", r.status)
	}
}
