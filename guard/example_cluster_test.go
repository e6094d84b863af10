package guard_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// On Redis Cluster, build the Locker on a cluster client as usual. The lock's Redis
// names share one hash tag, so its scripts run on one shard; on Redis 7 its release is
// announced with sharded Pub/Sub to that shard only, and a waiter in another process is
// woken by it. After a primary dies, guard reloads the client's slot map itself.
func ExampleNew_cluster() {
	// A local 3-primary, 3-replica cluster; in production, your nodes' addresses.
	deployment, err := redistest.NewCluster()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer deployment.Stop()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 deployment.Addrs(),
		ContextTimeoutEnabled: true, // context deadlines bound every call
	})
	defer rdb.Close()

	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	other, _ := guard.New(rdb) // another process, waiting for the same lock
	defer other.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := locker.Acquire(ctx, "invoice:2026-11")
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make(chan *guard.Lease)
	go func() {
		next, err := other.Acquire(ctx, "invoice:2026-11") // waits for the release
		if err != nil {
			fmt.Println(err)
		}
		got <- next
	}()
	time.Sleep(100 * time.Millisecond) // let it queue
	first := lease.Token()
	_ = lease.Release(ctx)
	next := <-got
	if next == nil {
		return
	}
	defer next.Release(ctx)
	fmt.Println("handed over:", next.Token() > first)
	// Output:
	// handed over: true
}
