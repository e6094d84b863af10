// Package embedded gives the example programs their Redis: the server named by an
// address (a flag or the REDIS_ADDR environment variable) or, when none is given, an
// in-process Redis-compatible server (miniredis), so that every example runs on a fresh
// clone with no Redis installed.
//
// # Usage
//
//	rdb, err := embedded.Open(*redisAddr, log.Default()) // "" → $REDIS_ADDR → embedded
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer rdb.Close()
//	locker, err := guard.New(rdb.Client)
//
// Open's log line says which server is used; programs call it first so that it is their
// first line of output.
//
// # The embedded server
//
// miniredis runs everything guard needs: its Lua scripts (HMGET, multi-field HSET,
// HINCRBY, HEXISTS, PEXPIRE, PTTL, TIME, SET … PX … GET, GET, DEL and PUBLISH from a
// script, string.format, string.match, string.sub, tonumber), EVALSHA with the EVAL
// fallback after SCRIPT FLUSH, pipelines of EVALSHA, and Pub/Sub with subscription
// confirmations and PING on a subscribed connection; the tests of this package run the
// lock engine against it. By default miniredis only ages keys when told to (FastForward);
// Open turns on its wall-clock TTLs (ClockTTL), so that an unrenewed lock expires after
// its TTL as it would on Redis. Expired keys are removed lazily, when a command touches
// the database, which a lock cannot tell apart from Redis's own expiry.
//
// It is for examples and demos: one process, data in memory, nothing persisted, and
// slower than Redis — miniredis runs each Lua script in a fresh interpreter (about half a
// millisecond per lock operation) and all commands under one mutex, so lock waits under
// contention are longer than on a real server. Use a real Redis to measure, and to share
// locks between processes on different machines.
package embedded
