package connectguard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/guardkit/guardkit/connectguard"
	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/examples/grpc/shoppb"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
)

func cancelOrder(ctx context.Context, req *connect.Request[shoppb.CancelRequest]) (*connect.Response[shoppb.CancelReply], error) {
	le, _ := guard.LeaseFromContext(ctx) // the order's lease; its Token fences writes
	return connect.NewResponse(&shoppb.CancelReply{CancelToken: le.Token()}), nil
}

// Lock a connect handler's procedures as their .proto file declares, and trust the
// owners of calling services that share the signing key.
func ExampleNewInterceptor() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("32 random bytes from your vault!")}})
	if err != nil {
		log.Fatal(err)
	}

	guarded := connect.WithInterceptors(connectguard.NewInterceptor(locker,
		interceptor.WithProtoOptions(), // Cancel: option (guardkit.v1.lock) = { key: "order:{order_id}" }
		interceptor.WithSigner(signer),
	))
	mux := http.NewServeMux()
	mux.Handle("/shop.v1.Orders/Cancel", connect.NewUnaryHandler("/shop.v1.Orders/Cancel", cancelOrder, guarded))
	// Generated code reads: mux.Handle(shopv1connect.NewOrdersHandler(orders, guarded))
	_ = http.ListenAndServe(":8080", mux)
}

// Lock procedures from Go with rules; a stream's key comes from its request headers.
func ExampleNewInterceptor_rules() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	_ = connectguard.NewInterceptor(locker,
		interceptor.WithUnregisteredServices("shop.v1.Tracking"), // no descriptors linked in
		interceptor.WithRules(
			interceptor.Rule{Method: "/shop.v1.Orders/Cancel", Key: "order:{req.order_id}",
				Options: []guard.Option{guard.Retry(guard.MaxWait(2*time.Second, nil))}},
			interceptor.Rule{Method: "/shop.v1.Tracking/Follow", Key: "order:{md.x-order}"},
		))
}

// Carry the caller's owner to the services a handler calls, and obey the retry hint of
// a busy lock.
func ExampleNewClientInterceptor() {
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("32 random bytes from your vault!")}})
	if err != nil {
		log.Fatal(err)
	}
	refund := connect.NewClient[shoppb.RefundRequest, shoppb.RefundReply](http.DefaultClient,
		"http://payments.internal:8080/shop.v1.Payments/Refund",
		connect.WithInterceptors(connectguard.NewClientInterceptor(signer)))

	ctx := context.Background() // in a guarded handler: its ctx, which carries the owner
	_, err = refund.CallUnary(ctx, connect.NewRequest(&shoppb.RefundRequest{OrderId: "42"}))
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() == connect.CodeAborted {
		for _, d := range ce.Details() {
			if v, err := d.Value(); err == nil {
				if ri, ok := v.(*errdetails.RetryInfo); ok {
					fmt.Println("busy; retry in", ri.GetRetryDelay().AsDuration())
				}
			}
		}
	}
}
