package shop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
)

// ErrOutOfStock reports a checkout of more items than are in stock.
var ErrOutOfStock = errors.New("shop: out of stock")

// CheckoutRequest asks to buy Qty items of SKU for order OrderID. A client that retries
// or double-submits sends the same OrderID again.
type CheckoutRequest struct {
	OrderID string
	SKU     string
	Qty     int64
}

// Receipt is the outcome of a checkout.
type Receipt struct {
	OrderID string
	// Duplicate reports that the order had already been paid by an earlier checkout
	// of the same order: nothing was reserved or charged again.
	Duplicate bool
	// StockLeft is the product's stock after the reservation.
	StockLeft int64
	// Payment is how the order was paid.
	Payment Payment
}

// Payment records a payment.
type Payment struct {
	// Token is the fencing token of the order lock under which the order was paid.
	Token int64
	// Reentered reports that Pay ran inside a call that already held the order's lock
	// (Checkout), and so reentered it instead of waiting for it.
	Reentered bool
}

// PayRequest marks an order paid, as a payment provider's callback would.
type PayRequest struct {
	OrderID string
}

// readme:begin wrap

// Shop sells products whose stock is kept in Redis. Its exported fields are its guarded
// methods.
type Shop struct {
	Checkout func(context.Context, CheckoutRequest) (Receipt, error)
	Pay      func(context.Context, PayRequest) (Payment, error)
	reserve  func(context.Context, CheckoutRequest) (int64, error)

	rdb   *redis.Client
	delay time.Duration
}

// New returns a Shop whose methods run under locks taken from locker.
func New(rdb *redis.Client, locker *guard.Locker) *Shop {
	s := &Shop{rdb: rdb, delay: 5 * time.Millisecond}
	// One lock per order: a double-submitted checkout runs once at a time.
	s.Checkout = guard.Wrap(s.checkout, guard.Use(locker), guard.Key("order:{req.OrderID}"))
	// Pay is called by Checkout (it reenters the order lock) and by payment callbacks.
	s.Pay = guard.Wrap(s.pay, guard.Use(locker), guard.Key("order:{req.OrderID}"))
	// One lock per product: concurrent orders never oversell it.
	s.reserve = guard.Wrap(s.reserveStock, guard.Use(locker), guard.Key("sku:{req.SKU}"))
	return s
}

func (s *Shop) checkout(ctx context.Context, req CheckoutRequest) (Receipt, error) {
	// ctx carries this call's lock owner: pass it on so that nested guarded calls
	// reenter the locks it holds.
	if paid, err := s.paid(ctx, req.OrderID); err != nil || paid {
		return Receipt{OrderID: req.OrderID, Duplicate: paid}, err
	}
	left, err := s.reserve(ctx, req) // another key: the product's lock
	if err != nil {
		return Receipt{}, err
	}
	p, err := s.Pay(ctx, PayRequest{OrderID: req.OrderID}) // the same key: reentered
	return Receipt{OrderID: req.OrderID, StockLeft: left, Payment: p}, err
}

// readme:end

func (s *Shop) reserveStock(ctx context.Context, req CheckoutRequest) (int64, error) {
	stock, err := s.Stock(ctx, req.SKU)
	if err != nil {
		return 0, err
	}
	if stock < req.Qty {
		return stock, fmt.Errorf("shop: %d of %s wanted, %d left: %w", req.Qty, req.SKU, stock, ErrOutOfStock)
	}
	time.Sleep(s.delay) // the time a real inventory check takes, which widens any race
	return stock - req.Qty, s.rdb.Set(ctx, stockKey(req.SKU), stock-req.Qty, 0).Err()
}

func (s *Shop) pay(ctx context.Context, req PayRequest) (Payment, error) {
	lease, _ := guard.LeaseFromContext(ctx)
	p := Payment{Token: lease.Token(), Reentered: lease.Reentrant()}
	// A storage that knows fencing would refuse a write with a token lower than the
	// last it accepted; here the token is recorded with the payment.
	return p, s.rdb.Set(ctx, orderKey(req.OrderID), "paid:"+strconv.FormatInt(p.Token, 10), orderRetention).Err()
}

func (s *Shop) paid(ctx context.Context, orderID string) (bool, error) {
	n, err := s.rdb.Exists(ctx, orderKey(orderID)).Result()
	return n == 1, err
}

// Stock returns the stock of sku.
func (s *Shop) Stock(ctx context.Context, sku string) (int64, error) {
	n, err := s.rdb.Get(ctx, stockKey(sku)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// Restock sets the stock of sku to n.
func (s *Shop) Restock(ctx context.Context, sku string, n int64) error {
	return s.rdb.Set(ctx, stockKey(sku), n, 0).Err()
}

// orderRetention is how long a paid order is remembered, and duplicates recognised.
const orderRetention = 24 * time.Hour

func stockKey(sku string) string   { return "shop:stock:" + sku }
func orderKey(order string) string { return "shop:order:" + order }
