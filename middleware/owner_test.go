package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

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
	ctx, caller = held.Context(), held.Owner() // callers act from inside the holding section
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
		Locker: locker, Key: "order:{param.id}", Signer: signer, Options: []guard.Option{guard.Retry(guard.NoRetry())},
	}))
	e.POST("/unsigned/orders/:id/pay", handler, failFast(locker, "order:{param.id}"))

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

// rejectionTexts are what a client reads after "was not accepted (reason): ", by reason.
var rejectionTexts = map[string]string{
	"no_signer":      "this service is not configured to accept owner tokens",
	"several_values": "the request sent more than one, and none is used",
	"too_long":       "the token is too long",
	"malformed":      "the token is malformed",
	"unknown_key":    "the token is signed with a key this service does not know",
	"bad_signature":  "the token's signature does not match this service's key",
	"expired":        "the token has expired",
	"too_many_hops":  "the token has passed through too many services",
}

// A Guardkit-Owner header that is not accepted is never trusted, but is not silent
// either: the busy answer says why (response header, message, error chain), and the
// request's span gets an event, busy or not. Without the header nothing is said, and a
// token that verifies still reenters.
func TestOwnerRejectionReported(t *testing.T) {
	srv := redistest.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	locker, _ := newLocker(t, srv)
	upstream, _ := newLocker(t, srv)

	secret := "0123456789abcdef0123456789abcdef"
	signer := mustSigner(t, "k1", secret)
	ctx, caller := ctxid.Ensure(context.Background())
	held, err := upstream.Acquire(ctx, "order:9")
	if err != nil {
		t.Fatal(err)
	}
	ctx, caller = held.Context(), held.Owner() // callers act from inside the holding section
	defer held.Release(context.Background())
	good := mustOutbound(t, signer, ctx)
	stale, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte(secret)}},
		ctxid.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	if err != nil {
		t.Fatal(err)
	}
	farther, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte(secret)}}, ctxid.MaxHops(20))
	if err != nil {
		t.Fatal(err)
	}
	tooFar, err := farther.Sign(caller, 9) // the server's Signer allows 8
	if err != nil {
		t.Fatal(err)
	}

	var errs errorLog
	e := newEcho(&errs)
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // the request's span, as otelecho makes it
		return func(c echo.Context) error {
			ctx, span := tp.Tracer("test").Start(c.Request().Context(), "request "+c.Request().URL.Path)
			defer span.End()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	})
	owned := func(c echo.Context) error {
		owner, _ := ctxid.FromContext(c.Request().Context())
		return c.String(http.StatusOK, string(owner))
	}
	rule := func(signer *ctxid.Signer) echo.MiddlewareFunc {
		return middleware.LockWithConfig(middleware.LockConfig{Locker: locker, Key: "order:{param.id}", Signer: signer,
			Options: []guard.Option{guard.Retry(guard.NoRetry())}})
	}
	e.POST("/orders/:id/pay", owned, rule(signer))
	e.POST("/unsigned/orders/:id/pay", owned, rule(nil))
	e.POST("/custom/orders/:id/pay", owned, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker, Key: "order:{param.id}", Signer: signer, Options: []guard.Option{guard.Retry(guard.NoRetry())},
		DenyHandler: func(c echo.Context, err *guard.LockedError) error {
			reason, rejected := middleware.OwnerRejection(c.Request().Context())
			if !errors.Is(rejected, ctxid.ErrUntrusted) {
				return echo.NewHTTPError(http.StatusTooManyRequests, "busy").SetInternal(err)
			}
			return echo.NewHTTPError(http.StatusTooManyRequests, "busy, and your owner token was refused: "+reason).SetInternal(err)
		},
	}))
	base := serveHTTPTest(t, e)
	client := newClient(t)

	t.Run("custom DenyHandler", func(t *testing.T) {
		r := do(t, client, http.MethodPost, base+"/custom/orders/9/pay", http.Header{ctxid.Header: {"not a token"}})
		if want := "busy, and your owner token was refused: malformed"; r.status != http.StatusTooManyRequests || r.message() != want {
			t.Errorf("got %d %q, want 429 %q", r.status, r.body, want)
		}
		r = do(t, client, http.MethodPost, base+"/custom/orders/9/pay", nil)
		if r.status != http.StatusTooManyRequests || r.message() != "busy" {
			t.Errorf("without a header: got %d %q, want 429 \"busy\"", r.status, r.body)
		}
	})

	for _, tc := range []struct {
		name, path string
		tokens     []string
		status     int
		reason     string // "": nothing reported
		cause      error  // the *ctxid.VerifyError's Reason
	}{
		{"signed with another secret", "/orders/9/pay", []string{mustOutbound(t, mustSigner(t, "k1", "a different secret, same key ID!"), ctx)}, 409, "bad_signature", ctxid.ErrBadSignature},
		{"signed with an unknown key ID", "/orders/9/pay", []string{mustOutbound(t, mustSigner(t, "k2", secret), ctx)}, 409, "unknown_key", ctxid.ErrUnknownKey},
		{"no Signer configured", "/unsigned/orders/9/pay", []string{good}, 409, "no_signer", ctxid.ErrUnknownKey},
		{"expired", "/orders/9/pay", []string{mustOutbound(t, stale, ctx)}, 409, "expired", ctxid.ErrExpired},
		{"too many hops", "/orders/9/pay", []string{tooFar}, 409, "too_many_hops", ctxid.ErrTooManyHops},
		{"malformed", "/orders/9/pay", []string{"not a token"}, 409, "malformed", ctxid.ErrMalformed},
		{"present but empty", "/orders/9/pay", []string{""}, 409, "malformed", ctxid.ErrMalformed},
		{"too long", "/orders/9/pay", []string{strings.Repeat("A", ctxid.MaxTokenLen+1)}, 409, "too_long", ctxid.ErrTooLong},
		{"several headers", "/orders/9/pay", []string{good, good}, 409, "several_values", ctxid.ErrMalformed},
		{"rejected, lock free", "/orders/10/pay", []string{"not a token"}, 200, "malformed", ctxid.ErrMalformed},
		{"no header", "/orders/9/pay", nil, 409, "", nil},
		{"no header, no Signer", "/unsigned/orders/9/pay", nil, 409, "", nil},
		{"verified: reenters", "/orders/9/pay", []string{good}, 200, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.Reset()
			before := len(errs.all())
			r := do(t, client, http.MethodPost, base+tc.path, http.Header{ctxid.Header: tc.tokens})
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %q", r.status, tc.status, r.body)
			}
			var events []string
			for _, s := range rec.Ended() {
				for _, ev := range s.Events() {
					if ev.Name != "guard.owner_rejected" {
						continue
					}
					for _, kv := range ev.Attributes {
						if kv.Key == "guard.reason" {
							events = append(events, kv.Value.AsString())
						}
					}
				}
			}
			reported := r.header.Get(middleware.HeaderOwnerRejected)
			newErrs := errs.all()[before:]
			if tc.reason == "" {
				if reported != "" || len(events) != 0 {
					t.Errorf("nothing to report, but header %q, span events %q", reported, events)
				}
				if tc.status == http.StatusOK && r.body != string(caller) {
					t.Errorf("ran as %q, want the caller %q", r.body, caller)
				}
				return
			}
			if r.status == http.StatusOK && r.body == string(caller) {
				t.Fatal("the rejected token's owner was used")
			}
			if len(events) != 1 || events[0] != tc.reason {
				t.Errorf("span events with reasons %q, want one with %q", events, tc.reason)
			}
			if tc.status == http.StatusOK {
				if reported != "" {
					t.Errorf("%s %q on a request that ran", middleware.HeaderOwnerRejected, reported)
				}
				return
			}
			if reported != tc.reason {
				t.Errorf("%s %q, want %q", middleware.HeaderOwnerRejected, reported, tc.reason)
			}
			if want := "locked by another request; the Guardkit-Owner header was not accepted (" + tc.reason + "): " + rejectionTexts[tc.reason]; r.message() != want {
				t.Errorf("message %q, want %q", r.message(), want)
			}
			var verr *ctxid.VerifyError
			var busy *guard.LockedError
			if len(newErrs) != 1 || !errors.As(newErrs[0], &verr) || !errors.Is(verr, tc.cause) || !errors.As(newErrs[0], &busy) {
				t.Errorf("errors %v: want one with the *ctxid.VerifyError (%v) and the *guard.LockedError in its chain", newErrs, tc.cause)
			}
		})
	}
}
