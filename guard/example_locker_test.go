package guard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/guardkit/guardkit/guard"
)

// Take a lease, do the work under its context, release it.
func ExampleLocker_Acquire() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb, guard.TTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // bounds the wait
	defer cancel()
	lease, err := locker.Acquire(ctx, "order:42")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)

	work, done := lease.Bind(ctx) // ends if the lease is lost
	defer done()
	fmt.Println("holding", lease.Key(), "token issued:", lease.Token() > 0, "work may run:", work.Err() == nil)
	// Output:
	// holding order:42 token issued: true work may run: true
}

// TryAcquire makes one attempt: a lock another owner holds fails at once, with the
// hint of when to come back (see "Retry hints").
func ExampleLocker_TryAcquire() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	held, _ := locker.Acquire(context.Background(), "report:daily")
	defer held.Release(context.Background())

	_, err = locker.TryAcquire(context.Background(), "report:daily") // another request: a fresh owner
	var busy *guard.LockedError
	fmt.Println(errors.Is(err, guard.ErrLocked), errors.As(err, &busy) && busy.RetryAfter > 0)
	// Output:
	// true true
}

// Within one request (one owner in the context), a nested acquisition of a held lock
// reenters it at once, without a Redis call, and keeps the fencing token.
func ExampleLease_Context() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	outer, _ := locker.Acquire(context.Background(), "account:7")
	inner, err := locker.Acquire(outer.Context(), "account:7")
	fmt.Println(err, inner.Reentrant(), inner.Token() == outer.Token())
	_ = inner.Release(context.Background())
	fmt.Println(outer.Release(context.Background()))
	// Output:
	// <nil> true true
	// <nil>
}

// Retry policies are values: build one, share it.
func ExampleMaxWait() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	patient := guard.Retry(guard.MaxWait(100*time.Millisecond, guard.Fixed(10*time.Millisecond, 10*time.Millisecond)))

	held, _ := locker.Acquire(context.Background(), "batch")
	defer held.Release(context.Background())
	_, err = locker.Acquire(context.Background(), "batch", patient)
	fmt.Println(err != nil, errors.Is(err, guard.ErrLocked))
	// Output:
	// true true
}

// expBackoff sleeps base·2^(attempt−1), at most max: a Backoff of one's own.
type expBackoff struct{ base, max time.Duration }

func (b expBackoff) Delay(attempt int) time.Duration {
	if d := b.base << min(attempt-1, 30); d > 0 && d < b.max {
		return d
	}
	return b.max
}

// A Backoff other than Fixed is a type with a Delay method. It only bounds the sleep of
// a waiter that hears no release: waiters are woken by releases.
func ExampleBackoff() {
	b := expBackoff{base: 10 * time.Millisecond, max: 50 * time.Millisecond}
	fmt.Println(b.Delay(1), b.Delay(3), b.Delay(10))
	patient := guard.Retry(guard.MaxWait(time.Second, b))
	_ = patient // given to Acquire, Wrap, Do or New
	// Output: 10ms 40ms 50ms
}

// A transfer locks both accounts as one lock: all or none, in one canonical order
// whatever order they are listed in (so two transfers in opposite directions never
// deadlock), under one lease, with a fencing token per account.
func ExampleLocker_AcquireAll() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.AcquireAll(ctx, []string{"account:B", "account:A"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)
	tokens := lease.Tokens()
	fmt.Println(lease.Keys(), len(tokens), tokens[0] > 0 && tokens[1] > 0)

	// The other direction waits for this one instead of deadlocking with it.
	_, err = locker.TryAcquireAll(context.Background(), []string{"account:A", "account:B"})
	fmt.Println(errors.Is(err, guard.ErrLocked))
	// Output:
	// [account:A account:B] 2 true
	// true
}
