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
	b.WriteString("One goroutine sends uncontended pairs back to back (try-acquire → release on a key of the row's own), 200 pairs per row in turn, the order rotated every round, 75 rounds; the table shows medians over the rounds. `scripts` is guardkit's `acquire.lua` and `release.lua` read from `guard/internal/script/lua` and run directly, without the engine around them; each `scripts/no-…` row is the same two scripts with one guarantee cut out of the text (the cuts are in `bench/guarantees.go`, and a run fails when one no longer applies). `floor` is the fewest calls an owner-checked, reentrant lock with fencing tokens makes in a script each way (acquire: HMGET, INCR of a token counter, HSET, PEXPIRE; release: HGET, DEL) and none of the guarantees below; `raw` is the bare `SET NX PX` + compare-and-delete; `ceiling` is two scripts that do nothing. `scripts/commands` is the `scripts` pair with nothing between its commands: the commands acquire.lua and release.lua called on this path, recorded from the real scripts when the row is built and replayed with the recorded arguments as constants (`bench/commands.go`), so that `scripts` − `scripts/commands` is the Lua work around the commands and `scripts/commands` ÷ `floor` what the layout's fields and commands cost over the floor's. `sketch/packed` is a data layout guardkit does not ship, measured to decide the next one: acquire.lua's and release.lua's contracts on the scenario's paths with the hold's owner, lease end, count and token packed into one hash field (16 fields read and written per pair against layout 3's 29; `bench/sketch.go`); `sketch/commands` is its pair with nothing between the commands (the same commands and fields, values of the same sizes as constants), so that the two rows part the sketch's time into its commands and the Lua work around them. Redis µs = `INFO commandstats` usec of the top-level calls per pair (scripts with the commands they call, and raw's SET); server CPU = redis-server's user + system CPU per pair; saved = the median over the rounds of `scripts`' figure − the row's in the same round, what the cut guarantee costs, with the quartiles of those differences (p25, p75: single rounds scatter, on a shared machine, by more than the smaller guarantees cost); × raw, the median of the same-round ratios to raw's Redis µs.\n\n")
	r.table(b, "guarantees", "G", []column{
		{"Redis µs/pair", "redis_us_per_pair", 1}, {"× raw", "redis_x_raw", 2}, {"saved µs", "saved:redis_us_per_pair", 1}, {"saved p25", "saved_p25", 1}, {"saved p75", "saved_p75", 1},
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
