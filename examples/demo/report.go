package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// report prints the two runs side by side and reports whether the guarded one kept
// every update and answered every request.
func report(out io.Writer, c config, guarded, unguarded *outcome) bool {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...any) {
		for _, cell := range cells {
			fmt.Fprintf(tw, "%v\t", cell)
		}
		fmt.Fprintln(tw)
	}
	runs := []*outcome{guarded, unguarded}
	row("", "guarded", "unguarded")
	row("requests", c.requests, c.requests)
	row("200 OK", guarded.succeeded(), unguarded.succeeded())
	row("409 busy", guarded.busy, unguarded.busy)
	row("failed", guarded.failed, unguarded.failed)
	row("lost updates", guarded.lost(c), unguarded.lost(c))
	row("balances as expected", fmt.Sprintf("%d/%d", exact(c, guarded), c.accounts), fmt.Sprintf("%d/%d", exact(c, unguarded), c.accounts))
	for _, q := range []float64{0.50, 0.90, 0.99} {
		row(fmt.Sprintf("lock wait p%.0f", q*100), percentile(guarded.waits, q), "no lock")
	}
	row("burst took", short(guarded.elapsed), short(unguarded.elapsed))
	tw.Flush()

	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	row("account", "guarded balance/expected", "unguarded balance/expected")
	for i := range c.accounts {
		cells := []any{accountID(i)}
		for _, o := range runs {
			cell := fmt.Sprintf("%d/%d", o.final[i], o.expected(c, i))
			if d := o.final[i] - o.expected(c, i); d != 0 {
				cell = fmt.Sprintf("%d lost  %s", abs(d)/c.amount, cell)
			}
			cells = append(cells, cell)
		}
		row(cells...)
	}
	tw.Flush()
	fmt.Fprintln(out)

	for _, o := range runs {
		if o.failed > 0 {
			fmt.Fprintf(out, "%s run: %d requests failed, the last with: %s\n", o.name, o.failed, o.lastError)
		}
	}
	pass := guarded.lost(c) == 0 && guarded.failed == 0 && exact(c, guarded) == c.accounts
	switch lost := unguarded.lost(c); {
	case !pass:
		fmt.Fprintf(out, "FAIL: the guarded run lost %d updates or failed requests: the lock did not protect the balances\n", guarded.lost(c))
	case lost > 0:
		fmt.Fprintf(out, "PASS: with the lock, all %d successful withdrawals are in the balances.\n"+
			"      Without it, %d of %d successful withdrawals were lost: money left the accounts\n"+
			"      that the books never recorded.\n", guarded.succeeded(), lost, unguarded.succeeded())
	default:
		fmt.Fprintf(out, "PASS: with the lock, all %d successful withdrawals are in the balances.\n"+
			"      This time the unguarded withdrawals happened not to overlap; raise -work or\n"+
			"      -requests to see them lose updates.\n", guarded.succeeded())
	}
	return pass
}

// exact counts the accounts whose balance is the expected one.
func exact(c config, o *outcome) int {
	n := 0
	for i := range o.final {
		if o.final[i] == o.expected(c, i) {
			n++
		}
	}
	return n
}

// percentile returns the q-quantile of ds (nearest rank).
func percentile(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.999999) - 1
	i = min(max(i, 0), len(s)-1)
	return short(s[i])
}

// short rounds d to three significant digits or so, for reading.
func short(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
