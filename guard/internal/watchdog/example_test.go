package watchdog_test

import (
	"context"
	"fmt"
	"time"

	"github.com/guardkit/guardkit/guard/internal/watchdog"
)

type lease struct {
	key string
	e   watchdog.Entry[*lease]
}

// A Dog renews leases through the functions it is given: here each renewal succeeds,
// and the third ends the example.
func Example() {
	renewed := make(chan string, 10)
	d := watchdog.New(watchdog.Config[*lease]{
		Interval: func(*lease) time.Duration { return 10 * time.Millisecond },
		Send: func(batch []*lease, sent time.Time) []watchdog.Result {
			res := make([]watchdog.Result, len(batch))
			for i := range batch {
				res[i] = watchdog.Result{TTL: time.Second} // e.g. PEXPIRE sent and confirmed
			}
			return res
		},
		Report: func(batch []*lease, live []bool, sent time.Time, res []watchdog.Result) {
			for i, l := range batch {
				if live[i] && res[i].Err == nil {
					renewed <- l.key
				}
			}
		},
	})
	defer d.Close()
	l := &lease{key: "orders:42"}
	d.Add(&l.e, l, time.Now())
	for range 3 {
		fmt.Println("renewed", <-renewed)
	}
	d.Remove(context.Background(), &l.e, true)
	// Output:
	// renewed orders:42
	// renewed orders:42
	// renewed orders:42
}
