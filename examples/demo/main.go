// Command demo is what make demo runs: the echo example's wallet under a burst of
// concurrent, conflicting withdrawals, once with its lock middleware and once without,
// and a report of what each run did to the balances.
//
// Every withdrawal reads a balance, works for a few milliseconds and writes the new
// balance back. With middleware.Lock on "account:{param.id}" the withdrawals of one
// account run one at a time and every one of them counts; without it, withdrawals that
// overlap overwrite each other and money is lost from the books. The demo exits with
// status 1 if the guarded run loses a single update.
//
//	go run ./examples/demo                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/demo # a real one
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/guardkit/guardkit/examples/echo/wallet"
	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
)

func main() {
	var c config
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	flag.IntVar(&c.accounts, "accounts", 10, "accounts")
	flag.IntVar(&c.requests, "requests", 200, "concurrent withdrawals per run")
	flag.Int64Var(&c.amount, "amount", 10, "amount of each withdrawal")
	flag.Int64Var(&c.balance, "balance", 1000, "opening balance of each account")
	flag.DurationVar(&c.work, "work", 5*time.Millisecond, "time a withdrawal spends between reading and writing the balance")
	flag.DurationVar(&c.maxWait, "maxwait", 5*time.Second, "how long a guarded request waits for its account's lock before 409 (0: guard's default, 5s)")
	flag.Parse()
	log.SetFlags(0)
	log.SetOutput(os.Stdout) // one stream, so that the report reads in order
	if c.accounts < 1 || c.requests < 1 || c.amount < 1 {
		log.Fatal("demo: -accounts, -requests and -amount must be ≥ 1")
	}
	ok, err := run(*redisAddr, c)
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// config is one demo's parameters.
type config struct {
	accounts, requests int
	amount, balance    int64
	work, maxWait      time.Duration
}

func run(redisAddr string, c config) (bool, error) {
	rdb, err := embedded.Open(redisAddr, log.Default())
	if err != nil {
		return false, err
	}
	defer rdb.Close()
	locker, err := guard.New(rdb.Client, guard.TTL(10*time.Second))
	if err != nil {
		return false, err
	}
	defer locker.Close()
	defer removeAccounts(rdb, c.accounts) // after the bursts, or after Ctrl-C ended them
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()

	fmt.Printf("\n%d concurrent withdrawals of %d from %d accounts holding %d each;\n"+
		"each withdrawal reads the balance, works %s, writes the new balance.\n\n",
		c.requests, c.amount, c.accounts, c.balance, c.work)
	d := &demo{cfg: c, rdb: rdb.Client, locker: locker}
	guarded, err := d.burst(ctx, "guarded", true)
	if err != nil {
		return false, err
	}
	unguarded, err := d.burst(ctx, "unguarded", false)
	if err != nil {
		return false, err
	}
	fmt.Println()
	pass := report(os.Stdout, c, guarded, unguarded)
	if rdb.Embedded {
		fmt.Println("\nThe embedded Redis runs each Lua script in a fresh interpreter, about ten times\n" +
			"slower than Redis: set REDIS_ADDR to see the lock waits of a real server.")
	}
	return pass, nil
}

// removeAccounts deletes the balances the demo wrote (wallet:balance:acct-01 and on),
// however the demo ended, so that a Redis of the user's own (REDIS_ADDR) is left
// without them. The locks leave nothing behind: guard deletes a lock when it is
// released and gives what it keeps a TTL.
func removeAccounts(rdb *embedded.Redis, accounts int) {
	ids := make([]string, accounts)
	for i := range ids {
		ids[i] = accountID(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := wallet.New(rdb.Client, 0).Remove(ctx, ids...); err != nil {
		log.Printf("demo: removing the accounts' balances: %v", err)
		return
	}
	if !rdb.Embedded {
		fmt.Printf("\nRemoved the demo's %d balances (wallet:balance:%s…%s) from %s.\n", accounts, ids[0], ids[len(ids)-1], rdb.Addr)
	}
}
