// Package redistest runs real redis-server processes for tests and injects the
// faults a distributed lock has to survive.
//
// Tests in this module talk to a real Redis, never to a fake: the lock engine's
// guarantees rest on Lua scripts, pub/sub and expiry as Redis implements them.
// [Start] launches one redis-server per call on a free loopback port, without
// persistence, with its working directory and log file in the test's temporary
// directory, and stops it when the test ends. There is no skip when
// redis-server is missing: the test fails and says how to install it
// (`make test` does so), because a suite that silently skips its Redis tests
// proves nothing.
//
// # Usage
//
//	srv := redistest.Start(t)
//	rdb := srv.Client(t)
//	counter := redistest.NewCounter()
//	rdb.AddHook(counter)
//	// ... exercise the code under test with rdb ...
//	if got := counter.RoundTrips(); got != 2 { ... }
//
// # Faults
//
// A [Server] can be paused (SIGSTOP: connections stay open, nothing answers),
// resumed, killed (SIGKILL: connections are refused or reset) and restarted on
// the same address with an empty dataset. A [Proxy] sits between a client and
// a server and delays, holds, swallows or resets traffic, which makes client
// retries and timeouts observable; [Server.CommandCalls] reads what the server
// actually executed, [Counter] what the client sent.
//
// # Loopback only
//
// Everything binds to and dials 127.0.0.1: servers are started with
// --bind 127.0.0.1 and no persistence, proxies listen on 127.0.0.1 and refuse
// non-loopback targets. Tests never reach another machine and never leave
// data behind. Processes are signalled by the PID this package started,
// never by name, so parallel test binaries and other Redis instances on the
// machine are never touched. On Linux each redis-server also receives SIGKILL
// when the test binary dies (Pdeathsig), so an aborted run leaves no server
// behind. The package needs a Unix system; it is exercised on Linux.
//
// # Concurrency
//
// The methods of [Server], [Counter] and [Proxy] may be called from several
// goroutines. Cleanup is registered with the testing.TB given to the
// constructor; after it runs, no goroutine and no process of this package
// remains.
package redistest
