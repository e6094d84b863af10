package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/guardkit/guardkit/guard"
)

// Two requests take the same two accounts in opposite order. After the detection delay
// (here 200ms; 1s by default) exactly one of them fails with ErrDeadlock, whose
// *DeadlockError names the cycle; its locks are released as Do returns, and the other
// completes.
func ExampleDeadlockDetection() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb, guard.DeadlockDetection(200*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	var both sync.WaitGroup
	both.Add(2)
	transfer := func(from, to string) error {
		return guard.Do(context.Background(), func(ctx context.Context) error {
			both.Done()
			both.Wait() // each holds its first account: a cycle
			return guard.Do(ctx, func(context.Context) error { return nil }, guard.Use(locker), guard.RawKey(to))
		}, guard.Use(locker), guard.RawKey(from))
	}
	errs := make(chan error, 2)
	go func() { errs <- transfer("account:1", "account:2") }()
	go func() { errs <- transfer("account:2", "account:1") }()
	for range 2 {
		var de *guard.DeadlockError
		if err := <-errs; errors.As(err, &de) {
			var keys []string
			for _, wait := range de.Cycle {
				keys = append(keys, wait.Key)
			}
			sort.Strings(keys)
			fmt.Println("deadlock:", errors.Is(err, guard.ErrDeadlock), "— the cycle's keys:", keys)
		} else {
			fmt.Println("completed:", err == nil)
		}
	}
	// Output:
	// deadlock: true — the cycle's keys: [account:1 account:2]
	// completed: true
}
