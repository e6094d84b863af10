package main

import (
	"fmt"
	"strings"
)

// The report's sections on the deployments with replicas (cluster.go): the Redis
// Cluster scenarios and the price of SyncReplicas.

// singleTwin is the single-server scenario that a replicated scenario repeats, for the
// "× single" column.
var singleTwin = map[string]string{
	"cluster-uncontended":    "uncontended",
	"cluster-contended":      "contended",
	"replicated-uncontended": "uncontended",
}

// addSingleRatio adds "ratio_single" to every median of a replicated scenario: its rate
// over the same variant's in the same cell on the single server, a ratio of medians.
func (r *report) addSingleRatio() {
	for _, s := range r.sums {
		twin, ok := singleTwin[s.Scenario]
		if !ok {
			continue
		}
		key := rateMetric(s.Scenario)
		if v, ok := r.metric(twin, s.Cell, s.Variant, key); ok && v > 0 {
			s.Metrics["ratio_single"] = s.Metrics[key] / v
		}
	}
}

// ran reports whether scenario has results, and otherwise writes why it has none when
// its deployment failed to start.
func (r *report) ran(b *strings.Builder, scenario string) bool {
	if len(r.cells(scenario)) > 0 {
		return true
	}
	if err := r.deployErrs[scenario]; err != nil {
		fmt.Fprintf(b, "`%s` did not run: %s\n\n", scenario, strings.Join(strings.Fields(err.Error()), " "))
	}
	return false
}

func (r *report) wanted(scenarios ...string) bool {
	for _, s := range scenarios {
		if contains(r.o.scenarios, s) {
			return true
		}
	}
	return false
}

// replicatedSections writes sections 5 (Redis Cluster) and 6 (SyncReplicas) when their
// scenarios were asked for.
func (r *report) replicatedSections(b *strings.Builder) {
	r.addSingleRatio()
	if r.wanted("cluster-uncontended", "cluster-contended") {
		r.clusterSection(b)
	}
	if r.wanted("cluster-uncontended", "replicated-uncontended") {
		r.syncSection(b)
	}
}

