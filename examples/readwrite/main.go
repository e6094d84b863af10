// Command readwrite runs an account statement store under a read-write lock: many
// readers, in two "processes" (two Lockers), read the statement together under
// guard.Read while a poster appends entries under guard.Write. A posting writes two Redis
// keys — the entries and their total — one after the other with a pause between, so a
// reader that got in during a posting would see them disagree: none does. The poster
// then reads its own posting back under the same owner (a downgrade), and a reader that
// asks to write is refused with guard.ErrUpgrade instead of deadlocking.
//
//	go run ./examples/readwrite                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/readwrite # a real one
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	readers := flag.Int("readers", 8, "reader goroutines per process (two processes)")
	posts := flag.Int("posts", 10, "postings")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*redisAddr, *readers, *posts); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// store is the statement of one account: its entries (a list) and their total (a
// string), written one after the other.
type store struct {
	rdb            redis.UniversalClient
	entries, total string
}

func (s store) post(ctx context.Context, amount int64) error {
	if err := s.rdb.RPush(ctx, s.entries, amount).Err(); err != nil {
		return err
	}
	time.Sleep(3 * time.Millisecond) // a reader in here would see the two disagree
	return s.rdb.IncrBy(ctx, s.total, amount).Err()
}

// read returns the statement and whether its entries add up to its total.
func (s store) read(ctx context.Context) (n int, consistent bool, err error) {
	entries, err := s.rdb.LRange(ctx, s.entries, 0, -1).Result()
	if err != nil {
		return 0, false, err
	}
	total, err := s.rdb.Get(ctx, s.total).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, err
	}
	var sum int64
	for _, e := range entries {
		v, _ := strconv.ParseInt(e, 10, 64)
		sum += v
	}
	return len(entries), sum == total, nil
}

func run(redisAddr string, readers, posts int) error {
	rdb, err := embedded.Open(redisAddr, log.Default())
	if err != nil {
		return err
	}
	defer rdb.Close()
	lockers, closeLockers, err := rdb.Lockers(2, guard.TTL(5*time.Second)) // two processes
	if err != nil {
		return err
	}
	defer closeLockers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := embedded.RunID()
	key := "account:" + id
	s := store{rdb: rdb.Client, entries: "statement:" + id + ":entries", total: "statement:" + id + ":total"}
	defer rdb.Client.Del(context.Background(), s.entries, s.total)
	log.Printf("%d readers in each of 2 processes read %s's statement while %d postings are made", readers, key, posts)

	var (
		reads, torn, inside, peak atomic.Int64
		done                      = make(chan struct{})
		wg                        sync.WaitGroup
		errs                      = make(chan error, 2*readers+1)
	)
	for _, l := range lockers {
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-done:
						return
					default:
					}
					err := guard.Do(ctx, func(ctx context.Context) error {
						now := inside.Add(1)
						defer inside.Add(-1)
						for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
						}
						_, ok, err := s.read(ctx)
						if !ok {
							torn.Add(1)
						}
						time.Sleep(time.Millisecond)
						return err
					}, guard.Use(l), guard.RawKey(key), guard.Read())
					if err != nil {
						errs <- fmt.Errorf("reader: %w", err)
						return
					}
					reads.Add(1)
				}
			}()
		}
	}

	var waits []time.Duration
	post := guard.Wrap(func(ctx context.Context, amount int64) (int, error) {
		if err := s.post(ctx, amount); err != nil {
			return 0, err
		}
		// Read the posting back under the same owner: the writer takes the read lock too.
		var n int
		err := guard.Do(ctx, func(ctx context.Context) error {
			var ok bool
			var err error
			if n, ok, err = s.read(ctx); err == nil && !ok {
				err = errors.New("the writer read back a torn statement")
			}
			return err
		}, guard.Use(lockers[0]), guard.RawKey(key), guard.Read())
		return n, err
	}, guard.Use(lockers[0]), guard.RawKey(key), guard.Write(), guard.Retry(guard.MaxWait(10*time.Second, nil)))
	start := time.Now()
	for i := range posts {
		t := time.Now()
		n, err := post(ctx, int64(10*(i+1)))
		if err != nil {
			close(done)
			wg.Wait()
			return fmt.Errorf("posting %d: %w", i+1, err)
		}
		waits = append(waits, time.Since(t))
		log.Printf("  posting %d done; the statement has %d entries", i+1, n)
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}

	// A reader that asks to write is refused at once.
	reader, err := lockers[1].Acquire(ctx, key, guard.Read())
	if err != nil {
		return err
	}
	_, upgrade := lockers[1].Acquire(reader.Context(), key, guard.Write())
	if err := reader.Release(ctx); err != nil {
		return err
	}
	log.Printf("a reader asking to write: %v", upgrade)

	n, ok, err := s.read(ctx)
	if err != nil {
		return err
	}
	slowest := slices.Max(waits)
	log.Printf("%d reads (%.0f/s), up to %d readers at once; %d postings, the slowest took %s; %d torn reads",
		reads.Load(), float64(reads.Load())/elapsed.Seconds(), peak.Load(), posts, slowest.Round(time.Millisecond), torn.Load())
	switch {
	case torn.Load() != 0:
		return fmt.Errorf("FAIL: %d readers saw a posting half made", torn.Load())
	case n != posts || !ok:
		return fmt.Errorf("FAIL: the statement has %d entries (want %d), consistent %v", n, posts, ok)
	case peak.Load() < 2:
		return fmt.Errorf("FAIL: readers never read together (peak %d)", peak.Load())
	case !errors.Is(upgrade, guard.ErrUpgrade):
		return fmt.Errorf("FAIL: a reader asking to write got %v, want guard.ErrUpgrade", upgrade)
	}
	log.Printf("ok: readers shared the statement (up to %d at once), no reader saw a posting half made", peak.Load())
	return nil
}
