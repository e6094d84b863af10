// Command grpc runs two gRPC services that lock the same order: Orders.Cancel holds
// "order:<id>" and calls Payments.Refund, which locks "order:<id>" too. The locks are
// declared on the methods in shoppb/shop.proto, with the (guardkit.v1.lock) option,
// and the servers read them with interceptor.WithProtoOptions(). The client
// interceptor on Orders' connection sends the lock owner, signed; Payments' server
// interceptor verifies it, so Refund reenters the lock its caller holds — across the
// service boundary, with the same fencing token — instead of waiting for it forever.
// A caller that does not hold the lock still waits, as it must.
//
//	go run ./examples/grpc                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/grpc # a real one
//
// With -serve it keeps both services up instead, on fixed loopback ports (-orders,
// default 127.0.0.1:50051; -payments, default 127.0.0.1:50052) with server reflection
// on, opens the paid orders o1 to o5 (30 each), and runs until interrupted:
//
//	go run ./examples/grpc -serve
//
// Then, in another terminal, drive it with grpcurl, which reads the services through
// reflection:
//
//	grpcurl -plaintext 127.0.0.1:50051 list
//	grpcurl -plaintext 127.0.0.1:50051 describe shop.v1.Orders.Cancel
//	grpcurl -plaintext -d '{"order_id": "o1"}' 127.0.0.1:50051 shop.v1.Orders/Cancel
//	grpcurl -plaintext -d '{"order_id": "o2"}' 127.0.0.1:50052 shop.v1.Payments/Refund
//
// or from the .proto files, run from the module's root: shop.proto imports
// guardkit/v1/lock.proto, so grpcurl needs both import paths:
//
//	grpcurl -plaintext -import-path examples/grpc/shoppb -import-path interceptor/proto -proto shop.proto -d '{"order_id": "o3"}' 127.0.0.1:50051 shop.v1.Orders/Cancel
//
// Cancel answers {"refunded": "30", "refundReentered": true, "cancelToken": …,
// "refundToken": …} with the two tokens equal — Refund reentered the lock Cancel held,
// across the services — and {"cancelToken": …} with nothing refunded once the order is
// cancelled; Refund called from outside answers {"refunded": "30", "token": …}, not
// reentered. TestGRPCServe in examples runs these lines.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"log"
	"os"
	"time"

	"google.golang.org/grpc/reflection"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	serveFlag := flag.Bool("serve", false, "keep the services up, with reflection on, until interrupted")
	ordersAddr := flag.String("orders", "127.0.0.1:50051", "with -serve, the address of Orders")
	paymentsAddr := flag.String("payments", "127.0.0.1:50052", "with -serve, the address of Payments")
	flag.Parse()
	log.SetFlags(0)
	var stay *addrs
	if *serveFlag {
		stay = &addrs{orders: *ordersAddr, payments: *paymentsAddr}
	}
	if err := run(*redisAddr, stay); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// addrs are the fixed addresses of the services in serve mode.
type addrs struct{ orders, payments string }

// run runs the services and the scenario against them, or, with stay, serves on its
// addresses until interrupted.
func run(redisAddr string, stay *addrs) error {
	rdb, err := embedded.Open(redisAddr, log.Default())
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Both services must share the signing key; load it from a secret store in
	// production. Here both run in this process, so a random one will do.
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "example", Secret: secret}})
	if err != nil {
		return err
	}

	// Each service has its own Redis client and Locker, as separate processes would.
	payRedis, orderRedis := rdb.NewClient(), rdb.NewClient()
	defer payRedis.Close()
	defer orderRedis.Close()
	payLocker, err := guard.New(payRedis, guard.TTL(10*time.Second))
	if err != nil {
		return err
	}
	defer payLocker.Close()
	orderLocker, err := guard.New(orderRedis, guard.TTL(10*time.Second))
	if err != nil {
		return err
	}
	defer orderLocker.Close()

	at := addrs{orders: "127.0.0.1:0", payments: "127.0.0.1:0"}
	if stay != nil {
		at = *stay
	}
	paySrv := startPayments(payRedis, payLocker, signer)
	defer paySrv.Stop()
	if stay != nil {
		reflection.Register(paySrv)
	}
	payAddr, err := serve(paySrv, at.payments)
	if err != nil {
		return err
	}
	orderSrv, toPayments, err := startOrders(orderRedis, orderLocker, signer, payAddr)
	if err != nil {
		return err
	}
	defer toPayments.Close()
	defer orderSrv.Stop()
	if stay != nil {
		reflection.Register(orderSrv)
	}
	orderAddr, err := serve(orderSrv, at.orders)
	if err != nil {
		return err
	}
	if stay != nil {
		return serveUntilInterrupted(rdb.Client, orderAddr, payAddr)
	}
	log.Printf("Payments on %s, Orders on %s", payAddr, orderAddr)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return scenario(ctx, rdb.Client, orderLocker, orderAddr, payAddr)
}