func (r *report) clusterSection(b *strings.Builder) {
	b.WriteString("## 5. Redis Cluster\n\n")
	fmt.Fprintf(b, "A Redis Cluster of %d primaries with %d replica each (%d redis-server processes started by `internal/redistest` on loopback ports, cluster-node-timeout 2 s, no persistence) on the same cores as the client, started once for these scenarios. The loops, durations and repetitions are those of the single-server scenarios. Every adapter has its own `redis.NewClusterClient` given every node as a seed (ContextTimeoutEnabled for guardkit, as on the single server; go-redis defaults otherwise). Each run's keys are chosen so that the lock of goroutine i is served by primary i mod %d: at G=16 and G=64 the goroutines spread evenly over the primaries; at G=1, and for the contended key, every library uses the first primary. RT is counted by a hook on every node's client (so it includes what a library sends to one node directly, such as guardkit's WAIT, and the client's slot-map reloads); reads, cmds and server CPU are summed over the primaries; the replicas' share (applying the replication stream) is in the replica columns. × single = this rate ÷ the same library's in the same cell on the single server of this run (ratio of medians). redsync is left out: Redlock wants independent servers, and one cluster client behind it would make it a single-instance lock, which the raw row already is. rueidislock is left out: pointed at the cluster (rueidis finds it from `InitAddress`) it locks, but a waiter can miss the release it waits for and sleep until its context ends, and a fresh Locker's first attempt on a node it has not connected to yet can exceed the 20 ms that rueidislock gives each attempt.\n\n",
		clusterPrimaries, clusterReplicas, clusterPrimaries*(1+clusterReplicas), clusterPrimaries)
	if r.ran(b, "cluster-uncontended") {
		b.WriteString("### Uncontended\n\nG goroutines, each on its own key, loop try-acquire → release.\n\n")
		r.table(b, "cluster-uncontended", "G", []column{
			{"pairs/s", "pairs_per_s", -1}, {"× raw", "ratio_raw", 2}, {"× single", "ratio_single", 2},
			{"p50 µs", "p50_us", 0}, {"p99 µs", "p99_us", 0}, {"RT/pair", "rt_per_pair_hook", 2},
			{"reads/pair", "reads_per_pair", 2}, {"cmds/pair", "cmds_per_pair", 2},
			{"server CPU µs/pair", "server_cpu_us_per_pair", 1}, {"replica cmds/pair", "replica_cmds_per_pair", 2},
			{"replica CPU µs/pair", "replica_cpu_us_per_pair", 1}, {"client CPU µs/pair", "client_cpu_us_per_pair", 1},
			{"errors", "errors", 0},
		})
	}
	if r.ran(b, "cluster-contended") {
		b.WriteString("### Contended\n\nW workers on one key loop blocking acquire → hold H → release; the columns are those of section 2. guardkit's release notifications travel by sharded Pub/Sub on Redis 7 (SPUBLISH reaches the lock's shard only).\n\n")
		r.table(b, "cluster-contended", "cell", []column{
			{"acq/s", "acq_per_s", -1}, {"× raw", "ratio_raw", 2}, {"× single", "ratio_single", 2},
			{"gap mean µs", "gap_mean_us", 0}, {"gap p99 µs", "gap_p99_us", 0}, {"wait p99 ms", "wait_p99_ms", 1},
			{"RT/acq", "rt_per_acq_hook", 2}, {"reads/acq", "reads_per_acq", 2}, {"cmds/acq", "cmds_per_acq", 1},
			{"SPUBLISH/acq", "cmd:spublish", 2}, {"self %", "self_handoff_pct", 0}, {"Jain", "jain", 3}, {"max/min", "max_min", 1},
			{"starved", "starved", 0}, {"viol", "violations", 0}, {"gave up", "gave_up", 0}, {"errors", "errors", 0},
		})
	}
}

// syncDeployments are the scenarios that run guardkit/sync-replicas beside guardkit.
var syncDeployments = []struct{ scenario, name string }{
	{"cluster-uncontended", fmt.Sprintf("Cluster, %d primaries + %d replica each", clusterPrimaries, clusterReplicas)},
	{"replicated-uncontended", "one server + 1 replica"},
}

