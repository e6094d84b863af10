package guard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

type TransferRequest struct {
	From   string `json:"from_account"`
	To     string `json:"to_account"`
	Amount int64
	Payer  *Payer
}

type Payer struct {
	Tenant string `key:"tenant"`
}

// Bank is a service whose methods have the usual shape func(ctx, req) (resp, error).
type Bank struct {
	locker *guard.Locker // for the examples to look at the lock from outside
}

func (b *Bank) Transfer(ctx context.Context, req TransferRequest) (string, error) {
	// Another request (a fresh owner) finds the account locked.
	_, err := b.locker.TryAcquire(context.Background(), "account:"+req.From)
	fmt.Println("another request is refused:", errors.Is(err, guard.ErrLocked))

	lease, _ := guard.LeaseFromContext(ctx)
	token := lease.Token() // for the storage to fence stale writers
	fmt.Println("fencing token issued:", token > 0)
	return fmt.Sprintf("moved %d from %s to %s", req.Amount, req.From, req.To), nil
}

// Wrap a service method: every call runs under the lock of its request's account.
func ExampleWrap() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	bank := &Bank{locker: locker}

	transfer := guard.Wrap(bank.Transfer, guard.Use(locker), guard.Key("account:{req.From}"))

	receipt, err := transfer(context.Background(), TransferRequest{From: "acct-1", To: "acct-2", Amount: 100})
	fmt.Println(receipt, err)
	// Output:
	// another request is refused: true
	// fencing token issued: true
	// moved 100 from acct-1 to acct-2 <nil>
}

// Guarded calls nest: with the context it received, a guarded function reenters a lock
// the section it runs in already holds instead of waiting for itself.
func ExampleWrap_nested() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	debit := guard.Wrap(func(ctx context.Context, req TransferRequest) (int64, error) {
		lease, _ := guard.LeaseFromContext(ctx)
		fmt.Println("debit reentered:", lease.Reentrant())
		return lease.Token(), nil
	}, guard.Use(locker), guard.Key("account:{req.From}"))

	transfer := guard.Wrap(func(ctx context.Context, req TransferRequest) (bool, error) {
		outer, _ := guard.LeaseFromContext(ctx)
		inner, err := debit(ctx, req) // ctx, not the caller's context: it carries the section
		return inner == outer.Token(), err
	}, guard.Use(locker), guard.Key("account:{req.From}"))

	sameToken, err := transfer(context.Background(), TransferRequest{From: "acct-1", To: "acct-2", Amount: 5})
	fmt.Println("same fencing token:", sameToken, err)
	// Output:
	// debit reentered: true
	// same fencing token: true <nil>
}

// Goroutines that share only their request's context are sibling sections of it: they
// take the lock one at a time, each with its own fencing token. A goroutine started
// inside the guarded work, with its context, is part of that section and reenters.
func ExampleDo_fanOut() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx := context.Background() // the request's
	var mu sync.Mutex
	inside, most, tokens, reentered := 0, 0, map[int64]bool{}, 0
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = guard.Do(ctx, func(ctx context.Context) error {
				mu.Lock()
				inside++
				most = max(most, inside)
				lease, _ := guard.LeaseFromContext(ctx)
				token := lease.Token()
				tokens[token] = true
				mu.Unlock()

				helper := make(chan bool)
				go func() { // started inside the section, with its context
					le, err := locker.TryAcquire(ctx, "batch:nightly")
					helper <- err == nil && le.Reentrant() && le.Token() == token
					if err == nil {
						_ = le.Release(ctx)
					}
				}()
				ok := <-helper

				mu.Lock()
				inside--
				if ok {
					reentered++
				}
				mu.Unlock()
				return nil
			}, guard.Use(locker), guard.Key("batch:nightly"))
		}()
	}
	wg.Wait()
	fmt.Println("at most inside at once:", most)
	fmt.Println("distinct fencing tokens:", len(tokens))
	fmt.Println("helpers that reentered:", reentered)
	// Output:
	// at most inside at once: 1
	// distinct fencing tokens: 3
	// helpers that reentered: 3
}

