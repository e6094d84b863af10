package connectguard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/guardkit/guardkit/connectguard"
	"github.com/guardkit/guardkit/examples/grpc/shoppb"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestUnaryExclusiveHTTP2: 20 concurrent unary calls for one order over HTTP/2, each a
// read-modify-write of a counter that loses updates when two overlap, all succeed (they
// wait their turn, MaxWait unlimited by the rule) and the counter ends at exactly 20.
func TestUnaryExclusiveHTTP2(t *testing.T) {
	srv := redistest.Start(t)
	locker := newLocker(t, srv)
	var n counter
	guarded := connect.WithInterceptors(connectguard.NewInterceptor(locker, interceptor.WithRules(interceptor.Rule{
		Method: refundProc, Key: "order:{req.order_id}", Options: []guard.Option{guard.Retry(guard.MaxWait(-1, nil))},
	})))
	mux := http.NewServeMux()
	mux.Handle(refundProc, connect.NewUnaryHandler(refundProc, func(ctx context.Context, req *connect.Request[shoppb.RefundRequest]) (*connect.Response[shoppb.RefundReply], error) {
		if _, ok := guard.LeaseFromContext(ctx); !ok {
			return nil, connect.NewError(connect.CodeInternal, errors.New("no lease"))
		}
		n.add()
		return connect.NewResponse(&shoppb.RefundReply{Refunded: 1}), nil
	}, guarded))
	url, httpClient := h2Server(t, mux)
	client := connect.NewClient[shoppb.RefundRequest, shoppb.RefundReply](httpClient, url+refundProc)

	const calls = 20
	var wg sync.WaitGroup
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := client.CallUnary(t.Context(), connect.NewRequest(&shoppb.RefundRequest{OrderId: "7"})); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := n.n.Load(); got != calls {
		t.Errorf("counter %d after %d guarded calls: updates were lost", got, calls)
	}
}

// TestBusyAborted: over each protocol connect serves (Connect, gRPC, gRPC-Web) on HTTP/2,
// a call whose lock — declared with (guardkit.v1.lock) in shop.proto — is held fails
// with CodeAborted, a RetryInfo hint and Reason LOCKED, in words that do not name the
// order; the server's interceptors further out still see guard.ErrLocked in the chain;
// a client that waits out the hint once the holder is done is served.
func TestBusyAborted(t *testing.T) {
	srv := redistest.Start(t)
	// Until holds are seen, the hint is the TTL left; busy calls fail at once.
	locker := newLocker(t, srv, guard.TTL(2*time.Second), guard.Retry(guard.NoRetry()))
	var seen errorLog
	mux := http.NewServeMux()
	mux.Handle(cancelProc, connect.NewUnaryHandler(cancelProc, func(ctx context.Context, req *connect.Request[shoppb.CancelRequest]) (*connect.Response[shoppb.CancelReply], error) {
		return connect.NewResponse(&shoppb.CancelReply{Refunded: 1}), nil
	}, connect.WithInterceptors(seen.interceptor(), connectguard.NewInterceptor(locker, interceptor.WithProtoOptions()))))
	url, httpClient := h2Server(t, mux)

	const order = "secret-4242"
	for _, proto := range []struct {
		name string
		opt  []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}}} {
		t.Run(proto.name, func(t *testing.T) {
			client := connect.NewClient[shoppb.CancelRequest, shoppb.CancelReply](httpClient, url+cancelProc, proto.opt...)
			le, err := locker.TryAcquire(t.Context(), "order:"+order)
			if err != nil {
				t.Fatal(err)
			}
			_, err = client.CallUnary(t.Context(), connect.NewRequest(&shoppb.CancelRequest{OrderId: order}))
			if connect.CodeOf(err) != connect.CodeAborted {
				t.Fatalf("busy: %v, want CodeAborted", err)
			}
			delay, reason, hinted := retryDelay(t, err)
			if !hinted || delay <= 0 || reason != interceptor.ReasonLocked {
				t.Errorf("details: RetryInfo %v (%v), reason %q; want a hint and %s", hinted, delay, reason, interceptor.ReasonLocked)
			}
			var ce *connect.Error
			if errors.As(err, &ce) && (ce.Message() != "busy: another request holds the lock" || strings.Contains(err.Error(), order)) {
				t.Errorf("the client reads %q", err)
			}
			if err := le.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(delay) // obey the hint
			if _, err := client.CallUnary(t.Context(), connect.NewRequest(&shoppb.CancelRequest{OrderId: order})); err != nil {
				t.Errorf("after the hint: %v", err)
			}
		})
	}
	errs := seen.all()
	if len(errs) != 3 {
		t.Fatalf("the outer interceptor saw %d errors, want 3", len(errs))
	}
	for _, err := range errs {
		var locked *guard.LockedError
		if !errors.As(err, &locked) || !strings.Contains(locked.Key, order) {
			t.Errorf("server-side error %v: no *guard.LockedError naming the key in its chain", err)
		}
	}
}

