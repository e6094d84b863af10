package main

import (
	"fmt"
	"strings"
)

// kindSections writes the tables of the lock kinds' scenarios (kinds.go).
func (r *report) kindSections(b *strings.Builder) {
	if len(r.cells("rw")) == 0 && len(r.cells("semaphore")) == 0 && len(r.cells("kinds-uncontended")) == 0 {
		return
	}
	r.addKindRatios()
	b.WriteString("## 7. Lock kinds (guardkit only)\n\n")
	if len(r.cells("kinds-uncontended")) > 0 {
		fmt.Fprintf(b, "**kinds-uncontended**: one goroutine sends uncontended try-acquire → release pairs through the engine, one kind at a time on a key of its own: `guardkit` the exclusive lock, `guardkit/read` and `guardkit/write` the two modes of a read-write lock, `guardkit/semaphore` %d permits, `guardkit/fair` the fair lock. As in section 9, the kinds take turns in slices of pairs, the order rotated every round, and the table shows medians over the rounds (%d rounds here). script µs/pair = `INFO commandstats` usec of EVALSHA per pair, the commands the scripts call included; × exclusive = the median of the same-round ratios to the exclusive lock's.\n\n",
			kindUncontendedPermits, r.repsOf("kinds-uncontended"))
		r.table(b, "kinds-uncontended", "G", []column{
			{"pairs/s", "pairs_per_s", -1}, {"script µs/pair", "script_us_per_pair", 1}, {"× exclusive", "script_x_exclusive", 2},
			{"cmds/pair", "cmds_per_pair", 1}, {"RT/pair", "rt_per_pair_hook", 2},
			{"server CPU µs/pair", "server_cpu_us_per_pair", 1}, {"errors", "errors", 0},
		})
	}
	if len(r.cells("rw")) == 0 && len(r.cells("semaphore")) == 0 {
		return
	}
	fmt.Fprintf(b, "No other library in this comparison has a read-write lock or a semaphore with a lease per holder, renewal and fencing, so these rows are guardkit's alone. **rw**: R readers loop `guard.Read()` acquire → hold %s → release on one key while one writer loops pause %s → `guard.Write()` acquire → hold %s → release, all on one Locker; `guardkit/exclusive` does the same work with every one of them taking the exclusive lock. × R=1 = reads/s over the same variant's at R=1; × exclusive = reads/s over `guardkit/exclusive`'s in the same cell; write wait = the writer's acquire call; peak = most readers inside at once; viol = moments a writer held the key with anyone. Per-acquisition counts cover reads and writes, attempts and releases; server CPU µs/acq includes Redis's idle work and so falls as the rate rises.\n\n",
		kindReadHold, kindWritePause, kindWriteHold)
	r.table(b, "rw", "R", []column{
		{"reads/s", "reads_per_s", -1}, {"× R=1", "ratio_first", 1}, {"× exclusive", "ratio_exclusive", 1},
		{"writes/s", "writes_per_s", -1}, {"write wait p50 ms", "write_wait_p50_ms", 2}, {"write wait p99 ms", "write_wait_p99_ms", 2},
		{"write wait max ms", "write_wait_max_ms", 2}, {"peak", "peak_readers", 0}, {"RT/acq", "rt_per_acq_hook", 2},
		{"cmds/acq", "cmds_per_acq", 1}, {"server CPU µs/acq", "server_cpu_us_per_acq", 0}, {"viol", "violations", 0}, {"errors", "errors", 0},
	})
	fmt.Fprintf(b, "**semaphore**: %d workers loop `guard.Permits(N)` acquire → hold %s → release on one key, on one Locker. × N=1 = acquisitions/s over N=1's; peak = most holders inside at once (must be N, never more); Jain = fairness of per-worker acquisitions; viol = moments with more than N inside.\n\n",
		kindSemW, kindSemHold)
	r.table(b, "semaphore", "N", []column{
		{"acq/s", "acq_per_s", -1}, {"× N=1", "ratio_first", 1}, {"peak", "peak_holders", 0}, {"Jain", "jain", 3},
		{"RT/acq", "rt_per_acq_hook", 2}, {"cmds/acq", "cmds_per_acq", 1}, {"server CPU µs/acq", "server_cpu_us_per_acq", 0},
		{"viol", "violations", 0}, {"errors", "errors", 0},
	})
}

// addKindRatios adds "ratio_first" (throughput over the first cell's, same variant) to the
// kinds' medians, and "ratio_exclusive" (guardkit's reads over guardkit/exclusive's) to rw.
func (r *report) addKindRatios() {
	rate := map[string]string{"rw": "reads_per_s", "semaphore": "acq_per_s"}
	for i := range r.sums {
		s := &r.sums[i]
		key, ok := rate[s.Scenario]
		if !ok || s.Err != "" {
			continue
		}
		cells := r.cells(s.Scenario)
		if first, ok := r.metric(s.Scenario, cells[0], s.Variant, key); ok && first > 0 {
			s.Metrics["ratio_first"] = s.Metrics[key] / first
		}
		if s.Scenario == "rw" && s.Variant == "guardkit" {
			if ex, ok := r.metric("rw", s.Cell, "guardkit/exclusive", key); ok && ex > 0 {
				s.Metrics["ratio_exclusive"] = s.Metrics[key] / ex
			}
		}
	}
}

