package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// serveOrders are the orders serve mode opens, paid, 30 each.
var serveOrders = []string{"o1", "o2", "o3", "o4", "o5"}

// serveUntilInterrupted opens serveOrders (again: a cancelled order becomes paid) and
// waits for SIGINT or SIGTERM while the servers serve.
func serveUntilInterrupted(rdb *redis.Client, orderAddr, payAddr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, id := range serveOrders {
		if err := rdb.Del(ctx, orderKey(id)).Err(); err != nil {
			return err
		}
		if err := rdb.HSet(ctx, orderKey(id), "amount", 30, "status", "paid").Err(); err != nil {
			return err
		}
	}
	log.Printf("serving: Orders on %s, Payments on %s, with reflection; orders %v are paid; interrupt to stop", orderAddr, payAddr, serveOrders)
	<-ctx.Done()
	log.Print("stopping")
	return nil
}
