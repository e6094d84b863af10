package shop_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"sync"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/examples/service/shop"
	"github.com/guardkit/guardkit/guard"
)

// A checkout submitted twice at the same moment is paid once: the second submission
// waits for the order's lock and then finds the order paid.
func Example() {
	rdb, err := embedded.Open("", log.New(io.Discard, "", 0))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rdb.Close()
	locker, err := guard.New(rdb.Client)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx := context.Background()
	s := shop.New(rdb.Client, locker)
	if err := s.Restock(ctx, "example-mug", 3); err != nil {
		fmt.Println(err)
		return
	}
	order := shop.CheckoutRequest{OrderID: fmt.Sprintf("example-%p", s), SKU: "example-mug", Qty: 1}
	receipts := make([]shop.Receipt, 2)
	var wg sync.WaitGroup
	for i := range receipts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if receipts[i], err = s.Checkout(ctx, order); err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	paid, dup := 0, 0
	for _, r := range receipts {
		if r.Duplicate {
			dup++
		} else if r.Payment.Reentered {
			paid++
		}
	}
	left, _ := s.Stock(ctx, "example-mug")
	fmt.Printf("paid %d, duplicates %d, stock left %d\n", paid, dup, left)
	// Output: paid 1, duplicates 1, stock left 2
}
