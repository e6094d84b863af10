package connectguard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/guardkit/guardkit/connectguard"
	"github.com/guardkit/guardkit/examples/grpc/shoppb"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestCallChainHTTPConnectHTTP: HTTP service A (ServeMux, httpguard) holds order:5 and
// calls connect service B's Refund, whose .proto file locks order:{order_id}, through a
// client with NewClientInterceptor; B reenters and calls A back over HTTP through an
// httpguard.Transport; A reenters too. One fencing token all along, reentries after
// the first. Without the client interceptor, B waits for A's lock and A answers 409.
func TestCallChainHTTPConnectHTTP(t *testing.T) {
	srv := redistest.Start(t)
	lockerA, lockerB := newLocker(t, srv), newLocker(t, srv) // two processes, one Redis
	signer := mustSigner(t)
	var (
		mu        sync.Mutex
		tokens    []int64
		reentered []bool
	)
	record := func(ctx context.Context) {
		le, _ := guard.LeaseFromContext(ctx)
		mu.Lock()
		tokens, reentered = append(tokens, le.Token()), append(reentered, le.Reentrant())
		mu.Unlock()
	}

	// A, the HTTP service.
	var refund *connect.Client[shoppb.RefundRequest, shoppb.RefundReply]
	lockA := httpguard.LockWithConfig(httpguard.LockConfig{Locker: lockerA, Key: "order:{path.id}", Signer: signer,
		Options: []guard.Option{guard.Retry(guard.NoRetry())}})
	a := http.NewServeMux()
	a.Handle("POST /orders/{id}/cancel", lockA(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r.Context())
		_, err := refund.CallUnary(r.Context(), connect.NewRequest(&shoppb.RefundRequest{OrderId: r.PathValue("id")}))
		if connect.CodeOf(err) == connect.CodeAborted {
			http.Error(w, "refund busy", http.StatusConflict)
			return
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	a.Handle("POST /orders/{id}/check", lockA(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		record(r.Context())
		w.WriteHeader(http.StatusNoContent)
	})))
	as := httptest.NewServer(a)
	defer as.Close()

	// B, the connect service, calling A back through the Transport.
	toA := &http.Client{Transport: httpguard.NewTransport(signer, as.Client().Transport)}
	b := http.NewServeMux()
	b.Handle(refundProc, connect.NewUnaryHandler(refundProc, func(ctx context.Context, req *connect.Request[shoppb.RefundRequest]) (*connect.Response[shoppb.RefundReply], error) {
		record(ctx)
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, as.URL+"/orders/"+req.Msg.GetOrderId()+"/check", nil)
		if err != nil {
			return nil, err
		}
		resp, err := toA.Do(r)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("A answered %d", resp.StatusCode))
		}
		return connect.NewResponse(leaseReply(ctx)), nil
	}, connect.WithInterceptors(connectguard.NewInterceptor(lockerB, interceptor.WithProtoOptions(), interceptor.WithSigner(signer)))))
	urlB, h2 := h2Server(t, b)

	post := func(path string) int {
		resp, err := as.Client().Post(as.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	refund = connect.NewClient[shoppb.RefundRequest, shoppb.RefundReply](h2, urlB+refundProc,
		connect.WithInterceptors(connectguard.NewClientInterceptor(signer)))
	if s := post("/orders/5/cancel"); s != http.StatusNoContent {
		t.Fatalf("A → B → A: status %d, want 204", s)
	}
	mu.Lock()
	if len(tokens) != 3 || tokens[0] == 0 || tokens[1] != tokens[0] || tokens[2] != tokens[0] || reentered[0] || !reentered[1] || !reentered[2] {
		t.Errorf("tokens %v reentrant %v, want one token and reentries after the first", tokens, reentered)
	}
	mu.Unlock()

	refund = connect.NewClient[shoppb.RefundRequest, shoppb.RefundReply](h2, urlB+refundProc) // no owner sent
	if s := post("/orders/6/cancel"); s != http.StatusConflict {
		t.Fatalf("A → B without the client interceptor: status %d, want 409", s)
	}
}

// TestClientInterceptorHeader: the client interceptor sends the context's owner, one
// hop further, and removes a stale header when the context has none.
func TestClientInterceptorHeader(t *testing.T) {
	signer := mustSigner(t)
	got := make(chan []string, 2)
	mux := http.NewServeMux()
	mux.Handle(refundProc, connect.NewUnaryHandler(refundProc, func(ctx context.Context, req *connect.Request[shoppb.RefundRequest]) (*connect.Response[shoppb.RefundReply], error) {
		got <- req.Header().Values("Guardkit-Owner")
		return connect.NewResponse(&shoppb.RefundReply{}), nil
	}))
	url, h2 := h2Server(t, mux)
	client := connect.NewClient[shoppb.RefundRequest, shoppb.RefundReply](h2, url+refundProc,
		connect.WithInterceptors(connectguard.NewClientInterceptor(signer)))
	owned, owner := ctxidEnsure(t)
	for _, ctx := range []context.Context{owned, t.Context()} {
		req := connect.NewRequest(&shoppb.RefundRequest{})
		req.Header().Set("Guardkit-Owner", "stale")
		if _, err := client.CallUnary(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if v := <-got; len(v) != 1 {
		t.Errorf("with an owner: %q, want one token", v)
	} else if c, err := signer.Verify(v[0]); err != nil || c.Owner != owner || c.Hops != 1 {
		t.Errorf("token claims %+v (%v), want %s with 1 hop", c, err, owner)
	}
	if v := <-got; len(v) != 0 {
		t.Errorf("without an owner: %q, want none", v)
	}
}
