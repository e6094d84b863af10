package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/examples/echo/wallet"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/middleware"
)

// demo runs bursts against the wallet.
type demo struct {
	cfg    config
	rdb    *redis.Client
	locker *guard.Locker
}

// outcome is what one burst did.
type outcome struct {
	name      string
	elapsed   time.Duration
	ok        []int   // successful withdrawals, per account
	busy      int     // 409 Conflict: the lock stayed busy for longer than MaxWait
	failed    int     // any other answer, or no answer
	final     []int64 // balances after the burst, per account
	waits     []time.Duration
	lastError string
}

func (o *outcome) succeeded() int {
	n := 0
	for _, k := range o.ok {
		n += k
	}
	return n
}

// expected is the balance account i must hold: the opening balance less every
// withdrawal that was answered 200 OK.
func (o *outcome) expected(c config, i int) int64 {
	return c.balance - int64(o.ok[i])*c.amount
}

// lost counts the successful withdrawals that left no trace in the balances.
func (o *outcome) lost(c config) int64 {
	var n int64
	for i := range o.final {
		d := o.final[i] - o.expected(c, i)
		if d < 0 {
			d = -d
		}
		n += d / c.amount
	}
	return n
}

func accountID(i int) string { return fmt.Sprintf("acct-%02d", i+1) }

// burst opens the accounts, serves the wallet's withdraw route, with the lock or
// without, on a loopback port, and fires every withdrawal at once.
func (d *demo) burst(ctx context.Context, name string, locked bool) (*outcome, error) {
	c := d.cfg
	w := wallet.New(d.rdb, c.work)
	for i := range c.accounts {
		if err := w.SetBalance(ctx, accountID(i), c.balance); err != nil {
			return nil, err
		}
	}

	timer := &waitTimer{}
	chain := []echo.MiddlewareFunc{timer.arrive}
	if locked {
		chain = append(chain, middleware.LockWithConfig(middleware.LockConfig{
			Locker:  d.locker,
			Key:     "account:{param.id}",
			MaxWait: c.maxWait,
		}))
		fmt.Printf("%s: POST /accounts/:id/withdraw under middleware.Lock(\"account:{param.id}\")\n", name)
	} else {
		fmt.Printf("%s: the same route, no lock\n", name)
	}
	chain = append(chain, timer.enter)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/accounts/:id/withdraw", w.Withdraw, chain...)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.requests}}
	defer client.CloseIdleConnections()

	o := &outcome{name: name, ok: make([]int, c.accounts), final: make([]int64, c.accounts)}
	var (
		mu       sync.Mutex
		answered atomic.Int64
		wg       sync.WaitGroup
		fire     = make(chan struct{})
	)
	for r := range c.requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acct := r % c.accounts
			url := fmt.Sprintf("http://%s/accounts/%s/withdraw", ln.Addr(), accountID(acct))
			<-fire
			code, err := post(ctx, client, url, fmt.Sprintf(`{"amount":%d}`, c.amount))
			answered.Add(1)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				o.failed++
				o.lastError = err.Error()
			case code == http.StatusOK:
				o.ok[acct]++
			case code == http.StatusConflict:
				o.busy++
			default:
				o.failed++
				o.lastError = fmt.Sprintf("HTTP %d", code)
			}
		}()
	}

	start := time.Now()
	close(fire)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			fmt.Printf("  %d/%d answered…\n", answered.Load(), c.requests)
		}
	}
	o.elapsed = time.Since(start)
	fmt.Printf("  %d/%d answered in %s\n", answered.Load(), c.requests, short(o.elapsed))

	for i := range c.accounts {
		if o.final[i], err = w.BalanceOf(ctx, accountID(i)); err != nil {
			return nil, err
		}
	}
	o.waits = timer.all()
	return o, nil
}

func post(ctx context.Context, client *http.Client, url, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// waitTimer measures how long each request waited for its lock: arrive runs before the
// lock middleware, enter right after it (and, without a lock, right after arrive).
type waitTimer struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (t *waitTimer) arrive(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Set("arrived", time.Now())
		return next(c)
	}
}

func (t *waitTimer) enter(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if at, ok := c.Get("arrived").(time.Time); ok {
			t.mu.Lock()
			t.waits = append(t.waits, time.Since(at))
			t.mu.Unlock()
		}
		return next(c)
	}
}

func (t *waitTimer) all() []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Duration(nil), t.waits...)
}
