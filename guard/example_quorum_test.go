package guard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// Over independent Redis servers (no Cluster, no Sentinel), NewQuorum holds each lock on
// a majority of them: one server lost, paused or restarted empty neither stops the
// locks nor grants one twice. The Locker is used like any other: here with Use, by a
// wrapped service method.
func ExampleNewQuorum() {
	// Three local servers; in production, yours, on separate machines.
	var clients []redis.UniversalClient
	for range 3 {
		srv, err := redistest.NewServer()
		if err != nil {
			fmt.Println(err)
			return
		}
		defer srv.Stop()
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		defer rdb.Close()
		clients = append(clients, rdb)
	}
	// A server that restarted without its data grants nothing until it has been up for
	// RestartDelay (the TTL by default, and never less than a lock's TTL). These have
	// only just started: the first lock waits a second or two for them.
	locker, err := guard.NewQuorum(clients, guard.TTL(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	pay := guard.Wrap(func(ctx context.Context, invoice string) (string, error) {
		lease, _ := guard.LeaseFromContext(ctx)
		return fmt.Sprintf("paid %s (fenced: %v)", invoice, lease.Token() > 0), nil
	}, guard.Use(locker), guard.Key("invoice:{req}"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println(pay(ctx, "2026-11"))

	// Kinds whose holders a majority cannot count are refused when the lock is asked for.
	_, err = locker.Acquire(ctx, "queue", guard.Fair())
	fmt.Println(errors.Is(err, guard.ErrInvalidConfig))
	// Output:
	// paid 2026-11 (fenced: true) <nil>
	// true
}
