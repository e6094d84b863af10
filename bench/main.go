package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Which variants run in which scenario. The try-acquire path of redsync and redislock
// does not depend on their retry settings, so their defaults rows appear only where
// waiting happens.
var scenarioVariants = map[string][]string{
	"uncontended": {"raw", "guardkit", "guardkit/no-deadlock-detection", "guardkit/autopipeline", "redsync", "redislock", "rueidislock", "rueidislock/defaults",
		"floor", "floor/autopipeline", "ceiling", "ceiling/autopipeline"},
	"contended": {"raw", "guardkit", "guardkit/no-deadlock-detection", "guardkit/autopipeline", "guardkit/locker-per-worker", "redsync", "redsync/defaults",
		"redislock", "redislock/defaults", "rueidislock", "rueidislock/defaults"},
	"reentrant": {"guardkit"},
	"many":      {"raw", "guardkit", "redsync", "redislock", "rueidislock"},
	// On a Redis Cluster (cluster.go). redsync is left out: Redlock wants independent
	// servers, and one cluster client behind it would make it a single-instance lock,
	// which the raw row already is. rueidislock is left out: on a cluster a waiter of
	// its can miss the release it waits for and sleep until its context ends.
	"cluster-uncontended": {"raw", "guardkit", "guardkit/sync-replicas", "redislock"},
	"cluster-contended":   {"raw", "guardkit", "guardkit/locker-per-worker", "redislock"},
	// One server with one replica: the price of SyncReplicas without a cluster.
	"replicated-uncontended": {"raw", "guardkit", "guardkit/sync-replicas"},
	// Independent servers (quorum.go): Redlock, guardkit's and redsync's, beside the
	// single-server locks on one of the servers.
	"quorum-uncontended": {"raw", "guardkit", "guardkit/quorum", "redsync/quorum"},
	"quorum-contended":   {"raw", "guardkit/quorum", "redsync/quorum", "redsync/quorum-defaults"},
	// The lock kinds (kinds.go): guardkit only.
	"rw": {"guardkit", "guardkit/exclusive"},
	// Each kind's uncontended pair beside the exclusive lock's (guardkit).
	"kinds-uncontended": {"guardkit", "guardkit/read", "guardkit/write", "guardkit/semaphore", "guardkit/fair"},
	// What each guarantee costs the server (guarantees.go): guardkit's scripts run
	// directly, whole and with one guarantee cut out, beside the bare lock, the floor and
	// two empty scripts, guardkit's scripts' own commands replayed alone (commands.go),
	// and a sketch of a packed layout with and without the work between its commands
	// (sketch.go).
	"guarantees": {"raw", "ceiling", "floor", "scripts", "scripts/no-release-nonce", "scripts/no-token-rewrite",
		"scripts/no-clock-floor", "scripts/no-acquire-nonce", "scripts/no-queue-pop", "scripts/no-guarantees", "scripts/commands", "sketch/packed", "sketch/commands"},
	"semaphore": {"guardkit"},
	// Several keys as one lock (sets.go): AcquireAll beside nested single-key acquisitions.
	"sets": {"guardkit/set", "guardkit/nested"},
}

var scenarioOrder = []string{"uncontended", "guarantees", "contended", "reentrant", "many", "kinds-uncontended", "rw", "semaphore", "sets",
	"cluster-uncontended", "cluster-contended", "replicated-uncontended", "quorum-uncontended", "quorum-contended"}

// uncontendedG are the cells of every uncontended scenario: goroutines.
var uncontendedG = []int{1, 16, 64}

// clusterContended are the cells of the cluster-contended scenario: workers and hold
// time, the two ends of the single-server scenario's cells.
var clusterContended = []struct {
	w int
	h time.Duration
}{{8, 0}, {64, time.Millisecond}}

type options struct {
	out, jsonOut, analysis, cpuprofile string
	memprofile, readme, capacity       string
	charts, from                       string
	reps                               int
	quick                              bool
	scenarios, libs                    []string
}

