package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
)

// The capacity page (docs/CAPACITY.md, flag -capacity): what a primary can serve in
// locked requests per second, from the server's CPU and script time per pair measured in
// this run, on one server, on a Cluster and on a quorum.

// headroom is the share of a primary's core the page provisions for: Redis's latency
// grows fast as its one thread nears saturation.
const headroom = 0.7

// capacityPage returns docs/CAPACITY.md for this run.
func (r *report) capacityPage() string {
	g := r.metric
	var b strings.Builder
	b.WriteString("# Capacity: locked requests per second per Redis primary\n\n[← README](../README.md)\n\n")
	b.WriteString("<!-- Written by `make bench-compare` (bench/report_capacity.go) from its run; do not edit. -->\n\n")
	fmt.Fprintf(&b, "From the `make bench-compare` run of %s (%s, %d logical CPUs shared by the client and every redis-server, redis-server %s, %s): every figure below is a median of that run's %d interleaved repetitions.\n\n",
		r.started.UTC().Format("2006-01-02"), orDash(firstLine("/proc/cpuinfo", "model name")), runtime.NumCPU(), r.redisVersion(), runtime.Version(), r.o.reps)
	b.WriteString("In production what runs out first is a primary's one thread, not the client: every locked request costs it an acquire and a release script. So the unit is **server CPU per pair** (redis-server's user + system CPU per acquire + release, network included) and, inside it, **script time per pair** (`INFO commandstats`: the two scripts with the commands they call).\n\n")

	b.WriteString("## One primary\n\n")
	b.WriteString("| concurrency | server CPU µs per pair | script µs per pair | pairs/s a whole core serves | provisioned at 70 % | the bare `SET NX` lock's server CPU µs per pair |\n|---|--:|--:|--:|--:|--:|\n")
	for _, c := range r.cells("uncontended") {
		cpu, ok1 := g("uncontended", c, "guardkit", "server_cpu_us_per_pair")
		sc, ok2 := g("uncontended", c, "guardkit", "script_us_per_pair")
		raw, ok3 := g("uncontended", c, "raw", "server_cpu_us_per_pair")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", c, num(cpu, ok1, 1), num(sc, ok2, 1),
			num(1e6/cpu, ok1, -1), num(headroom*1e6/cpu, ok1, -1), num(raw, ok3, 1))
	}
	b.WriteString("\nAt one goroutine a pair's CPU is mostly the network path of two lone round trips; with many concurrent requests (G=16, G=64: goroutines of one process, whose non-urgent calls share pipelines) the server reads several commands per system call, and the script time is most of it. Size with the row of your concurrency.\n\n")

	b.WriteString("## N primaries (Redis Cluster)\n\n")
	b.WriteString("Locks on different keys spread over the hash slots, so a Cluster of N primaries serves about N times one primary, as long as the keys spread: a single key lives on one primary, and a hot key is bounded by that primary (and, contended, by its handoffs: RESULTS.md §2). Each replica applies its primary's writes, which costs it CPU too. Measured on 3 primaries with a replica each (`cluster-uncontended`, CPU and script time summed over the 6 servers):\n\n")
	b.WriteString("| concurrency | pairs/s | server CPU µs per pair, all 6 | script µs per pair, all 6 | one server's (table above) |\n|---|--:|--:|--:|--:|\n")
	for _, c := range r.cells("cluster-uncontended") {
		p, ok0 := g("cluster-uncontended", c, "guardkit", "pairs_per_s")
		cpu, ok1 := g("cluster-uncontended", c, "guardkit", "server_cpu_us_per_pair")
		sc, ok2 := g("cluster-uncontended", c, "guardkit", "script_us_per_pair")
		one, ok3 := g("uncontended", c, "guardkit", "server_cpu_us_per_pair")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", c, num(p, ok0, -1), num(cpu, ok1, 1), num(sc, ok2, 1), num(one, ok3, 1))
	}
	b.WriteString("\nThe difference to one server is what the replicas spend applying the writes and what the Cluster's redirection costs; the primaries' own share is one server's figure.\n\n")

	b.WriteString("## A quorum of M servers\n\n")
	b.WriteString("A quorum (`guard.NewQuorum`) runs every pair on every server, so it does not add capacity: each server carries every lock. Measured on 3 servers (`quorum-uncontended`, summed over the 3):\n\n")
	b.WriteString("| concurrency | pairs/s | server CPU µs per pair, all 3 | per server | pairs/s a core of each serves |\n|---|--:|--:|--:|--:|\n")
	for _, c := range r.cells("quorum-uncontended") {
		p, ok0 := g("quorum-uncontended", c, "guardkit/quorum", "pairs_per_s")
		cpu, ok1 := g("quorum-uncontended", c, "guardkit/quorum", "server_cpu_us_per_pair")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", c, num(p, ok0, -1), num(cpu, ok1, 1), num(cpu/3, ok1, 1), num(3e6/cpu, ok1, -1))
	}
	b.WriteString("\n## What to provision for R locked requests per second\n\n")
	b.WriteString("With c the server CPU per pair at your concurrency (first table):\n\n")
	b.WriteString("- **One primary** carries R ≤ 0.7 × 10⁶ / c.\n")
	b.WriteString("- **A Cluster** needs N ≥ R × c / (0.7 × 10⁶) primaries, for keys that spread over the slots, and as many replicas' worth of CPU as it has replicas.\n")
	b.WriteString("- **A quorum of M** needs every one of its M servers to carry R: R ≤ 0.7 × 10⁶ / c per server.\n\n")
	if cpu, ok := g("uncontended", "G=64", "guardkit", "server_cpu_us_per_pair"); ok {
		const want = 50000.0
		cores := want * cpu / 1e6
		fmt.Fprintf(&b, "For example, 50,000 locked requests per second at G=64's %s µs a pair take %.2f primary cores; provisioned at 70 %%, a Cluster of %d primaries (one primary carries %s).\n\n",
			num(cpu, ok, 1), cores, int(math.Ceil(cores/headroom)), num(headroom*1e6/cpu, ok, -1))
	}

	b.WriteString("## Checked against the run\n\n")
	b.WriteString("The figures above are CPU per pair; this run's machine gave client and servers the same two cores, so a pair's whole CPU (client and server) bounds the pairs per second: at most 2 × 10⁶ / (client + server µs per pair). The run's rates against that bound:\n\n")
	b.WriteString("| scenario | concurrency | client + server µs per pair | bound, pairs/s | measured, pairs/s | measured ÷ bound |\n|---|---|--:|--:|--:|--:|\n")
	check := func(scenario, variant string) {
		for _, c := range r.cells(scenario) {
			cl, ok1 := g(scenario, c, variant, "client_cpu_us_per_pair")
			sv, ok2 := g(scenario, c, variant, "server_cpu_us_per_pair")
			p, ok3 := g(scenario, c, variant, "pairs_per_s")
			bound := 2e6 / (cl + sv)
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", scenario, c, num(cl+sv, ok1 && ok2, 1), num(bound, ok1 && ok2, -1), num(p, ok3, -1), num(p/bound, ok1 && ok2 && ok3, 2))
		}
	}
	check("uncontended", "guardkit")
	check("cluster-uncontended", "guardkit")
	b.WriteString("\nThe rates stay within the bound the CPU per pair sets, and near it with many concurrent requests: the CPU accounting that the tables above size with is what limits the run. What is not used is the scheduling between the processes and, at one goroutine, the round trips' idle time. On a machine where Redis has its own cores, the client no longer takes a share, and the first table's per-core figures are the limit.\n")
	return b.String()
}

// writeCapacity writes the capacity page to path.
func (r *report) writeCapacity(path string) error {
	return os.WriteFile(path, []byte(r.capacityPage()), 0o644)
}
