package redistest_test

import (
	"context"
	"fmt"

	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// An Example function has no testing.TB: NewCluster returns an error
// instead of failing a test, and the caller stops the cluster.
func ExampleNewCluster() {
	cluster, err := redistest.NewCluster(redistest.ClusterReplicas(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Stop()
	rdb := redis.NewClusterClient(cluster.ClientOptions())
	defer rdb.Close()

	ctx := context.Background()
	// A hash tag keeps an account's keys in one slot, on one primary.
	for _, key := range []string{"{account:1}:balance", "{account:1}:limit"} {
		if err := rdb.Set(ctx, key, 100, 0).Err(); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println(len(cluster.Primaries()), "primaries")
	fmt.Println(cluster.NodeForKey("{account:1}:balance") == cluster.NodeForKey("{account:1}:limit"))
	fmt.Println(rdb.Get(ctx, "{account:1}:limit").Val())
	// Output:
	// 3 primaries
	// true
	// 100
}
