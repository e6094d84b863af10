// Command connect locks connect-go procedures with package connectguard, over HTTP/2
// without TLS (h2c): the grpc example's Orders and Payments services, whose .proto file
// declares their locks, served by connect handlers. Twenty concurrent cancellations of
// one order refund it once; Cancel, holding the order's lock, calls Refund, which
// reenters it through the client interceptor; a cancellation of an order held
// elsewhere fails with CodeAborted and a retry hint. It is its own module (like
// connectguard), so that guardkit's module does not require connect.
//
//	cd examples/connect && go run .                           # embedded Redis
//	cd examples/connect && REDIS_ADDR=localhost:6379 go run . # a real one
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/guardkit/guardkit/connectguard"
	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/examples/grpc/shoppb"
	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
)

const (
	cancelProc = "/shop.v1.Orders/Cancel"
	refundProc = "/shop.v1.Payments/Refund"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*redisAddr); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// shop is both services' state: refunds per order.
type shop struct {
	mu       sync.Mutex
	refunded map[string]int64
	refund   *connect.Client[shoppb.RefundRequest, shoppb.RefundReply]
}

// Cancel refunds the order through Payments, holding the order's lock.
func (s *shop) Cancel(ctx context.Context, req *connect.Request[shoppb.CancelRequest]) (*connect.Response[shoppb.CancelReply], error) {
	reply, err := s.refund.CallUnary(ctx, connect.NewRequest(&shoppb.RefundRequest{OrderId: req.Msg.GetOrderId()}))
	if err != nil {
		return nil, err
	}
	le, _ := guard.LeaseFromContext(ctx)
	return connect.NewResponse(&shoppb.CancelReply{Refunded: reply.Msg.GetRefunded(), RefundReentered: reply.Msg.GetReentered(),
		CancelToken: le.Token(), RefundToken: reply.Msg.GetToken()}), nil
}

// Refund pays the order back once, under the order's lock: a read, a pause, a write.
func (s *shop) Refund(ctx context.Context, req *connect.Request[shoppb.RefundRequest]) (*connect.Response[shoppb.RefundReply], error) {
	id := req.Msg.GetOrderId()
	s.mu.Lock()
	done := s.refunded[id]
	s.mu.Unlock()
	time.Sleep(time.Millisecond) // a concurrent refund would read the same state here
	var amount int64
	if done == 0 {
		amount = 30
		s.mu.Lock()
		s.refunded[id] += amount
		s.mu.Unlock()
	}
	le, _ := guard.LeaseFromContext(ctx)
	return connect.NewResponse(&shoppb.RefundReply{Refunded: amount, Reentered: le.Reentrant(), Token: le.Token()}), nil
}

func run(redisAddr string) error {
	rdb, err := embedded.Open(redisAddr, log.Default())
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Two services; a busy order is waited for up to 2s (the Locker's Retry, which
	// applies where shop.proto gives no max_wait).
	lockers, closeLockers, err := rdb.Lockers(2, guard.TTL(5*time.Second), guard.Retry(guard.MaxWait(2*time.Second, nil)))
	if err != nil {
		return err
	}
	defer closeLockers()
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "demo", Secret: []byte("a 32-byte secret shared by both!")}})
	if err != nil {
		return err
	}
	s := &shop{refunded: map[string]int64{}}

	// readme:begin connect
	// Each service locks its procedures as shop.proto declares, (guardkit.v1.lock), and
	// trusts owners signed with the shared key; clients carry the caller's owner.
	orders := http.NewServeMux()
	orders.Handle(cancelProc, connect.NewUnaryHandler(cancelProc, s.Cancel, connect.WithInterceptors(
		connectguard.NewInterceptor(lockers[0], interceptor.WithProtoOptions(), interceptor.WithSigner(signer)))))
	payments := http.NewServeMux()
	payments.Handle(refundProc, connect.NewUnaryHandler(refundProc, s.Refund, connect.WithInterceptors(
		connectguard.NewInterceptor(lockers[1], interceptor.WithProtoOptions(), interceptor.WithSigner(signer)))))
	// readme:end
	ordersURL, stopOrders, err := serveH2C(orders)
	if err != nil {
		return err
	}
	defer stopOrders()
	paymentsURL, stopPayments, err := serveH2C(payments)
	if err != nil {
		return err
	}
	defer stopPayments()
	h2c := h2cClient()
	defer h2c.CloseIdleConnections()
	s.refund = connect.NewClient[shoppb.RefundRequest, shoppb.RefundReply](h2c, paymentsURL+refundProc,
		connect.WithInterceptors(connectguard.NewClientInterceptor(signer)))
	cancel := connect.NewClient[shoppb.CancelRequest, shoppb.CancelReply](h2c, ordersURL+cancelProc)
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	order := "order-" + embedded.RunID()

	// 1. Twenty concurrent cancellations: one refund of 30, each Refund reentering its
	// Cancel's lock.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
		errs  []error
	)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := cancel.CallUnary(ctx, connect.NewRequest(&shoppb.CancelRequest{OrderId: order}))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case !r.Msg.GetRefundReentered() || r.Msg.GetRefundToken() != r.Msg.GetCancelToken():
				errs = append(errs, fmt.Errorf("Refund did not reenter Cancel's lock: %v", r.Msg))
			default:
				total += r.Msg.GetRefunded()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if total != 30 {
		return fmt.Errorf("20 cancellations refunded %d, want 30 once", total)
	}
	log.Printf("20 concurrent cancellations over h2c: refunded %d once; every Refund reentered its Cancel's lock", total)

	// 2. An order held elsewhere: CodeAborted with a retry hint, after a 2s wait.
	held, err := lockers[1].Acquire(ctx, "order:"+order+"-held")
	if err != nil {
		return err
	}
	_, err = cancel.CallUnary(ctx, connect.NewRequest(&shoppb.CancelRequest{OrderId: order + "-held"}))
	_ = held.Release(ctx)
	hint, ok := retryHint(err)
	if connect.CodeOf(err) != connect.CodeAborted || !ok {
		return fmt.Errorf("busy order: %v, want CodeAborted with a retry hint", err)
	}
	log.Printf("busy order: %v (%s), retry in %v", connect.CodeOf(err), err.(*connect.Error).Message(), hint)
	fmt.Println("ok: one refund for 20 cancellations; Refund reentered Cancel's lock over connect")
	return nil
}

// retryHint returns the RetryInfo delay in a connect error's details.
func retryHint(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, false
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration(), true
			}
		}
	}
	return 0, false
}

// serveH2C serves h over HTTP/2 without TLS on a loopback port.
func serveH2C(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: p, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// h2cClient speaks HTTP/2 without TLS.
func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}, Timeout: 20 * time.Second}
}
