// readme:begin minimal

// Command minimal takes a lock by hand and runs a function under one: the first program
// of the README. It needs a Redis at $REDIS_ADDR, else localhost:6379.
package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
)

// PayRequest asks to pay an order.
type PayRequest struct{ OrderID string }

func main() {
	rdb := redis.NewClient(&redis.Options{Addr: cmp.Or(os.Getenv("REDIS_ADDR"), "localhost:6379")})
	defer rdb.Close()
	locker, err := guard.New(rdb) // makes no Redis call
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := locker.Ping(ctx); err != nil { // fail now if Redis is down; Ping answers readiness probes too
		log.Fatal(err)
	}

	// Wrapped: each call runs under the lock of its order, renewed while it runs,
	// released when it returns; a busy order is waited for up to 5s.
	pay := guard.Wrap(func(ctx context.Context, req PayRequest) (string, error) {
		return "paid order " + req.OrderID, nil // ctx ends if the lease is lost
	}, guard.Use(locker), guard.Key("order:{req.OrderID}"))
	receipt, err := pay(ctx, PayRequest{OrderID: "42"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(receipt)

	// By hand: acquire, work, release. A lock another owner holds makes Acquire wait
	// until ctx ends, then fail with a *guard.LockedError (errors.Is guard.ErrLocked).
	lease, err := locker.Acquire(ctx, "order:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", lease.Key(), "with fencing token", lease.Token())
	// Nested calls take the lease's context and reenter; with ctx they would be a
	// sibling of this hold and wait for it.
	if _, err := pay(lease.Context(), PayRequest{OrderID: "42"}); err != nil {
		log.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
}

// readme:end
