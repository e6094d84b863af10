package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/guardkit/guardkit/guard"
)

// The several-keys scenario (guardkit only): a set of K keys taken as one lock
// (Locker.AcquireAll) beside the same K keys taken by nested single-key acquisitions in
// the same order, the way a caller without AcquireAll writes it. One goroutine; every
// acquisition finds its keys free.

// setSizes are the cells of scenario sets: keys per acquisition.
var setSizes = []int{2, 10}

// sets runs one goroutine looping acquire K keys → release, with AcquireAll (variant
// guardkit/set) or K nested Acquires released in reverse (guardkit/nested).
func (e *env) sets(v variant, k int) (map[string]float64, serverDelta, error) {
	libs, l, err := e.guardOnly(v)
	if err != nil {
		return nil, serverDelta{}, err
	}
	defer closeAll(libs)
	keys := make([]string, k)
	for i := range keys {
		keys[i] = e.keyFor("set", i)
	}
	ctx := context.Background()
	nested := strings.HasSuffix(v.name, "/nested")
	if nested {
		// The order AcquireAll takes them in, so that the two do the same work.
		probe, err := l.AcquireAll(ctx, keys)
		if err != nil {
			return nil, serverDelta{}, err
		}
		keys = probe.Keys()
		if err := probe.Release(ctx); err != nil {
			return nil, serverDelta{}, err
		}
	}
	once := func() error {
		if !nested {
			le, err := l.AcquireAll(ctx, keys, guard.Retry(guard.NoRetry()))
			if err != nil {
				return err
			}
			return le.Release(ctx)
		}
		held := make([]*guard.Lease, 0, k)
		inner := ctx
		var err error
		for _, key := range keys {
			var le *guard.Lease
			if le, err = l.TryAcquire(inner, key); err != nil {
				break
			}
			held = append(held, le)
			inner = le.Context()
		}
		for _, le := range slices.Backward(held) {
			if rerr := le.Release(ctx); err == nil {
				err = rerr
			}
		}
		return err
	}
	run := func(d time.Duration) (ops, errs int64, lat []int64, el time.Duration) {
		t0 := time.Now()
		for time.Since(t0) < d {
			s := time.Now()
			if err := once(); err != nil {
				errs++
				continue
			}
			lat = append(lat, int64(time.Since(s)))
			ops++
		}
		return ops, errs, lat, time.Since(t0)
	}
	run(e.dur.warm)
	a := e.counts(libs, false)
	ops, errs, lat, el := run(e.dur.contended)
	b := e.counts(libs, false)
	m := map[string]float64{
		"sets_per_s": float64(ops) / el.Seconds(),
		"errors":     float64(errs),
	}
	if len(lat) > 0 {
		m["p50_us"] = float64(quantileOf(lat, 0.50)) / 1e3
		m["p99_us"] = float64(quantileOf(lat, 0.99)) / 1e3
	}
	d := perOp(m, a, b, ops, "per_set")
	m["server_cpu_us_per_set"] = us(d.cpu) / float64(max(ops, 1))
	var scriptUsec int64
	for name, v := range d.usecBy {
		if strings.HasPrefix(name, "eval") {
			scriptUsec += v
		}
	}
	m["script_us_per_set"] = float64(scriptUsec) / float64(max(ops, 1))
	return m, d, nil
}

// setSections writes the several-keys table.
func (r *report) setSections(b *strings.Builder) {
	if len(r.cells("sets")) == 0 {
		return
	}
	r.addSetRatios()
	b.WriteString("## 7b. Several keys as one lock (guardkit only)\n\n")
	fmt.Fprintf(b, "**sets**: one goroutine takes K free keys and releases them: `guardkit/set` with `Locker.AcquireAll` (one script call for the K keys on one server, one lease), `guardkit/nested` with K nested `TryAcquire`s in the same canonical order, each inside the previous lease's context, released in reverse — what a caller writes without AcquireAll. × nested = sets/s over `guardkit/nested`'s in the same cell; RT/set = round trips the client made per set (acquire and release); script µs/set = `INFO commandstats` usec of EVALSHA per set.\n\n")
	r.table(b, "sets", "K", []column{
		{"sets/s", "sets_per_s", -1}, {"× nested", "ratio_nested", 2}, {"p50 µs", "p50_us", 0}, {"p99 µs", "p99_us", 0},
		{"RT/set", "rt_per_set_hook", 2}, {"cmds/set", "cmds_per_set", 1}, {"script µs/set", "script_us_per_set", 1},
		{"server CPU µs/set", "server_cpu_us_per_set", 1}, {"errors", "errors", 0},
	})
}

// setSummary is the several-keys line of the summary: AcquireAll beside nested
// single-key acquisitions, per set size; "" when the scenario did not run.
func (r *report) setSummary() string {
	if len(r.cells("sets")) == 0 {
		return ""
	}
	r.addSetRatios()
	var parts []string
	for _, c := range r.cells("sets") {
		sets, ok1 := r.metric("sets", c, "guardkit/set", "sets_per_s")
		ratio, ok2 := r.metric("sets", c, "guardkit/set", "ratio_nested")
		rt, ok3 := r.metric("sets", c, "guardkit/set", "rt_per_set_hook")
		nrt, ok4 := r.metric("sets", c, "guardkit/nested", "rt_per_set_hook")
		parts = append(parts, fmt.Sprintf("%s %s sets/s (%s× nested, %s round trips against %s)",
			c, num(sets, ok1, -1), num(ratio, ok2, 2), num(rt, ok3, 0), num(nrt, ok4, 0)))
	}
	return "\nSeveral keys as one lock (`Locker.AcquireAll`, one goroutine, free keys on one server) beside the same keys taken by nested single-key acquisitions: " +
		strings.Join(parts, "; ") + ". Section 7b of RESULTS.md.\n"
}

// addSetRatios adds "ratio_nested" (sets/s over guardkit/nested's in the cell) to sets.
func (r *report) addSetRatios() {
	for i := range r.sums {
		s := &r.sums[i]
		if s.Scenario != "sets" || s.Err != "" {
			continue
		}
		if n, ok := r.metric("sets", s.Cell, "guardkit/nested", "sets_per_s"); ok && n > 0 {
			s.Metrics["ratio_nested"] = s.Metrics["sets_per_s"] / n
		}
	}
}
