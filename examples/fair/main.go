// Command fair serves payment retries of one account in the order they arrived, across
// three "processes" (three Lockers), with guard.Fair: a release grants the lock, in Redis,
// to the owner that queued first, and a newcomer cannot take it in between. The retries
// queue one after another behind a holder; the order they run in must be the order they
// arrived in.
//
//	go run ./examples/fair                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/fair # a real one
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	retries := flag.Int("retries", 9, "payment retries, spread over three processes")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*redisAddr, *retries); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(redisAddr string, retries int) error {
	rdb, err := embedded.Open(redisAddr, log.Default())
	if err != nil {
		return err
	}
	defer rdb.Close()
	lockers, closeLockers, err := rdb.Lockers(3, guard.TTL(5*time.Second)) // three processes
	if err != nil {
		return err
	}
	defer closeLockers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := "payments:account-" + embedded.RunID()
	queue := "guard:{" + key + "}:fair:owners" // the owners queued for the fair lock
	log.Printf("%d retries of %s queue behind a holder, in three processes", retries, key)

	holder, err := lockers[0].Acquire(ctx, key, guard.Fair())
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		served  []int
		tokens  []int64
		wg      sync.WaitGroup
		errs    = make(chan error, retries)
		arrived []int
	)
	for i := range retries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := guard.Do(ctx, func(ctx context.Context) error {
				lease, _ := guard.LeaseFromContext(ctx)
				mu.Lock()
				served, tokens = append(served, i), append(tokens, lease.Token())
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the retry's work
				return nil
			}, guard.Use(lockers[i%3]), guard.RawKey(key), guard.Fair(), guard.Retry(guard.MaxWait(20*time.Second, nil)))
			if err != nil {
				errs <- fmt.Errorf("retry %d: %w", i, err)
			}
		}()
		// Let retry i queue before retry i+1 arrives.
		for n := int64(0); n != int64(i+1); {
			if n, err = rdb.Client.LLen(ctx, queue).Result(); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(time.Millisecond)
		}
		arrived = append(arrived, i)
	}
	// A newcomer that did not queue cannot jump ahead of them.
	if err := holder.Release(ctx); err != nil {
		return err
	}
	_, jump := lockers[1].TryAcquire(ctx, key, guard.Fair())
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	log.Printf("arrived %v", arrived)
	log.Printf("served  %v", served)
	switch {
	case !slices.Equal(served, arrived):
		return fmt.Errorf("FAIL: retries were served in the order %v, not in their arrival order %v", served, arrived)
	case !slices.IsSorted(tokens):
		return fmt.Errorf("FAIL: fencing tokens %v do not rise in serving order", tokens)
	case !errors.Is(jump, guard.ErrLocked):
		return fmt.Errorf("FAIL: a newcomer's TryAcquire at the release got %v, want guard.ErrLocked", jump)
	}
	log.Printf("ok: %d retries served in arrival order across three processes; a newcomer could not jump the queue", retries)
	return nil
}