// kindTargets are the lock kinds' targets (issue: readers' throughput scales with the
// readers while no writer waits more than a stated bound; a semaphore admits N and no
// more, fairly). A semaphore's throughput against N is shown in its table, not made a
// target: with 64 workers and Redis on two cores it measures the machine's CPU as much
// as the lock.
func (r *report) kindTargets() []target {
	g := r.metric
	var ts []target
	if cells := r.cells("kinds-uncontended"); len(cells) > 0 {
		met := true
		var parts []string
		for _, c := range cells {
			ex, ok := g("kinds-uncontended", c, "guardkit", "script_us_per_pair")
			for _, v := range scenarioVariants["kinds-uncontended"][1:] {
				k, ok1 := g("kinds-uncontended", c, v, "script_us_per_pair")
				x, ok2 := g("kinds-uncontended", c, v, "script_x_exclusive")
				met = met && ok1 && ok2 && x <= 1.2
				parts = append(parts, fmt.Sprintf("%s %s µs (%s×)", strings.TrimPrefix(v, "guardkit/"), num(k, ok1, 1), num(x, ok2, 2)))
			}
			parts = append(parts, fmt.Sprintf("exclusive %s µs", num(ex, ok, 1)))
		}
		ts = append(ts, target{"kinds-script-time", "kinds, uncontended: every kind's script time per pair ≤ 1.2× the exclusive lock's", strings.Join(parts, "; "), met})
	}
	if cells := r.cells("rw"); len(cells) > 0 {
		one, ok1 := g("rw", "R=1", "guardkit", "reads_per_s")
		sixteen, ok2 := g("rw", "R=16", "guardkit", "reads_per_s")
		ts = append(ts, target{"rw-scaling", "rw: readers' throughput at R=16 ≥ 4× R=1",
			fmt.Sprintf("%s× (%s vs %s reads/s)", num(sixteen/one, ok1 && ok2, 1), num(sixteen, ok2, -1), num(one, ok1, -1)),
			ok1 && ok2 && sixteen >= 4*one})
		w, ok3 := g("rw", "R=64", "guardkit", "write_wait_p99_ms")
		ex, ok4 := g("rw", "R=64", "guardkit/exclusive", "write_wait_p99_ms")
		exText := num(ex, ok4, 1) + " ms"
		if writes, ok := g("rw", "R=64", "guardkit/exclusive", "writes_per_s"); !ok4 && ok && writes == 0 {
			// The exclusive lock's writer never got in: it waited the whole window at least.
			ex, ok4 = float64(r.d.contended.Milliseconds()), true
			exText = fmt.Sprintf("> %s (no write in the window)", r.d.contended)
		}
		ts = append(ts, target{"rw-writer-wait", "rw: writer wait p99 at R=64 ≤ ¼ of the exclusive lock's (writers go first: a writer waits for the readers inside, not for the stream behind it)",
			fmt.Sprintf("%s ms vs %s exclusive", num(w, ok3, 1), exText), ok3 && ok4 && w <= ex/4})
		viol, met := 0.0, true
		for _, c := range cells {
			v, ok := g("rw", c, "guardkit", "violations")
			viol += v
			met = met && ok
		}
		ts = append(ts, target{"rw-violations", "rw: no writer ever inside with anyone", num(viol, met, 0) + " violations", met && viol == 0})
	}
	if cells := r.cells("semaphore"); len(cells) > 0 {
		met, fair := true, true
		var parts, jains []string
		for _, c := range cells {
			var n float64
			_, _ = fmt.Sscanf(c, "N=%g", &n)
			peak, ok1 := g("semaphore", c, "guardkit", "peak_holders")
			v, ok2 := g("semaphore", c, "guardkit", "violations")
			j, ok3 := g("semaphore", c, "guardkit", "jain")
			met = met && ok1 && ok2 && peak == n && v == 0
			fair = fair && ok3 && j >= 0.9
			parts = append(parts, fmt.Sprintf("%s peak %s, %s violations", c, num(peak, ok1, 0), num(v, ok2, 0)))
			jains = append(jains, fmt.Sprintf("%s %s", c, num(j, ok3, 3)))
		}
		ts = append(ts, target{"sem-limit", "semaphore: N holders at the peak, never more", strings.Join(parts, "; "), met})
		ts = append(ts, target{"sem-jain", "semaphore: Jain ≥ 0.9 at every N", strings.Join(jains, "; "), fair})
	}
	return ts
}

// repsOf returns the repetitions (rounds) behind the first median of scenario.
func (r *report) repsOf(scenario string) int {
	for _, s := range r.sums {
		if s.Scenario == scenario {
			return s.Rep
		}
	}
	return 0
}
