package chaos

import (
	"fmt"
	"strings"
	"time"
)

// Row is one scenario's line in the results table.
type Row struct {
	Scenario   string
	Sections   int    // critical sections run
	Acquires   int    // Acquire calls made
	Faults     string // what was injected, e.g. "6× SIGSTOP redis 900ms"
	Violations map[Invariant]int
	// Detect and Recover are p99 times over the scenario's faults (see
	// History.FaultTimes); zero when not measured.
	Detect, Recover time.Duration
	// Lag and LagMax are the p99 and largest scheduling delays measured in the test
	// process during the run: how late any goroutine woke, engine or not.
	Lag, LagMax time.Duration
	Note        string
}

// Markdown renders rows as a Markdown table, followed by the scenarios' notes.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| Scenario | Sections / acquires | Faults injected |")
	for _, inv := range Invariants {
		b.WriteString(" " + string(inv) + " |")
	}
	b.WriteString(" p99 detect | p99 recover | sched lag p99 / max |\n|---|---:|---|")
	for range Invariants {
		b.WriteString("---:|")
	}
	b.WriteString("---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d / %d | %s |", r.Scenario, r.Sections, r.Acquires, r.Faults)
		for _, inv := range Invariants {
			fmt.Fprintf(&b, " %d |", r.Violations[inv])
		}
		fmt.Fprintf(&b, " %s | %s | %s / %s |\n", ms(r.Detect), ms(r.Recover), ms(r.Lag), ms(r.LagMax))
	}
	notes := false
	for _, r := range rows {
		if r.Note == "" {
			continue
		}
		if !notes {
			b.WriteString("\n")
			notes = true
		}
		fmt.Fprintf(&b, "- **%s**: %s\n", r.Scenario, r.Note)
	}
	return b.String()
}

func ms(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}
