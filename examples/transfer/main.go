// Command transfer moves money between accounts from two "processes" (two Lockers) at
// once, each transfer locking both of its accounts as one lock:
//
//	transfer := guard.Wrap(move, guard.Keys("account:{req.From}", "account:{req.To}"))
//
// The balances live in Redis and each transfer reads both, pauses, and writes both back:
// without the locks, concurrent transfers would overwrite each other and money would
// appear or vanish. Half the transfers go A→B while the other half go B→A, the order that
// deadlocks two nested single-key locks (see examples/deadlock); guard takes a set's keys
// in one canonical order, so none waits in a cycle and none fails with ErrDeadlock. Each
// balance write is fenced by its own account's token (Lease.Tokens): a write from a
// holder whose lease ran out would be refused.
//
//	go run ./examples/transfer                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/transfer # a real one
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	rounds := flag.Int("transfers", 100, "transfers per worker")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*redisAddr, *rounds); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// Transfer is one request: move Amount from account From to account To.
type Transfer struct {
	From, To string
	Amount   int64
}

// bank keeps balances in Redis, each with the fencing token of the last write, and
// refuses a write whose token is older (a fenced store).
type bank struct {
	rdb *redis.Client
	ns  string
}

// fencedSet writes balance under token unless a newer token wrote the account already.
var fencedSet = redis.NewScript(`
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if tonumber(ARGV[2]) < last then return 0 end
redis.call('HSET', KEYS[1], 'balance', ARGV[1], 'token', ARGV[2])
return 1`)

func (b *bank) key(account string) string { return b.ns + ":balance:" + account }

func (b *bank) balance(ctx context.Context, account string) (int64, error) {
	return b.rdb.HGet(ctx, b.key(account), "balance").Int64()
}

func (b *bank) write(ctx context.Context, account string, balance, token int64) error {
	ok, err := fencedSet.Run(ctx, b.rdb, []string{b.key(account)}, balance, token).Int()
	if err == nil && ok == 0 {
		err = fmt.Errorf("write to %s refused: fencing token %d is stale", account, token)
	}
	return err
}

// move is the service method: read both balances, think, write both back.
func (b *bank) move(ctx context.Context, t Transfer) (struct{}, error) {
	le, _ := guard.LeaseFromContext(ctx)
	// Each account is written under the token of its own key.
	token := func(account string) int64 { return le.Tokens()[slices.Index(le.Keys(), "account:"+account)] }
	from, err := b.balance(ctx, t.From)
	if err != nil {
		return struct{}{}, err
	}
	to, err := b.balance(ctx, t.To)
	if err != nil {
		return struct{}{}, err
	}
	if from < t.Amount {
		return struct{}{}, nil // not enough money: nothing moves
	}
	time.Sleep(time.Millisecond) // work between the reads and the writes
	if err := b.write(ctx, t.From, from-t.Amount, token(t.From)); err != nil {
		return struct{}{}, err
	}
	return struct{}{}, b.write(ctx, t.To, to+t.Amount, token(t.To))
}

func run(redisAddr string, rounds int) error {
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
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	id := embedded.RunID()
	b := &bank{rdb: rdb.Client, ns: "transfer-" + id}
	accounts := []string{"A-" + id, "B-" + id, "C-" + id}
	const opening = 1000
	for _, a := range accounts {
		if err := b.rdb.HSet(ctx, b.key(a), "balance", opening, "token", 0).Err(); err != nil {
			return err
		}
	}

	// Each "process" has two workers; worker w of process p moves money from accounts[p]
	// to accounts[1-p] or back, so the two processes list the same pair in opposite
	// orders all the time, and now and then a third account joins.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	start := time.Now()
	for p, l := range lockers {
		transfer := guard.Wrap(b.move, guard.Use(l), guard.Keys("account:{req.From}", "account:{req.To}"),
			guard.Retry(guard.MaxWait(20*time.Second, nil)))
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(p), uint64(w)))
				for range rounds {
					from, to := accounts[p], accounts[1-p]
					if rng.IntN(2) == 0 {
						from, to = to, from
					}
					switch rng.IntN(10) {
					case 0:
						to = accounts[2]
					case 1:
						from = accounts[2]
					}
					if _, err := transfer(ctx, Transfer{From: from, To: to, Amount: 1 + rng.Int64N(50)}); err != nil {
						if errors.Is(err, guard.ErrDeadlock) {
							err = fmt.Errorf("a canonical order never deadlocks, yet: %w", err)
						}
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	var total int64
	for _, a := range accounts {
		n, err := b.balance(ctx, a)
		if err != nil {
			return err
		}
		log.Printf("account %s: %d", a[:1], n)
		total += n
	}
	if want := int64(opening * len(accounts)); total != want {
		return fmt.Errorf("the accounts hold %d in all, want %d: transfers overlapped", total, want)
	}
	fmt.Printf("ok: %d transfers in %s from two processes, pairs locked in opposite orders: no deadlock, no money made or lost\n",
		4*rounds, time.Since(start).Round(10*time.Millisecond))
	return nil
}