// WrapE reports configuration mistakes as errors instead of panicking; Wrap would panic
// with the same error. Here the template names a field that the request does not have.
func ExampleWrapE() {
	bank := &Bank{}
	_, err := guard.WrapE(bank.Transfer, guard.Key("account:{req.Form}"))
	var ce *guard.ConfigError
	fmt.Println(errors.As(err, &ce), ce.Field)
	fmt.Println(err)
	// Output:
	// true Key
	// guard: invalid configuration: Key: template "account:{req.Form}" at column 9: {req.Form}: no field "Form" in guard_test.TransferRequest
}

// Do guards a closure. With a Locker set by SetDefault, no Use option is needed.
func ExampleDo() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	guard.SetDefault(locker)
	defer guard.SetDefault(nil)

	orderID := "42"
	err = guard.Do(context.Background(), func(ctx context.Context) error {
		// A second request for the same order, failing fast.
		err := guard.Do(context.Background(), func(context.Context) error { return nil },
			guard.RawKey("order:"+orderID), guard.Retry(guard.NoRetry()))
		fmt.Println("second request:", errors.Is(err, guard.ErrLocked))
		return nil
	}, guard.RawKey("order:"+orderID)) // a key built in code: RawKey, never Key
	fmt.Println("first request:", err)
	// Output:
	// second request: true
	// first request: <nil>
}

// Key templates read request fields by `key` tag, Go name or `json` tag, through
// pointers and nested structs. Values are escaped, so that no two requests share a key
// by accident: a ':' inside a value is written %3A.
func ExampleKey() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	lockedKey := guard.Wrap(func(ctx context.Context, req TransferRequest) (string, error) {
		lease, _ := guard.LeaseFromContext(ctx)
		return lease.Key(), nil
	}, guard.Use(locker), guard.Key("tenant:{req.Payer.tenant}:account:{req.from_account}"))

	ctx := context.Background()
	fmt.Println(lockedKey(ctx, TransferRequest{From: "acct-1", Payer: &Payer{Tenant: "acme"}}))
	fmt.Println(lockedKey(ctx, TransferRequest{From: "acct-1", Payer: &Payer{Tenant: "acme:eu"}}))
	_, err = lockedKey(ctx, TransferRequest{From: "acct-1"}) // no Payer: no key, no lock
	fmt.Println(errors.Is(err, guard.ErrInvalidKey), err)
	// Output:
	// tenant:acme:account:acct-1 <nil>
	// tenant:acme%3Aeu:account:acct-1 <nil>
	// true guard: invalid lock key: template "tenant:{req.Payer.tenant}:account:{req.from_account}": keyfunc: {req.Payer.tenant}: missing value: Payer is nil
}

// KeyFunc computes keys that a template cannot: here one lock per pair of accounts,
// whichever way the money moves.
func ExampleKeyFunc() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	pair := func(_ context.Context, req TransferRequest) (string, error) {
		return "pair:" + min(req.From, req.To) + ":" + max(req.From, req.To), nil
	}
	lockedKey := guard.Wrap(func(ctx context.Context, req TransferRequest) (string, error) {
		lease, _ := guard.LeaseFromContext(ctx)
		return lease.Key(), nil
	}, guard.Use(locker), guard.KeyFunc(pair))

	fmt.Println(lockedKey(context.Background(), TransferRequest{From: "acct-2", To: "acct-1"}))
	fmt.Println(lockedKey(context.Background(), TransferRequest{From: "acct-1", To: "acct-2"}))
	// Output:
	// pair:acct-1:acct-2 <nil>
	// pair:acct-1:acct-2 <nil>
}

