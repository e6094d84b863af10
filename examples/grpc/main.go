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
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"log"
	"os"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
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

func run(redisAddr string) error {
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

	paySrv := startPayments(payRedis, payLocker, signer)
	defer paySrv.Stop()
	payAddr, err := serve(paySrv)
	if err != nil {
		return err
	}
	orderSrv, toPayments, err := startOrders(orderRedis, orderLocker, signer, payAddr)
	if err != nil {
		return err
	}
	defer toPayments.Close()
	defer orderSrv.Stop()
	orderAddr, err := serve(orderSrv)
	if err != nil {
		return err
	}
	log.Printf("Payments on %s, Orders on %s", payAddr, orderAddr)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return scenario(ctx, rdb.Client, orderLocker, orderAddr, payAddr)
}