// TestStreamsHTTP2: a server stream and a bidi stream over HTTP/2 run under the lock
// their rule keys on a request header ({md.x-order}), for the whole stream; while it is
// held elsewhere they fail with CodeAborted and a RetryInfo hint.
func TestStreamsHTTP2(t *testing.T) {
	srv := redistest.Start(t)
	locker := newLocker(t, srv)
	failFast := []guard.Option{guard.Retry(guard.NoRetry())}
	guarded := connect.WithInterceptors(connectguard.NewInterceptor(locker,
		interceptor.WithUnregisteredServices("test.v1.Watch"),
		interceptor.WithRules(
			interceptor.Rule{Method: followProc, Key: "order:{md.x-order}", Options: failFast},
			interceptor.Rule{Method: chatProc, Key: "order:{md.x-order}", Options: failFast},
		)))
	mux := http.NewServeMux()
	mux.Handle(followProc, connect.NewServerStreamHandler(followProc, func(ctx context.Context, req *connect.Request[shoppb.RefundRequest], s *connect.ServerStream[shoppb.RefundReply]) error {
		for range 3 {
			if err := s.Send(leaseReply(ctx)); err != nil {
				return err
			}
		}
		return nil
	}, guarded))
	mux.Handle(chatProc, connect.NewBidiStreamHandler(chatProc, func(ctx context.Context, s *connect.BidiStream[shoppb.RefundRequest, shoppb.RefundReply]) error {
		for {
			if _, err := s.Receive(); err != nil {
				return nil // the client closed its side
			}
			if err := s.Send(leaseReply(ctx)); err != nil {
				return err
			}
		}
	}, guarded))
	url, httpClient := h2Server(t, mux)
	follow := connect.NewClient[shoppb.RefundRequest, shoppb.RefundReply](httpClient, url+followProc)
	chat := connect.NewClient[shoppb.RefundRequest, shoppb.RefundReply](httpClient, url+chatProc)

	runFollow := func(order string) ([]int64, error) {
		req := connect.NewRequest(&shoppb.RefundRequest{})
		req.Header().Set("X-Order", order)
		s, err := follow.CallServerStream(t.Context(), req)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		var tokens []int64
		for s.Receive() {
			tokens = append(tokens, s.Msg().GetToken())
		}
		return tokens, s.Err()
	}
	runChat := func(order string) ([]int64, error) {
		s := chat.CallBidiStream(t.Context())
		s.RequestHeader().Set("X-Order", order)
		var tokens []int64
		for range 3 {
			if err := s.Send(&shoppb.RefundRequest{}); err != nil {
				break // the error is the Receive's
			}
			reply, err := s.Receive()
			if err != nil {
				_ = s.CloseRequest()
				_ = s.CloseResponse()
				return tokens, err
			}
			tokens = append(tokens, reply.GetToken())
		}
		if err := s.CloseRequest(); err != nil {
			return tokens, err
		}
		// The stream ends after the handler returned and the lock was released.
		if _, err := s.Receive(); !errors.Is(err, io.EOF) {
			return tokens, fmt.Errorf("end of stream: %w", err)
		}
		return tokens, s.CloseResponse()
	}
	for name, run := range map[string]func(string) ([]int64, error){"server stream": runFollow, "bidi stream": runChat} {
		t.Run(name, func(t *testing.T) {
			tokens, err := run("s1")
			if err != nil || len(tokens) != 3 || tokens[0] == 0 || tokens[1] != tokens[0] || tokens[2] != tokens[0] {
				t.Fatalf("free: tokens %v, %v; want one lease for the whole stream", tokens, err)
			}
			le, err := locker.TryAcquire(t.Context(), "order:s1")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = le.Release(t.Context()) }()
			_, err = run("s1")
			if delay, reason, hinted := retryDelay(t, err); connect.CodeOf(err) != connect.CodeAborted || !hinted || delay <= 0 || reason != interceptor.ReasonLocked {
				t.Errorf("busy: %v (hint %v %v, reason %q), want CodeAborted with a hint", err, hinted, delay, reason)
			}
		})
	}
}
