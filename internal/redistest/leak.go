package redistest

import "go.uber.org/goleak"

// IgnoreRedial is the goleak option that leaves out go-redis's redial goroutine: after
// repeated dial errors a client's pool redials on a goroutine of its own, once a second,
// until a dial succeeds or the client is closed. Tests that wait out a stopped server
// start it, and it may still be asleep when goleak looks, a moment after the Close.
var IgnoreRedial = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
