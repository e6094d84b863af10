package connectguard_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/examples/grpc/shoppb"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// The procedures of the tests: two of the grpc example's services, whose .proto file
// declares their locks, and a streaming service without descriptors.
const (
	cancelProc = "/shop.v1.Orders/Cancel"
	refundProc = "/shop.v1.Payments/Refund"
	followProc = "/test.v1.Watch/Follow" // server stream
	chatProc   = "/test.v1.Watch/Chat"   // bidi stream
)

// newLocker returns a Locker on a new client of srv, closed at cleanup.
func newLocker(t testing.TB, srv *redistest.Server, opts ...guard.Option) *guard.Locker {
	t.Helper()
	l, err := guard.New(srv.Client(t), opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mustSigner(t testing.TB) *ctxid.Signer {
	t.Helper()
	s, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// h2Server serves h over TLS with HTTP/2 until cleanup, failing the test if a request
// arrives over anything else, and returns its URL and a client for it.
func h2Server(t testing.TB, h http.Handler) (string, *http.Client) {
	t.Helper()
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("%s arrived over %s, want HTTP/2", r.URL.Path, r.Proto)
		}
		h.ServeHTTP(w, r)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	c := s.Client()
	c.Timeout = 20 * time.Second
	t.Cleanup(c.CloseIdleConnections)
	return s.URL, c
}

// leaseReply is a RefundReply that says which lease the handler ran under.
func leaseReply(ctx context.Context) *shoppb.RefundReply {
	le, ok := guard.LeaseFromContext(ctx)
	if !ok {
		return &shoppb.RefundReply{}
	}
	return &shoppb.RefundReply{Refunded: 1, Reentered: le.Reentrant(), Token: le.Token()}
}

// counter is a read-modify-write counter that loses updates unless its callers take
// turns: add yields between the read and the write.
type counter struct{ n atomic.Int64 }

func (c *counter) add() {
	n := c.n.Load()
	time.Sleep(time.Millisecond) // another call would read the same n here
	c.n.Store(n + 1)
}

// retryDelay returns the RetryInfo delay and the ErrorInfo reason in err's details.
func retryDelay(t testing.TB, err error) (time.Duration, string, bool) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, "", false
	}
	var (
		delay  time.Duration
		reason string
		hinted bool
	)
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			t.Errorf("detail %s: %v", d.Type(), err)
			continue
		}
		switch v := v.(type) {
		case *errdetails.RetryInfo:
			delay, hinted = v.GetRetryDelay().AsDuration(), true
		case *errdetails.ErrorInfo:
			if reason == "" {
				reason = v.GetReason()
			}
		}
	}
	return delay, reason, hinted
}

// errorLog records the errors an outer handler interceptor sees, as a logging
// interceptor would.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) interceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err != nil {
				l.mu.Lock()
				l.errs = append(l.errs, err)
				l.mu.Unlock()
			}
			return resp, err
		}
	})
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// ctxidEnsure returns the test's context with a fresh owner.
func ctxidEnsure(t testing.TB) (context.Context, ctxid.ID) {
	return ctxid.Ensure(t.Context())
}