func main() {
	var o options
	var scen, libs string
	flag.StringVar(&o.out, "out", "", "write the Markdown report to this file too")
	flag.StringVar(&o.jsonOut, "json", "", "write one JSON object per measurement and per median to this file")
	flag.StringVar(&o.analysis, "analysis", "analysis.md", "Markdown file appended to the report when it exists")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&o.memprofile, "memprofile", "", "write an allocation profile of the whole run to this file")
	flag.StringVar(&o.readme, "readme", "", "replace the text between the bench-compare markers of this file with a summary")
	flag.StringVar(&o.capacity, "capacity", "", "write the capacity page (locked requests per second per primary, from this run) to this file")
	flag.StringVar(&o.charts, "charts", "", "draw the headline comparisons as SVG charts in this directory, shown by the -out report")
	flag.StringVar(&o.from, "from", "", "with -charts: draw the charts from the medians of this JSON lines file (written by -json) and run nothing")
	flag.IntVar(&o.reps, "reps", 3, "repetitions of every cell")
	flag.BoolVar(&o.quick, "quick", false, "tiny durations, for trying the harness")
	flag.StringVar(&scen, "scenario", strings.Join(scenarioOrder, ","), "scenarios to run")
	flag.StringVar(&libs, "lib", "", "comma-separated variants to run (default: all)")
	flag.Parse()
	o.scenarios = strings.Split(scen, ",")
	if libs != "" {
		o.libs = strings.Split(libs, ",")
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.from != "" {
		if o.charts == "" {
			return fmt.Errorf("-from draws charts: give -charts too")
		}
		sums, err := readMedians(o.from)
		if err != nil {
			return err
		}
		rep := report{o: o, sums: sums}
		return rep.writeCharts(o.charts)
	}
	d := durations{warm: 150 * time.Millisecond, uncontended: 500 * time.Millisecond,
		contended: 700 * time.Millisecond, reentrant: 200 * time.Millisecond,
		manyWindow: 2 * time.Second, manyTTL: 3 * time.Second}
	manyN := []int{1000, 10000}
	if o.quick {
		d = durations{warm: 20 * time.Millisecond, uncontended: 50 * time.Millisecond,
			contended: 100 * time.Millisecond, reentrant: 20 * time.Millisecond,
			manyWindow: 300 * time.Millisecond, manyTTL: 300 * time.Millisecond}
		manyN = []int{100, 1000}
	}
	srv, err := startServer()
	if err != nil {
		return err
	}
	defer srv.close()
	info := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: 1})
	defer info.Close()
	e := &env{addr: srv.addr, info: info, dur: d, ttl: 10 * time.Second}

	var jw io.Writer = io.Discard
	if o.jsonOut != "" {
		f, err := os.Create(o.jsonOut)
		if err != nil {
			return err
		}
		defer f.Close()
		jw = f
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	all := variants()
	byName := make(map[string]variant, len(all))
	for _, v := range all {
		byName[v.name] = v
	}
	pick := func(scenario string) []variant {
		var vs []variant
		for _, n := range scenarioVariants[scenario] {
			if o.libs == nil || slices.Contains(o.libs, n) || n == "raw" { // raw always runs: ratios need it
				vs = append(vs, byName[n])
			}
		}
		return vs
	}

	started, commit := time.Now(), gitDescribe()
	var ms []measurement
	record := func(m measurement) {
		ms = append(ms, m)
		writeJSON(jw, "run", m)
		fmt.Fprintf(os.Stderr, "%-22s %-12s rep %d %-26s %s\n", m.Scenario, m.Cell, m.Rep, m.Variant, brief(m))
	}
	type cell struct {
		name string
		run  func(v variant) (map[string]float64, serverDelta, error)
	}
	runCells := func(scenario string, cells []cell) {
		vs := pick(scenario)
		for rep := range o.reps {
			for ci, c := range cells {
				for vi := range vs {
					v := vs[(vi+rep+ci)%len(vs)] // rotate the order every cell and round
					var (
						m     map[string]float64
						delta serverDelta
						err   error
					)
					// Labels let a CPU profile be split by variant and cell (pprof -tagfocus);
					// goroutines a library starts inherit them.
					pprof.Do(context.Background(), pprof.Labels("run", scenario+"/"+strings.ReplaceAll(c.name, " ", ",")+"/"+v.name), func(context.Context) {
						m, delta, err = c.run(v)
					})
					mm := measurement{Scenario: scenario, Cell: c.name, Variant: v.name, Rep: rep + 1, Metrics: m, Commands: delta.byCmd, Usec: delta.usecBy}
					if err != nil {
						mm.Err = err.Error()
					}
					record(mm)
				}
			}
		}
	}
	want := func(s string) bool { return slices.Contains(o.scenarios, s) }

	uncontendedCells := func(e *env) []cell {
		var cells []cell
		for _, g := range uncontendedG {
			cells = append(cells, cell{fmt.Sprintf("G=%d", g), func(v variant) (map[string]float64, serverDelta, error) {
				return e.uncontended(v, g)
			}})
		}
		return cells
	}
	if want("uncontended") {
		runCells("uncontended", uncontendedCells(e))
	}
	// runTurns runs a scenario of variants taking turns (see env.turns): one goroutine
	// sending pairs back to back, the variants in short slices, since differences of a
	// microsecond per pair need both sides measured under the same conditions of a shared
	// machine. A failure is recorded as first's.
	runTurns := func(scenario, first string, run func(vs []variant, rounds, pairs int, record func(measurement)) error) {
		rounds, pairs := 75, 200
		if o.quick {
			rounds, pairs = 3, 100
		}
		var err error
		pprof.Do(context.Background(), pprof.Labels("run", scenario), func(context.Context) {
			err = run(pick(scenario), rounds, pairs, record)
		})
		if err != nil {
			record(measurement{Scenario: scenario, Cell: "G=1", Variant: first, Rep: 1, Err: err.Error()})
		}
	}
	if want("guarantees") {
		runTurns("guarantees", "scripts", e.guarantees)
	}
	if want("contended") {
		var cells []cell
		for _, w := range []int{8, 64} {
			for _, h := range []time.Duration{0, time.Millisecond} {
				cells = append(cells, cell{fmt.Sprintf("W=%d H=%s", w, h), func(v variant) (map[string]float64, serverDelta, error) {
					return e.contended(v, w, h)
				}})
			}
		}
		runCells("contended", cells)
	}
	if want("reentrant") {
		const levels = 3
		for rep := range o.reps {
			for _, v := range pick("reentrant") {
				res, err := e.reentrant(v, levels)
				for l := range levels {
					mm := measurement{Scenario: "reentrant", Cell: fmt.Sprintf("level=%d", l+1), Variant: v.name, Rep: rep + 1}
					if err != nil {
						mm.Err = err.Error()
					} else {
						mm.Metrics = res[l]
					}
					record(mm)
				}
			}
		}
	}
	if want("many") {
		var cells []cell
		for _, n := range manyN {
			cells = append(cells, cell{fmt.Sprintf("N=%d", n), func(v variant) (map[string]float64, serverDelta, error) {
				return e.many(v, n)
			}})
		}
		runCells("many", cells)
	}
	if want("kinds-uncontended") {
		// Each kind's ratio to the exclusive lock is taken within a round.
		runTurns("kinds-uncontended", "guardkit", e.kindsUncontended)
	}
	// The kinds' scenarios: one cell per value of their parameter.
	for _, k := range []struct {
		scenario, label string
		values          []int
		run             func(variant, int) (map[string]float64, serverDelta, error)
	}{{"rw", "R", rwReaders, e.readWrite}, {"semaphore", "N", semPermits, e.semaphore}, {"sets", "K", setSizes, e.sets}} {
		if !want(k.scenario) {
			continue
		}
		var cells []cell
		for _, n := range k.values {
			cells = append(cells, cell{fmt.Sprintf("%s=%d", k.label, n), func(v variant) (map[string]float64, serverDelta, error) {
				return k.run(v, n)
			}})
		}
		runCells(k.scenario, cells)
	}
	deployErrs := map[string]error{}
	// deployed runs the scenarios of a deployment that start wants, between its start and
	// its stop; a deployment that does not start fails its scenarios, not the run.
	deployed := func(scenarios []string, start func(*env) (*env, func(), error), body func(*env)) {
		var wanted []string
		for _, s := range scenarios {
			if want(s) {
				wanted = append(wanted, s)
			}
		}
		if len(wanted) == 0 {
			return
		}
		de, stop, err := start(e)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s not run: %v\n", strings.Join(wanted, ", "), err)
			for _, s := range wanted {
				deployErrs[s] = err
			}
			return
		}
		defer stop()
		body(de)
	}
	// pairRuns runs prefix's uncontended and contended scenarios on de, the contended one
	// at the two ends of the single server's cells.
	pairRuns := func(prefix string, de *env) {
		if s := prefix + "-uncontended"; want(s) {
			runCells(s, uncontendedCells(de))
		}
		if s := prefix + "-contended"; want(s) {
			var cells []cell
			for _, c := range clusterContended {
				w, h := c.w, c.h
				cells = append(cells, cell{fmt.Sprintf("W=%d H=%s", w, h), func(v variant) (map[string]float64, serverDelta, error) {
					return de.contended(v, w, h)
				}})
			}
			runCells(s, cells)
		}
	}
	deployed([]string{"cluster-uncontended", "cluster-contended"}, startClusterEnv, func(ce *env) { pairRuns("cluster", ce) })
	deployed([]string{"replicated-uncontended"}, startReplicatedEnv, func(re *env) {
		runCells("replicated-uncontended", uncontendedCells(re))
	})
	deployed([]string{"quorum-uncontended", "quorum-contended"}, startQuorumEnv, func(qe *env) { pairRuns("quorum", qe) })

	if o.memprofile != "" {
		f, err := os.Create(o.memprofile)
		if err != nil {
			return err
		}
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		f.Close()
		if err != nil {
			return err
		}
	}
	sums := summarize(ms)
	for _, s := range sums {
		writeJSON(jw, "median", s)
	}
	rep := report{o: o, d: d, e: e, started: started, commit: commit, elapsed: time.Since(started), sums: sums, variants: all, manyN: manyN, deployErrs: deployErrs}
	md := rep.markdown()
	fmt.Print(md)
	if o.charts != "" {
		if err := rep.writeCharts(o.charts); err != nil {
			return err
		}
	}
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(md), 0o644); err != nil {
			return err
		}
	}
	if o.capacity != "" {
		if err := rep.writeCapacity(o.capacity); err != nil {
			return err
		}
	}
	if o.readme != "" {
		ok, err := rep.updateReadme(o.readme)
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(os.Stderr, "%s has no %s … %s markers: not updated\n", o.readme, readmeStart, readmeEnd)
		}
	}
	return nil
}

