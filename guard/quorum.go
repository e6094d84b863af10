package guard

import (
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/store"
)

// NewQuorum returns a Locker whose locks are held on a majority of independent Redis
// servers (the Redlock algorithm, with this package's guarantees added): clients are one
// client per server, an odd number of them, 3 or more. The Locker is used like one made
// by New — Acquire, Wrap, the Echo middleware, the gRPC interceptors and their options
// work unchanged — and one server down, paused, slow or restarted empty neither stops
// nor double-grants a lock.
//
//   - An attempt runs on every server at once, with one nonce; it succeeds when a majority
//     granted it within the lease's validity budget (TTL minus the time spent minus
//     Renewal's margin). A server silent past the reply budget counts as failed once another
//     owner's hold contests the attempt, and past the round's patience in any case (see
//     ReplyBudget): a paused minority does not hold contenders for their validity. Otherwise it is undone on every server that granted it or left its
//     outcome unknown, and counts as a busy attempt — or fails with a *RedisError
//     (ErrUnavailable) whose Err says what each server answered, when so many servers
//     failed that no majority could have answered, and with one whose Err is the
//     context's error when the caller's context ended while servers that could still
//     have made a majority were silent (as a call to one server that does not return in
//     time: not ErrLocked because one server named another owner).
//   - An attempt proposes its fencing token: the Locker's clock in microseconds, above
//     every token it proposed before. A server takes it when its own clock is within a
//     tenth of the TTL (or of FenceRetention, if shorter) of it and it exceeds the key's
//     last token there; otherwise it draws its own, as on one server. When the granting
//     servers all took it, it is the hold's token, with no further round trip; when their
//     tokens differ, the highest is written back to them (one more round trip) before the
//     lease is handed out. Either way every server of the granting majority carries the
//     token above its last one, and any two majorities share a server, so every later
//     hold's token exceeds it. A reentry through Redis reads the same token.
//   - The watchdog renews on every server; a lease stays valid while a majority confirms
//     it in time, and is lost (its context cancelled with ErrLeaseLost) as soon as a
//     majority reports it gone, or when its validity runs out without a majority.
//   - A release runs on every server; it succeeds when a majority confirms it, else it
//     fails with a *RedisError whose Err says what each server answered.
//   - Waiters subscribe to every server: a release announced by any of them wakes them.
//   - A server that restarted without its data grants nothing until it has been up for
//     RestartDelay (default: the Locker's TTL), so that it cannot, with a minority of the
//     others, grant a lock it forgot. RestartDelay(0) leaves that to the operator.
//
// The lock kinds whose holders a majority can count are served: exclusive (the default)
// and read-write. A semaphore of more than one permit and the fair lock are refused
// (ErrInvalidConfig): majorities of N permits each can admit more than N holders, and
// each server's queue keeps its own order. SyncReplicas is refused too: the servers are
// independent primaries. Each client must reach one server (a *redis.Client, also one
// made by NewFailoverClient); a Cluster client, a Ring and an auto-pipeliner are refused.
// Build them with ContextTimeoutEnabled, as for New. Bad clients or options fail with a
// *ConfigError naming them; Close does not close the clients.
func NewQuorum(clients []redis.UniversalClient, opts ...Option) (*Locker, error) {
	q, err := store.NewQuorum(clients)
	if err != nil {
		return nil, configError(err)
	}
	return newLocker(q, "NewQuorum", opts)
}
