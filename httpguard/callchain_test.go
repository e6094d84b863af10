package httpguard_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// TestCallChainThroughTransport: service A (ServeMux) holds order:9 and calls B over
// HTTP through a client whose Transport carries the owner; B, guarding the same key,
// reenters, and calls A back, which reenters too, with one fencing token all along
// (A → B → A). B is a net/http service, then an Echo one: both accept the header. No
// handler sets a header by hand, and the locks fail fast, so a missing owner shows as
// 409.
func TestCallChainThroughTransport(t *testing.T) {
	srv := redistest.Start(t)
	lockerA, _ := newLocker(t, srv)
	lockerB, _ := newLocker(t, srv) // another process, same Redis
	signer := mustSigner(t, "k1", "0123456789abcdef0123456789abcdef")
	failFast := []guard.Option{guard.Retry(guard.NoRetry())}
	client := newClient(t, func(rt http.RoundTripper) http.RoundTripper { return httpguard.NewTransport(signer, rt) })

	var (
		mu        sync.Mutex
		tokens    []int64
		reentered []bool
		urlA      string
	)
	record := func(r *http.Request) {
		le, _ := guard.LeaseFromContext(r.Context())
		mu.Lock()
		tokens, reentered = append(tokens, le.Token()), append(reentered, le.Reentrant())
		mu.Unlock()
	}
	call := func(r *http.Request, url string) int {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, url, nil)
		if err != nil {
			t.Error(err)
			return 0
		}
		return send(t, client, req).status
	}
	lockA := httpguard.LockWithConfig(httpguard.LockConfig{Locker: lockerA, Key: "order:{path.id}", Signer: signer, Options: failFast})
	a := http.NewServeMux()
	var urlB string
	a.Handle("POST /orders/{id}/pay", lockA(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(call(r, urlB+"/orders/"+r.PathValue("id")+"/ship"))
	})))
	a.Handle("POST /orders/{id}/check", lockA(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(http.StatusNoContent)
	})))
	urlA = serveHTTP(t, a)

	b := http.NewServeMux()
	b.Handle("POST /orders/{id}/ship", httpguard.LockWithConfig(httpguard.LockConfig{
		Locker: lockerB, Key: "order:{path.id}", Signer: signer, Options: failFast,
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.WriteHeader(call(r, urlA+"/orders/"+r.PathValue("id")+"/check"))
	})))
	be := echo.New()
	be.POST("/orders/:id/ship", func(c echo.Context) error {
		record(c.Request())
		return c.NoContent(call(c.Request(), urlA+"/orders/"+c.Param("id")+"/check"))
	}, middleware.LockWithConfig(middleware.LockConfig{Locker: lockerB, Key: "order:{param.id}", Signer: signer, Options: failFast}))

	for _, tc := range []struct {
		name string
		b    http.Handler
	}{{"net/http B", b}, {"Echo B", be}} {
		t.Run(tc.name, func(t *testing.T) {
			s := httptest.NewServer(tc.b)
			defer s.Close()
			urlB = s.URL
			mu.Lock()
			tokens, reentered = nil, nil
			mu.Unlock()
			if r := do(t, client, http.MethodPost, urlA+"/orders/9/pay", nil); r.status != http.StatusNoContent {
				t.Fatalf("A → B → A: status %d, want 204; body %q", r.status, r.body)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(tokens) != 3 || tokens[1] != tokens[0] || tokens[2] != tokens[0] || reentered[0] || !reentered[1] || !reentered[2] {
				t.Fatalf("tokens %v reentrant %v, want one token and reentries after the first", tokens, reentered)
			}
		})
	}
	if !isFree(t, lockerA, "order:9") {
		t.Error("order:9 still held after the chain answered")
	}

	// Without the Transport the owner does not travel: B waits for A's lock, fails
	// fast, and A answers B's 409.
	plain := newClient(t, nil)
	client = plain
	urlB = serveHTTP(t, b)
	if r := do(t, plain, http.MethodPost, urlA+"/orders/10/pay", nil); r.status != http.StatusConflict {
		t.Fatalf("A → B without the Transport: status %d, want 409", r.status)
	}
}

// TestTransportHeader: the Transport sends exactly one token of the context's owner,
// one hop further, never modifies the request it is given, removes a stale header when
// the context has no owner or Allow refuses the request, and sends none past MaxHops.
func TestTransportHeader(t *testing.T) {
	signer := mustSigner(t, "k1", "0123456789abcdef0123456789abcdef")
	var got []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r.Header.Values(ctxid.Header)
		return &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody, Request: r}, nil
	})
	ctx, owner := ctxid.Ensure(t.Context())
	stale := http.Header{ctxid.Header: {"stale-1", "stale-2"}}

	for _, tc := range []struct {
		name   string
		tr     *httpguard.Transport
		ctx    bool
		header http.Header
		want   bool // a token of owner
	}{
		{"owner", httpguard.NewTransport(signer, base), true, nil, true},
		{"owner replaces stale values", httpguard.NewTransport(signer, base), true, stale, true},
		{"no owner removes stale values", httpguard.NewTransport(signer, base), false, stale, false},
		{"nil signer", httpguard.NewTransport(nil, base), true, stale, false},
		{"Allow refuses", &httpguard.Transport{Signer: signer, Base: base, Allow: func(*http.Request) bool { return false }}, true, stale, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "http://b.internal/x", nil)
			if tc.ctx {
				req = req.WithContext(ctx)
			}
			req.Header = tc.header.Clone()
			before := req.Header.Clone()
			resp, err := tc.tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if len(req.Header) != len(before) || req.Header.Get(ctxid.Header) != before.Get(ctxid.Header) {
				t.Errorf("the request given was modified: %v, was %v", req.Header, before)
			}
			if !tc.want {
				if len(got) != 0 {
					t.Errorf("sent %q, want no header", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("sent %d values, want 1", len(got))
			}
			c, err := signer.Verify(got[0])
			if err != nil || c.Owner != owner || c.Hops != 1 {
				t.Errorf("token claims %+v (%v), want owner %s with 1 hop", c, err, owner)
			}
		})
	}

	hopped := mustSignerHops(t, 1)
	tok, _ := hopped.Sign(owner, 1)
	inbound, _, err := hopped.Accept(t.Context(), tok) // arrived with 1 hop: no further
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://b.internal/x", nil).WithContext(inbound)
	if _, err := httpguard.NewTransport(hopped, base).RoundTrip(req); err != nil || len(got) != 0 {
		t.Errorf("past MaxHops: sent %q (%v), want none", got, err)
	}
}

func mustSignerHops(t *testing.T, hops int) *ctxid.Signer {
	t.Helper()
	s, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}}, ctxid.MaxHops(hops))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