func writeJSON(w io.Writer, kind string, m measurement) {
	metrics := make(map[string]any, len(m.Metrics))
	for k, v := range m.Metrics {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			metrics[k] = nil // JSON has no infinity: null
		} else {
			metrics[k] = v
		}
	}
	b, _ := json.Marshal(struct {
		Type     string           `json:"type"`
		Scenario string           `json:"scenario"`
		Cell     string           `json:"cell"`
		Variant  string           `json:"variant"`
		Reps     int              `json:"rep"`
		Metrics  map[string]any   `json:"metrics"`
		Commands map[string]int64 `json:"commands,omitempty"`
		Usec     map[string]int64 `json:"commands_usec,omitempty"`
		Err      string           `json:"error,omitempty"`
	}{kind, m.Scenario, m.Cell, m.Variant, m.Rep, metrics, m.Commands, m.Usec, m.Err})
	_, _ = w.Write(append(b, '\n'))
}

// brief is the progress line of one measurement.
func brief(m measurement) string {
	if m.Err != "" {
		return "error: " + m.Err
	}
	for _, k := range []string{"pairs_per_s", "acq_per_s", "ops_per_s", "renew_scripts_per_s"} {
		if v, ok := m.Metrics[k]; ok {
			return fmt.Sprintf("%s=%.0f", k, v)
		}
	}
	return ""
}

