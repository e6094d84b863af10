package guard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
)

// Read and Write are the two modes of a key's read-write lock: readers share it, a writer
// has it alone, and the writer may read too.
func ExampleRead() {
	locker, _, stop := exampleLocker()
	defer stop()
	ctx := context.Background()

	r1, _ := locker.Acquire(ctx, "statement:42", guard.Read())
	r2, _ := locker.Acquire(ctx, "statement:42", guard.Read()) // another request reads too
	_, err := locker.TryAcquire(ctx, "statement:42", guard.Write())
	fmt.Println("two readers:", r1.Kind(), r2.Kind(), "— a writer waits:", errors.Is(err, guard.ErrLocked))

	// A reader cannot become a writer: it would wait for itself.
	_, err = locker.Acquire(r1.Context(), "statement:42", guard.Write())
	fmt.Println("upgrade refused:", errors.Is(err, guard.ErrUpgrade))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)

	w, _ := locker.Acquire(ctx, "statement:42", guard.Write())
	back, err := locker.Acquire(w.Context(), "statement:42", guard.Read()) // the writer reads its posting back
	fmt.Println("writer reads:", err == nil, "token above the readers':", w.Token() > r2.Token())
	_ = back.Release(ctx)
	_ = w.Release(ctx)
	// Output:
	// two readers: read read — a writer waits: true
	// upgrade refused: true
	// writer reads: true token above the readers': true
}

// Permits makes a semaphore: at most n owners hold the key at once, each with its own
// lease and fencing token.
func ExamplePermits() {
	locker, _, stop := exampleLocker()
	defer stop()
	ctx := context.Background()

	a, _ := locker.Acquire(ctx, "exports:tenant-7", guard.Permits(2))
	b, _ := locker.Acquire(ctx, "exports:tenant-7", guard.Permits(2))
	_, err := locker.TryAcquire(ctx, "exports:tenant-7", guard.Permits(2))
	fmt.Println("third export refused:", errors.Is(err, guard.ErrLocked), "— tokens differ:", a.Token() != b.Token())
	_ = a.Release(ctx)
	c, err := locker.TryAcquire(ctx, "exports:tenant-7", guard.Permits(2))
	fmt.Println("after a release:", err == nil, c.Kind())
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// third export refused: true — tokens differ: true
	// after a release: true semaphore
}

// Fair serves owners in the order they queued: the release grants the lock to the first
// of them, and nobody can take it in between.
func ExampleFair() {
	locker, rdb, stop := exampleLocker()
	defer stop()
	ctx := context.Background()

	holder, _ := locker.Acquire(ctx, "payments:acct-1", guard.Fair())
	served := make(chan int64)
	go func() {
		le, err := locker.Acquire(ctx, "payments:acct-1", guard.Fair())
		if err != nil {
			served <- 0
			return
		}
		served <- le.Token()
		_ = le.Release(ctx)
	}()
	for rdb.LLen(ctx, "guard:{payments:acct-1}:fair:owners").Val() == 0 {
		time.Sleep(time.Millisecond) // until the waiter has queued
	}
	_ = holder.Release(ctx)
	_, err := locker.TryAcquire(ctx, "payments:acct-1", guard.Fair())
	fmt.Println("a newcomer at the release is refused:", errors.Is(err, guard.ErrLocked))
	fmt.Println("the queued waiter is served next:", <-served > holder.Token())
	// Output:
	// a newcomer at the release is refused: true
	// the queued waiter is served next: true
}

// Run runs functions under a lock of any kind; here the read lock of the statement each
// call names.
func ExampleLocker_Run_read() {
	locker, _, stop := exampleLocker()
	defer stop()

	readStatement := func(id string) error {
		_, err := locker.Run(context.Background(), func(ctx context.Context) error {
			le, _ := guard.LeaseFromContext(ctx)
			fmt.Println("reading", le.Key(), "under a", le.Kind(), "lease")
			return nil
		}, guard.RawKey("statement:"+id), guard.Read())
		return err
	}
	fmt.Println(readStatement("7"))
	// Output:
	// reading statement:7 under a read lease
	// <nil>
}

// exampleLocker returns a Locker on a fresh Redis (see exampleRedis), its client, and a
// function that closes both: the kinds' examples are about the options, not the setup.
func exampleLocker() (*guard.Locker, *redis.Client, func()) {
	rdb, stop := exampleRedis()
	locker, err := guard.New(rdb)
	if err != nil {
		stop()
		panic(err)
	}
	return locker, rdb, func() {
		_ = locker.Close()
		stop()
	}
}