func (r *report) syncSection(b *strings.Builder) {
	b.WriteString("## 6. The price of SyncReplicas\n\n")
	fmt.Fprintf(b, "guardkit with `guard.SyncReplicas(%d, %s)` (sync) beside plain guardkit (plain), uncontended, on the cluster of section 5 and on one redis-server with one replica started with `--replicaof` (scenario `replicated-uncontended`, both on loopback, no persistence). A pair is try-acquire + release timed by the caller; p50 and p99 are its latency, and at G=1 pairs/s is 1 ÷ the mean latency. With SyncReplicas the acquire script and `WAIT %d %d` go in one pipeline to the lock's primary, so a pair still takes 2 round trips; the added time is the replica's acknowledgement (the primary asks with REPLCONF GETACK, answers WAIT when REPLCONF ACK comes back). Δ = sync − plain of the medians; × plain = sync pairs/s ÷ plain pairs/s; WAIT and REPLCONF are counted per pair on the primaries; errors are acquisitions that SyncReplicas refused because no replica acknowledged within the timeout.\n\n",
		syncReplicas.n, syncReplicas.timeout, syncReplicas.n, syncReplicas.timeout.Milliseconds())
	b.WriteString("| deployment | G | plain pairs/s | sync pairs/s | × plain | plain p50 µs | sync p50 µs | Δ p50 µs | plain p99 µs | sync p99 µs | Δ p99 µs | WAIT/pair | REPLCONF/pair | sync errors |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, d := range syncDeployments {
		for _, c := range r.cells(d.scenario) {
			g := func(v, key string) (float64, bool) { return r.metric(d.scenario, c, v, key) }
			pr, ok1 := g("guardkit", "pairs_per_s")
			sr, ok2 := g("guardkit/sync-replicas", "pairs_per_s")
			if !ok1 && !ok2 {
				continue
			}
			p50, okp50 := g("guardkit", "p50_us")
			s50, oks50 := g("guardkit/sync-replicas", "p50_us")
			p99, okp99 := g("guardkit", "p99_us")
			s99, oks99 := g("guardkit/sync-replicas", "p99_us")
			wait, okw := g("guardkit/sync-replicas", "cmd:wait")
			repl, okr := g("guardkit/sync-replicas", "cmd:replconf")
			errs, oke := g("guardkit/sync-replicas", "errors")
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", d.name, c,
				num(pr, ok1, -1), num(sr, ok2, -1), num(sr/pr, ok1 && ok2 && pr > 0, 2),
				num(p50, okp50, 0), num(s50, oks50, 0), num(s50-p50, okp50 && oks50, 0),
				num(p99, okp99, 0), num(s99, oks99, 0), num(s99-p99, okp99 && oks99, 0),
				num(wait, okw, 2), num(repl, okr, 2), num(errs, oke, 0))
		}
	}
	b.WriteString("\n")
	if r.ran(b, "replicated-uncontended") {
		b.WriteString("### One server with one replica, uncontended\n\nThe columns of section 5; × single compares with the single server without a replica.\n\n")
		r.table(b, "replicated-uncontended", "G", []column{
			{"pairs/s", "pairs_per_s", -1}, {"× raw", "ratio_raw", 2}, {"× single", "ratio_single", 2},
			{"p50 µs", "p50_us", 0}, {"p99 µs", "p99_us", 0}, {"RT/pair", "rt_per_pair_hook", 2},
			{"reads/pair", "reads_per_pair", 2}, {"cmds/pair", "cmds_per_pair", 2},
			{"server CPU µs/pair", "server_cpu_us_per_pair", 1}, {"replica cmds/pair", "replica_cmds_per_pair", 2},
			{"replica CPU µs/pair", "replica_cpu_us_per_pair", 1}, {"client CPU µs/pair", "client_cpu_us_per_pair", 1},
			{"errors", "errors", 0},
		})
	}
}

// clusterSummary is the README's line on the Redis Cluster and SyncReplicas, empty when
// the cluster scenarios did not run.
func (r *report) clusterSummary() string {
	pairs, ok1 := r.metric("cluster-uncontended", "G=64", "guardkit", "pairs_per_s")
	ratio, ok2 := r.metric("cluster-uncontended", "G=64", "guardkit", "ratio_raw")
	if !ok1 || !ok2 {
		return ""
	}
	s := fmt.Sprintf("\nOn a Redis Cluster (%d primaries + %d replica each, same machine): guardkit %s pairs/s uncontended at G=64 (%s× raw on the cluster)",
		clusterPrimaries, clusterReplicas, num(pairs, true, -1), num(ratio, true, 2))
	if acq, ok := r.metric("cluster-contended", "W=64 H=1ms", "guardkit", "acq_per_s"); ok {
		s += fmt.Sprintf(", %s acq/s contended (W=64, 1 ms hold)", num(acq, true, -1))
	}
	p50, ok3 := r.metric("cluster-uncontended", "G=1", "guardkit", "p50_us")
	s50, ok4 := r.metric("cluster-uncontended", "G=1", "guardkit/sync-replicas", "p50_us")
	if ok3 && ok4 {
		s += fmt.Sprintf("; `SyncReplicas(%d, %s)` moves the median uncontended pair at G=1 from %s to %s µs", syncReplicas.n, syncReplicas.timeout, num(p50, true, 0), num(s50, true, 0))
	}
	return s + " (RESULTS.md sections 5 and 6).\n"
}