// summarize takes the median of every metric over the repetitions of each cell and
// variant, and the median of the per-round ratios to raw.
func summarize(ms []measurement) []measurement {
	type id struct{ scenario, cell, variant string }
	groups := map[id][]measurement{}
	var order []id
	for _, m := range ms {
		k := id{m.Scenario, m.Cell, m.Variant}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], m)
	}
	var out []measurement
	for _, k := range order {
		g := groups[k]
		s := measurement{Scenario: k.scenario, Cell: k.cell, Variant: k.variant, Metrics: map[string]float64{}, Rep: len(g)}
		keys := map[string]bool{}
		failed := 0
		for _, m := range g {
			if m.Err != "" {
				failed++
				s.Err = m.Err
				continue
			}
			for mk := range m.Metrics {
				keys[mk] = true
			}
		}
		if failed < len(g) {
			s.Err = "" // medians of the runs that succeeded; the failures are counted
		}
		if failed > 0 {
			s.Metrics["failed_runs"] = float64(failed)
		}
		for mk := range keys {
			var xs []float64
			for _, m := range g {
				if v, ok := m.Metrics[mk]; ok && m.Err == "" {
					xs = append(xs, v)
				}
			}
			s.Metrics[mk] = median(xs)
		}
		if mk := rateMetric(k.scenario); mk != "" {
			var ratios []float64
			for _, m := range g {
				for _, r := range groups[id{k.scenario, k.cell, "raw"}] {
					if r.Rep == m.Rep && r.Metrics[mk] > 0 {
						ratios = append(ratios, m.Metrics[mk]/r.Metrics[mk])
					}
				}
			}
			if len(ratios) > 0 {
				s.Metrics["ratio_raw"] = median(ratios)
			}
		}
		out = append(out, s)
	}
	return out
}

func rateMetric(scenario string) string {
	switch scenario {
	case "uncontended", "guarantees", "cluster-uncontended", "replicated-uncontended", "quorum-uncontended":
		return "pairs_per_s"
	case "contended", "cluster-contended", "quorum-contended":
		return "acq_per_s"
	}
	return ""
}
