package wallet_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/examples/echo/wallet"
	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/middleware"
)

// Ten concurrent withdrawals from one account under the lock: every one of them shows in
// the balance.
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

	w := wallet.New(rdb.Client, time.Millisecond)
	id := fmt.Sprintf("example-%p", w)
	if err := w.SetBalance(context.Background(), id, 100); err != nil {
		fmt.Println(err)
		return
	}
	e := echo.New()
	lock := middleware.LockWithConfig(middleware.LockConfig{Locker: locker, Key: "account:{param.id}", MaxWait: 5 * time.Second})
	e.POST("/accounts/:id/withdraw", w.Withdraw, lock)
	e.GET("/accounts/:id", w.Balance)

	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest(http.MethodPost, "/accounts/"+id+"/withdraw", strings.NewReader(`{"amount":10}`))
			req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				fmt.Println(rec.Code, rec.Body.String())
			}
		}()
	}
	wg.Wait()
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/accounts/"+id, nil))
	fmt.Print(strings.Replace(rec.Body.String(), id, "<id>", 1))
	// Output: {"id":"<id>","balance":0}
}

// Remove closes accounts: their balances leave Redis.
func ExampleWallet_Remove() {
	rdb, err := embedded.Open("", log.New(io.Discard, "", 0))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rdb.Close()
	ctx := context.Background()
	w := wallet.New(rdb.Client, time.Millisecond)
	for _, id := range []string{"acct-1", "acct-2"} {
		if err := w.SetBalance(ctx, id, 100); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println(rdb.Client.Exists(ctx, "wallet:balance:acct-1", "wallet:balance:acct-2").Val(), "accounts")
	if err := w.Remove(ctx, "acct-1", "acct-2"); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rdb.Client.Exists(ctx, "wallet:balance:acct-1", "wallet:balance:acct-2").Val(), "accounts")
	// Output:
	// 2 accounts
	// 0 accounts
}
