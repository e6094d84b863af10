// Command deadlock runs the classic deadlock between two "processes" (two Lockers): one
// transfer holds account A and waits for account B, another holds B and waits for A.
// After the detection delay (guard.DeadlockDetection, 1s by default) guard finds the
// cycle in Redis, exactly one of the two transfers fails with guard.ErrDeadlock naming
// both accounts, and the other one completes as soon as the victim's locks are released.
//
//	go run ./examples/deadlock                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/deadlock # a real one
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
	lockers, closeLockers, err := rdb.Lockers(2) // two processes
	if err != nil {
		return err
	}
	defer closeLockers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := embedded.RunID()
	a, b := "account:A-"+id, "account:B-"+id

	var both sync.WaitGroup // both transfers hold their first account
	both.Add(2)
	errs := make([]error, 2)
	start := time.Now()
	var wg sync.WaitGroup
	for i, accounts := range [][2]string{{a, b}, {b, a}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = transfer(ctx, lockers[i], accounts[0], accounts[1], &both)
		}()
	}
	wg.Wait()
	victims := 0
	for i, err := range errs {
		switch {
		case err == nil:
			log.Printf("transfer %d completed after %s", i+1, time.Since(start).Round(100*time.Millisecond))
		case errors.Is(err, guard.ErrDeadlock):
			victims++
			log.Printf("transfer %d failed: %v", i+1, err)
		default:
			return fmt.Errorf("transfer %d: %w", i+1, err)
		}
	}
	if victims != 1 {
		return fmt.Errorf("%d transfers failed with ErrDeadlock, want exactly 1", victims)
	}
	fmt.Println("ok: one deadlock, one victim, the other transfer completed")
	return nil
}

// readme:begin deadlock
// transfer holds from, then takes to inside it; both is done once from is held.
func transfer(ctx context.Context, l *guard.Locker, from, to string, both *sync.WaitGroup) error {
	return guard.Do(ctx, func(ctx context.Context) error {
		both.Done()
		both.Wait() // the other transfer holds its first account: a cycle forms
		return guard.Do(ctx, move, guard.Use(l), guard.RawKey(to))
	}, guard.Use(l), guard.RawKey(from))
}

// readme:end

// move moves the money.
func move(context.Context) error { return nil }
