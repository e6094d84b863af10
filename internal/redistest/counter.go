package redistest

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook ([redis.Hook]) that counts what a client sends:
// one round trip per Process call and one per pipeline or transaction, and
// every command by lowercase name. Install it with client.AddHook(counter).
//
// It counts at the hook, so it sees what the code under test asks for, not
// what goes over the wire: retries inside go-redis are not counted again (use
// [Server.CommandCalls] for what the server executed), while the HELLO that
// go-redis sends on each new connection is counted, because go-redis runs
// the handshake through the client's hooks. Warm the pool up and call
// [Counter.Reset] before measuring.
//
// The zero value is not usable; create one with [NewCounter].
type Counter struct {
	mu         sync.Mutex
	roundTrips int64
	commands   int64
	calls      map[string]int64
}

var _ redis.Hook = (*Counter)(nil)

// NewCounter returns a Counter with all counts at zero.
func NewCounter() *Counter {
	return &Counter{calls: make(map[string]int64)}
}

// RoundTrips returns the number of Process calls and pipelines seen.
func (c *Counter) RoundTrips() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.roundTrips
}

// Commands returns the number of commands seen, each command of a pipeline
// counted once.
func (c *Counter) Commands() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commands
}

// Calls returns how many commands named name (lowercase, e.g. "evalsha")
// were seen.
func (c *Counter) Calls(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[strings.ToLower(name)]
}

// Reset sets all counts to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roundTrips, c.commands = 0, 0
	clear(c.calls)
}

// DialHook implements [redis.Hook]; dials are not counted.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook {
	return next
}

// ProcessHook implements [redis.Hook], counting one round trip and one
// command.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements [redis.Hook], counting one round trip and
// every command of the pipeline.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.count(cmds)
		return next(ctx, cmds)
	}
}

func (c *Counter) count(cmds []redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roundTrips++
	c.commands += int64(len(cmds))
	for _, cmd := range cmds {
		c.calls[cmd.Name()]++
	}
}
