// Command echo serves a wallet over HTTP with Echo: withdrawals and deposits on an
// account run one at a time across every replica, under middleware.Lock on
// "account:{param.id}"; reading a balance takes no lock.
//
//	go run ./examples/echo                            # embedded Redis, :8080
//	REDIS_ADDR=localhost:6379 go run ./examples/echo  # a real one
//	curl -X POST localhost:8080/accounts/acct-1/withdraw -d '{"amount":10}' -H 'Content-Type: application/json'
//	curl localhost:8080/accounts/acct-1
//
// With -smoke it serves on a free loopback port, sends a burst of concurrent
// withdrawals to itself, checks that none was lost, and exits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/guardkit/guardkit/examples/echo/wallet"
	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/middleware"
)

var accounts = []string{"acct-1", "acct-2", "acct-3"}

const openingBalance = 100

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	addr := flag.String("addr", "localhost:8080", "HTTP listen address")
	smoke := flag.Bool("smoke", false, "serve on a free port, check a burst of withdrawals, exit")
	flag.Parse()
	log.SetFlags(0)
	if *smoke {
		*addr = "127.0.0.1:0"
	}
	if err := run(*redisAddr, *addr, *smoke); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(redisAddr, addr string, smoke bool) error {
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

	w := wallet.New(rdb.Client, 5*time.Millisecond)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The accounts are the example's own keys: they leave the Redis with it, so that a
	// server of the user's own (REDIS_ADDR) is left as it was.
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := w.Remove(ctx, accounts...); err != nil {
			log.Printf("removing the accounts: %v", err)
		}
	}()
	for _, id := range accounts {
		if err := w.SetBalance(ctx, id, openingBalance); err != nil {
			return err
		}
	}

	// readme:begin echo
	e := echo.New()
	e.Use(echomw.Recover()) // a panicking handler still releases its lock first
	// Changes to one account run one at a time, in every replica. A request waits up to
	// 2s for its turn, then gets 409 Conflict with Retry-After.
	lock := middleware.LockWithConfig(middleware.LockConfig{
		Locker:  locker,
		Key:     "account:{param.id}",
		MaxWait: 2 * time.Second,
	})
	e.GET("/accounts/:id", w.Balance) // reads take no lock
	e.POST("/accounts/:id/withdraw", w.Withdraw, lock)
	e.POST("/accounts/:id/deposit", w.Deposit, lock)
	// readme:end
	e.HideBanner, e.HidePort = true, true

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	log.Printf("opened %s with %d each; serving on %s", strings.Join(accounts, ", "), openingBalance, base)

	if smoke {
		err = selfCheck(ctx, base)
	} else {
		log.Printf("try:  curl -X POST %s/accounts/acct-1/withdraw -H 'Content-Type: application/json' -d '{\"amount\":10}'", base)
		log.Printf("      curl %s/accounts/acct-1", base)
		select {
		case <-ctx.Done():
		case err = <-served:
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutdown); err == nil {
		err = serr
	}
	return err
}

// selfCheck sends concurrent withdrawals to one account and checks that the balance
// fell by exactly the sum of the successful ones.
func selfCheck(ctx context.Context, base string) error {
	const n, amount = 20, 1
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok int
	)
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := strings.NewReader(fmt.Sprintf(`{"amount":%d}`, amount))
			code, _, err := call(ctx, http.MethodPost, base+"/accounts/acct-1/withdraw", body)
			switch {
			case err != nil:
				errs <- err
			case code == http.StatusOK:
				mu.Lock()
				ok++
				mu.Unlock()
			case code != http.StatusConflict:
				errs <- fmt.Errorf("withdraw: HTTP %d", code)
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	code, acct, err := call(ctx, http.MethodGet, base+"/accounts/acct-1", nil)
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("balance: HTTP %d: %v", code, err)
	}
	want := int64(openingBalance - ok*amount)
	log.Printf("smoke: %d concurrent withdrawals of %d, %d succeeded; balance %d, expected %d", n, amount, ok, acct.Balance, want)
	if acct.Balance != want || ok == 0 {
		return fmt.Errorf("smoke: balance %d after %d successful withdrawals, want %d", acct.Balance, ok, want)
	}
	log.Print("smoke: ok")
	return nil
}

// call sends a request with a JSON body, if any, and decodes a 200 response.
func call(ctx context.Context, method, url string, body io.Reader) (int, wallet.Account, error) {
	var acct wallet.Account
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return 0, acct, err
	}
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, acct, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(resp.Body).Decode(&acct)
	}
	return resp.StatusCode, acct, err
}
