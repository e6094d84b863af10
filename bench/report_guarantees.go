package main

import (
	"fmt"
	"strings"
)

// guaranteesSection writes section 9: what each guarantee of guardkit's scripts costs
// the server (guarantees.go).
func (r *report) guaranteesSection(b *strings.Builder) {
	if !r.wanted("guarantees") || !r.ran(b, "guarantees") {
		return
	}
	b.WriteString("## 9. What each guarantee costs the server\n\n")
	b.WriteString("One goroutine sends uncontended pairs back to back (try-acquire → release on its own key) for each row in turn, interleaved as in section 1. `scripts` is guardkit's `acquire.lua` and `release.lua` read from `guard/scripts` and run directly, without the engine around them; each `scripts/no-…` row is the same two scripts with one guarantee cut out of the text (the cuts are in `bench/guarantees.go`, and a run fails when one no longer applies). `floor` is the fewest calls an owner-checked, reentrant lock with fencing tokens makes in a script each way (acquire: HMGET, INCR of a token counter, HSET, PEXPIRE; release: HGET, DEL) and none of the guarantees below; `raw` is the bare `SET NX PX` + compare-and-delete; `ceiling` is two scripts that do nothing. Redis µs = `INFO commandstats` usec of the top-level calls per pair (scripts with the commands they call, and raw's SET); server CPU = redis-server's user + system CPU per pair; saved = `scripts`' median − the row's median, what the cut guarantee costs (a difference of two medians: rounds scatter by about a microsecond).\n\n")
	r.table(b, "guarantees", "G", []column{
		{"Redis µs/pair", "redis_us_per_pair", 1}, {"× raw", "redis_x_raw", 2}, {"saved µs", "saved:redis_us_per_pair", 1},
		{"server CPU µs/pair", "server_cpu_us_per_pair", 1}, {"saved CPU µs", "saved:server_cpu_us_per_pair", 1},
		{"cmds/pair", "cmds_per_pair", 2}, {"pairs/s", "pairs_per_s", -1}, {"errors", "errors", 0},
	})
	b.WriteString("What each `scripts/no-…` row gives up:\n\n")
	for _, c := range guaranteeCuts {
		if len(c.edits) == 0 {
			continue
		}
		fmt.Fprintf(b, "- `%s`: %s — without %s.\n", c.name, c.guarantee, cutDescription(c.edits))
	}
	b.WriteString("\n")
}

// addSaved adds "saved:<metric>" to every median of the guarantees scenario — the
// `scripts` row's median minus the row's, for Redis time and server CPU per pair — and
// "redis_x_raw", the row's Redis time over the bare lock's.
func (r *report) addSaved() {
	base, ok := r.get("guarantees", "G=1", "scripts")
	if !ok {
		return
	}
	raw, _ := r.get("guarantees", "G=1", "raw")
	for _, s := range r.sums {
		if s.Scenario != "guarantees" || s.Err != "" {
			continue
		}
		if b := raw.Metrics["redis_us_per_pair"]; b > 0 {
			s.Metrics["redis_x_raw"] = s.Metrics["redis_us_per_pair"] / b
		}
		for _, k := range []string{"redis_us_per_pair", "server_cpu_us_per_pair"} {
			if v, ok := s.Metrics[k]; ok {
				s.Metrics["saved:"+k] = base.Metrics[k] - v
			}
		}
	}
}
