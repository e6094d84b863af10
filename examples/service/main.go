// Command service runs plain Go service methods decorated with guard.Wrap: a shop whose
// checkout locks the order and, nested inside, the product and (reentering) the order
// again. Duplicate submissions of every order race each other and a short stock; the
// locks make each order paid once and the stock never oversold.
//
//	go run ./examples/service                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/service # a real one
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/examples/service/shop"
	"github.com/guardkit/guardkit/guard"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	orders := flag.Int("orders", 6, "orders, each submitted twice at once")
	stock := flag.Int64("stock", 5, "items in stock (one per order)")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*redisAddr, *orders, *stock); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(redisAddr string, orders int, stock int64) error {
	rdb, err := embedded.Open(redisAddr, log.Default())
	if err != nil {
		return err
	}
	defer rdb.Close()
	locker, err := guard.New(rdb.Client, guard.TTL(10*time.Second))
	if err != nil {
		return err
	}
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := shop.New(rdb.Client, locker)
	const sku = "mug"
	run := embedded.RunID() // fresh order IDs, so that runs against a real Redis do not mix
	if err := s.Restock(ctx, sku, stock); err != nil {
		return err
	}
	log.Printf("%d orders of 1 × %s, each submitted twice at once; %d in stock", orders, sku, stock)

	var (
		mu                    sync.Mutex
		paid, dup, outOfStock int
		reentered             = true
		wg                    sync.WaitGroup
	)
	for i := range orders * 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := fmt.Sprintf("order-%s-%d", run, i/2+1)
			// Each submission is its own request: context.Background() has no owner, so
			// Checkout takes a fresh one and the twin submission waits for it.
			r, err := s.Checkout(ctx, shop.CheckoutRequest{OrderID: order, SKU: sku, Qty: 1})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, shop.ErrOutOfStock):
				outOfStock++
				log.Printf("  %s: out of stock", order)
			case err != nil:
				log.Printf("  %s: %v", order, err)
			case r.Duplicate:
				dup++
				log.Printf("  %s: already paid, nothing charged twice", order)
			default:
				paid++
				reentered = reentered && r.Payment.Reentered
				log.Printf("  %s: paid (Pay reentered the order lock: %v, fencing token %d); %d left",
					order, r.Payment.Reentered, r.Payment.Token, r.StockLeft)
			}
		}()
	}
	wg.Wait()

	left, err := s.Stock(ctx, sku)
	if err != nil {
		return err
	}
	want := min(int64(orders), stock)
	log.Printf("paid %d, duplicates %d, out of stock %d; stock %d → %d", paid, dup, outOfStock, stock, left)
	if int64(paid) != want || left != stock-want || paid+dup+outOfStock != 2*orders || !reentered {
		return fmt.Errorf("service: want %d orders paid once each, by a reentrant Pay, and %d left; got %d paid and %d left",
			want, stock-want, paid, left)
	}
	log.Print("ok: every order paid once, stock never oversold")
	return nil
}
