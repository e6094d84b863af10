// Command bench compares guardkit with other Go Redis lock libraries, side by side, in
// one run, on one redis-server that it starts itself on a free loopback port.
//
// Every library is driven through the same small adapter interface (Lib) in the same
// scenarios: uncontended try-acquire/release, a contended key, reentrant acquisition,
// many concurrently held leases under renewal, and a go-redis EVALSHA ceiling. Beside
// the libraries, the uncontended scenario runs the "floor" — the fewest Redis calls of an
// owner-checked, reentrant lock with fencing tokens, a Lua script each way — and the floor
// and ceiling on go-redis's auto-pipeliner, the bounds the lean-path targets are judged
// against; the guarantees scenario runs guardkit's own acquire.lua and release.lua
// (read from ../guard/internal/script/lua), whole and with each guarantee cut out of their text, in
// turns of 200 pairs, to price each guarantee in server time, beside the commands those
// scripts call replayed alone (commands.go: recorded from the real scripts when the row
// is built) and a sketch of a packed layout with and without the Lua work between its
// commands (sketch.go), which part a script pair's time into its commands and that work;
// kinds-uncontended sends
// uncontended pairs of each lock kind (read, write, semaphore, fair) through the engine
// in the same kind of turns, to set each kind's script time beside the exclusive lock's. The
// uncontended and contended loops run again on a Redis Cluster of three primaries with
// one replica each (cluster-uncontended, cluster-contended), and the uncontended loop on
// one server with one replica (replicated-uncontended); both deployments are started by
// internal/redistest for their scenarios only, and show what guard.SyncReplicas costs
// per acquisition. Each cell
// is repeated several times, interleaved, with the library order rotated; medians are
// reported, and ratios against the "raw" baseline (SET NX PX + Lua compare-and-delete,
// polling every millisecond) come from the same run.
//
// # Usage
//
//	cd bench && go run . -out RESULTS.md -json results.jsonl -readme ../docs/PERFORMANCE.md
//
// or `make bench-compare` from the repository root. It prints Markdown tables on
// standard output, one JSON object per measurement and per median to the -json file, and
// a summary table between the bench-compare markers of the -readme file. Flags narrow a
// run (-scenario, -lib), shorten it (-quick) or profile it (-cpuprofile, -memprofile;
// every run carries the pprof label run=<scenario>/<cell>/<variant>). The analysis of
// missed targets comes from analysis.md: its sections for the targets this run missed are
// copied into the report, with {{scenario|cell|variant|metric|digits}} replaced by this
// run's medians.
//
// # Counting
//
// Round trips are counted twice: by a go-redis hook on each adapter's client (one per
// Process or ProcessPipeline call; not available for rueidis) and by the server's
// total_reads_processed delta, which counts every read the server made, including the
// reads of Pub/Sub and client-side-caching connections. Server commands come from
// INFO commandstats and include the commands that scripts run. On a cluster the hook is
// on every node's client, and the server counters are summed over the primaries, with
// the replicas' share counted apart.
package main
