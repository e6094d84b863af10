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
// # Cluster and Sentinel
//
// [StartCluster] forms a Redis Cluster (3 primaries with a replica each by
// default) and [StartSentinel] a primary with replicas watched by three
// sentinels. Both return once the deployment agrees with itself: every
// node or sentinel reports the same primaries, every replica's link is up.
// Their processes are [Server] values, so faults are made as on a single
// server (Pause, Kill, Restart), and the deployment's wait methods
// ([Cluster.WaitHealthy], [Sentinel.WaitNewPrimary]) report how long the
// recovery took:
//
//	c := redistest.StartCluster(t, redistest.ClusterNodeTimeout(time.Second))
//	primary := c.NodeForKey("{account:1}")
//	primary.Kill(t)
//	t.Logf("recovered after %v", c.WaitHealthy(t, 30*time.Second))
//
// # Sharing a deployment
//
// Forming a cluster or a Sentinel group takes seconds, so the tests of a
// package share one: [ShareCluster] and [ShareSentinel] return a [Shared]
// deployment that the first [Shared.Get] starts and every later Get resets
// (every process running again, healthy, no keys, no scripts). TestMain
// stops it, inside the Run that a leak check wraps, with [StopAfter].
//
// # Without a testing.TB
//
// [NewServer], [NewCluster] and [NewSentinel] start what Start,
// StartCluster and StartSentinel start, but return an error instead of
// failing a test and leave stopping to the caller, for a TestMain, an
// Example function or a program. ClientOptions gives the options of an
// ordinary client to build one without a testing.TB.
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
// The methods of [Server], [Counter], [Proxy], [Cluster], [Sentinel] and
// [Shared] may be called from several goroutines, but tests that share a
// deployment must not run in parallel. Cleanup is registered with the
// testing.TB given to the constructor; after it runs, no goroutine and no
// process of this package remains.
package redistest
