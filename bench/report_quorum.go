package main

import (
	"fmt"
	"strings"
)

// quorumSection writes section 8: Redlock over independent servers (quorum.go).
func (r *report) quorumSection(b *strings.Builder) {
	if !r.wanted("quorum-uncontended", "quorum-contended") {
		return
	}
	b.WriteString("## 8. Independent servers: Redlock\n\n")
	fmt.Fprintf(b, "%d independent redis-servers (no replication, no persistence) on the same cores as the client, started once for these scenarios. `guardkit/quorum` is `guard.NewQuorum` (a lock held on a majority: attempts on every server at once with one nonce and a proposed token, which the servers take, or else the highest granting server's token written back to the majority before the lease is handed out; concurrent calls to one server share a pipeline; renewal and release on every server, wake-ups from any server's release notification, the restart check on); `redsync/quorum` is redsync's Redlock with one pool per server. `raw` and `guardkit` are the single-server locks on the first server, for reference: × raw compares with raw on one server. RT counts every server's round trips, a pipeline once (a quorum pair makes one per server for each half, fewer when guardkit's calls share pipelines, and guardkit's one more per server when a write-back is needed); reads, cmds and server CPU are summed over the %d servers. Loops, durations and repetitions are those of the single-server scenarios.\n\n",
		quorumServers, quorumServers)
	if r.ran(b, "quorum-uncontended") {
		b.WriteString("### Uncontended\n\nG goroutines, each on its own key, loop try-acquire → release.\n\n")
		r.table(b, "quorum-uncontended", "G", []column{
			{"pairs/s", "pairs_per_s", -1}, {"× raw", "ratio_raw", 2}, {"p50 µs", "p50_us", 0}, {"p99 µs", "p99_us", 0},
			{"RT/pair", "rt_per_pair_hook", 2}, {"reads/pair", "reads_per_pair", 2}, {"cmds/pair", "cmds_per_pair", 2},
			{"allocs/op", "allocs_per_op", 1}, {"client CPU µs/pair", "client_cpu_us_per_pair", 1},
			{"server CPU µs/pair", "server_cpu_us_per_pair", 1}, {"errors", "errors", 0},
		})
	}
	if r.ran(b, "quorum-contended") {
		b.WriteString("### Contended\n\nW workers on one key loop blocking acquire → hold H → release, all on one instance of the library (one process); the columns are those of section 2.\n\n")
		r.table(b, "quorum-contended", "cell", []column{
			{"acq/s", "acq_per_s", -1}, {"× raw", "ratio_raw", 2}, {"gap mean µs", "gap_mean_us", 0}, {"gap p99 µs", "gap_p99_us", 0},
			{"wait p99 ms", "wait_p99_ms", 1}, {"RT/acq", "rt_per_acq_hook", 2}, {"cmds/acq", "cmds_per_acq", 1},
			{"self %", "self_handoff_pct", 0}, {"Jain", "jain", 3}, {"max/min", "max_min", 1},
			{"starved", "starved", 0}, {"viol", "violations", 0}, {"gave up", "gave_up", 0}, {"errors", "errors", 0},
		})
	}
}