// Retry chooses between failing fast and waiting. A busy lock ends in a *LockedError
// that says when the holder's lease would run out.
func ExampleRetry() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	holder, err := locker.Acquire(context.Background(), "account:acct-1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer holder.Release(context.Background())

	work := func(context.Context, TransferRequest) (string, error) { return "done", nil }
	failFast := guard.Wrap(work, guard.Use(locker), guard.Key("account:{req.From}"),
		guard.Retry(guard.NoRetry()))
	waitABit := guard.Wrap(work, guard.Use(locker), guard.Key("account:{req.From}"),
		guard.Retry(guard.MaxWait(100*time.Millisecond, guard.Fixed(10*time.Millisecond, 10*time.Millisecond))))

	req := TransferRequest{From: "acct-1", To: "acct-2"}
	var locked *guard.LockedError
	_, err = failFast(context.Background(), req)
	fmt.Println("fail fast:", errors.As(err, &locked), locked.Attempts, locked.RetryAfter > 0)
	_, err = waitABit(context.Background(), req)
	fmt.Println("wait 100ms:", errors.As(err, &locked), locked.Attempts > 1)
	// Output:
	// fail fast: true 1 true
	// wait 100ms: true true
}

// MinHold is ShedLock's lockAtLeastFor: a job scheduled on every node runs once per
// period even when it is quick, because its lock outlives it.
func ExampleMinHold() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	report := guard.Wrap(func(ctx context.Context, day string) (string, error) {
		return "report for " + day, nil
	}, guard.Use(locker), guard.Key("report:{req}"), guard.MinHold(time.Minute), guard.Retry(guard.NoRetry()))

	// Each node runs the job with its own owner.
	fmt.Println(report(context.Background(), "2024-05-01"))
	_, err = report(context.Background(), "2024-05-01")
	fmt.Println("another node:", errors.Is(err, guard.ErrLocked))
	// Output:
	// report for 2024-05-01 <nil>
	// another node: true
}

// SkipIf runs the function without a lock when the request does not need one.
func ExampleSkipIf() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	transfer := guard.Wrap(func(ctx context.Context, req TransferRequest) (bool, error) {
		_, locked := guard.LeaseFromContext(ctx)
		return locked, nil
	}, guard.Use(locker), guard.Key("account:{req.From}"),
		guard.SkipIf(func(_ context.Context, req TransferRequest) bool { return req.Amount == 0 }))

	fmt.Println(transfer(context.Background(), TransferRequest{From: "acct-1", Amount: 0}))
	fmt.Println(transfer(context.Background(), TransferRequest{From: "acct-1", Amount: 10}))
	// Output:
	// false <nil>
	// true <nil>
}

// exampleRedis starts a throwaway redis-server on a loopback port for an example to run
// against; a program would call redis.NewClient with its own address instead. stop
// closes the client and stops the server.
func exampleRedis() (rdb *redis.Client, stop func()) {
	tb := &exampleTB{}
	srv := redistest.Start(tb)
	return srv.Client(tb), tb.cleanup
}

// exampleTB gives the test harness, which wants a testing.TB, what it needs in an
// example, which has none: a temporary directory, cleanups, and a panic for a failure.
// The embedded TB is nil; the harness calls only the methods defined here.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (tb *exampleTB) Helper() {}

func (tb *exampleTB) Cleanup(f func()) { tb.cleanups = append(tb.cleanups, f) }

func (tb *exampleTB) TempDir() string {
	dir, err := os.MkdirTemp("", "guard-example-")
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (tb *exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (tb *exampleTB) cleanup() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}

// Run is the primitive under Wrap and the adapters: the key given at each call, and
// whether the function ran reported. Here a queue consumer runs each message's handler
// under the lock of the order it is about, and puts a message back only when its handler
// never ran: one that ran and failed is not redone.
func ExampleLocker_Run() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	for _, orderID := range []string{"17", "18"} {
		ran, err := locker.Run(context.Background(), func(ctx context.Context) error {
			lease, _ := guard.LeaseFromContext(ctx)
			fmt.Println("handling the event of", lease.Key())
			return nil
		}, guard.RawKey("order:"+orderID), guard.Name("order-events"), guard.Retry(guard.MaxWait(2*time.Second, nil)))
		switch {
		case !ran:
			fmt.Println("not handled, put back:", err)
		case err != nil:
			fmt.Println("handled, and failed:", err)
		}
	}
	// Output:
	// handling the event of order:17
	// handling the event of order:18
}
