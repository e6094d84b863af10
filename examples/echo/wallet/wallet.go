package wallet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/middleware"
)

// ErrInsufficientFunds reports a withdrawal of more than the balance.
var ErrInsufficientFunds = errors.New("wallet: insufficient funds")

// Wallet serves the accounts kept in a Redis.
type Wallet struct {
	rdb   *redis.Client
	delay time.Duration
}

// New returns a Wallet keeping balances in rdb. Every change of a balance spends delay
// between reading and writing it, as a call to a payment provider would.
func New(rdb *redis.Client, delay time.Duration) *Wallet {
	return &Wallet{rdb: rdb, delay: delay}
}

// Movement is the body of a deposit or withdrawal: {"amount": 10}.
type Movement struct {
	Amount int64 `json:"amount"`
}

// Account is the body of every response: {"id": "acct-1", "balance": 90}.
type Account struct {
	ID      string `json:"id"`
	Balance int64  `json:"balance"`
}

// Balance handles GET /accounts/:id.
func (w *Wallet) Balance(c echo.Context) error {
	id := middleware.Param(c, "id") // the account as the routes that change it lock it
	n, err := w.BalanceOf(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, Account{ID: id, Balance: n})
}

// Deposit handles POST /accounts/:id/deposit.
func (w *Wallet) Deposit(c echo.Context) error {
	return w.move(c, +1)
}

// Withdraw handles POST /accounts/:id/withdraw: 422 Unprocessable Entity when the
// balance is too low.
func (w *Wallet) Withdraw(c echo.Context) error {
	return w.move(c, -1)
}

// readme:begin wallet
// move deposits (sign +1) or withdraws (sign -1) the request's amount.
func (w *Wallet) move(c echo.Context, sign int64) error {
	var m Movement
	if err := c.Bind(&m); err != nil {
		return err
	}
	if m.Amount <= 0 {
		return echo.NewHTTPError(http.StatusBadRequest, "amount must be positive")
	}
	// The account the route's lock ("account:{param.id}") holds, decoded once: c.Param
	// reads "a%2Fb" for /accounts/a%2Fb (account "a/b") and /accounts/a%252Fb alike.
	id := middleware.Param(c, "id")
	n, err := w.change(c.Request().Context(), id, sign*m.Amount)
	if errors.Is(err, ErrInsufficientFunds) {
		return echo.NewHTTPError(http.StatusUnprocessableEntity, "insufficient funds").SetInternal(err)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, Account{ID: id, Balance: n})
}

// readme:end

// change adds delta to the balance of id: read, check, work, write. Correct only while
// no other change of id runs at the same time.
func (w *Wallet) change(ctx context.Context, id string, delta int64) (int64, error) {
	n, err := w.BalanceOf(ctx, id)
	if err != nil {
		return 0, err
	}
	if n+delta < 0 {
		return n, fmt.Errorf("wallet: account %s holds %d, cannot withdraw %d: %w", id, n, -delta, ErrInsufficientFunds)
	}
	select {
	case <-time.After(w.delay):
	case <-ctx.Done(): // the client left, or the request's lock was lost
		return n, context.Cause(ctx)
	}
	return n + delta, w.rdb.Set(ctx, balanceKey(id), n+delta, 0).Err()
}

// BalanceOf returns the balance of account id; an account never written holds 0.
func (w *Wallet) BalanceOf(ctx context.Context, id string) (int64, error) {
	n, err := w.rdb.Get(ctx, balanceKey(id)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// SetBalance sets the balance of account id, as opening the account would.
func (w *Wallet) SetBalance(ctx context.Context, id string, balance int64) error {
	return w.rdb.Set(ctx, balanceKey(id), balance, 0).Err()
}

// Remove deletes the balances of accounts ids, as closing them would. The echo example
// and the demo remove the accounts they opened when they end, so that a Redis of the
// user's own is left without their keys.
func (w *Wallet) Remove(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = balanceKey(id)
	}
	return w.rdb.Del(ctx, keys...).Err()
}

func balanceKey(id string) string { return "wallet:balance:" + id }
