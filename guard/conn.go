package guard

import (
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// conn is the Redis side of a Locker: its client and what the engine knows of it —
// whether calls give up at their context's deadline or may wait for a batch, which
// Pub/Sub announces releases on a Cluster, and when the Cluster's slot map was last
// reloaded. Attempts, releases, the watchdog (renewer) and the release notifications
// (waiters) reach Redis through it only: its methods are in scripts.go (runScript),
// sync.go (syncNode) and topology.go (refresh, the sharded flag).
type conn struct {
	client           redis.UniversalClient
	honoursDeadlines bool         // client gives up on calls at their context's deadline
	batching         bool         // client is an auto-pipeliner: calls may wait for a batch
	refreshed        atomic.Int64 // when refresh last reloaded a Cluster client's map, in Unix ns
	// classic makes the Locker use classic Pub/Sub on a Cluster too, as it does when the
	// nodes run Redis 6.2: set by tests only (export_test.go), before the first wait.
	classic bool
}
