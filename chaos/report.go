package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Event is one entry of a History's timeline, as a Report shows it.
type Event struct {
	At     Mono
	Proc   string // the process it happened in; empty for the test process
	Worker string // who: a worker, or empty for a fault
	Key    string // the lock key; empty for a fault, which concerns every key
	// What happened: "acquired", "left section", "lost lease", "acquire failed",
	// "released", "release failed", "fault began" or "fault ended".
	What  string
	Token int64  // the lease's fencing token; 0 when none
	Valid Mono   // the lease's validity deadline, where the entry knows it; 0 otherwise
	Note  string // flags, an error, a fault's kind
}

// Events returns h's timeline in time order: each critical section's entry and exit,
// each lease loss, each failed Acquire (a successful one is its section's entry) and
// each Release, and the start and end of each fault.
func (h *History) Events() []Event {
	h.mu.Lock()
	sections, losses, calls, faults := slices.Clone(h.sections), slices.Clone(h.losses), slices.Clone(h.calls), slices.Clone(h.faults)
	h.mu.Unlock()
	type entry struct {
		worker, key string
		at          Mono
	}
	entered := make(map[entry]bool, len(sections))
	out := make([]Event, 0, 2*len(sections)+len(losses)+len(calls)+2*len(faults))
	for _, s := range sections {
		entered[entry{s.Worker, s.Key, s.Enter}] = true
		out = append(out, Event{At: s.Enter, Proc: s.Proc, Worker: s.Worker, Key: s.Key, What: "acquired", Token: s.Token})
		var flags []string
		if s.Lost {
			flags = append(flags, "lease lost")
		}
		if s.Acked {
			flags = append(flags, "write acked")
		}
		if s.Stopped {
			flags = append(flags, "process stopped meanwhile")
		}
		out = append(out, Event{At: s.Exit, Proc: s.Proc, Worker: s.Worker, Key: s.Key, What: "left section", Token: s.Token,
			Valid: s.Valid, Note: strings.Join(flags, ", ")})
	}
	for _, l := range losses {
		out = append(out, Event{At: l.Noticed, Proc: l.Proc, Worker: l.Worker, Key: l.Key, What: "lost lease", Token: l.Token,
			Valid: l.Valid, Note: l.Reason})
	}
	for _, c := range calls {
		e := Event{At: c.Return, Proc: c.Proc, Worker: c.Worker, Key: c.Key, Token: c.Token}
		switch {
		case c.Op == "acquire" && c.Err == "" && entered[entry{c.Worker, c.Key, c.Return}]:
			continue
		case c.Op == "acquire" && c.Err == "":
			e.What = "acquired"
		case c.Err == "":
			e.What = c.Op + "d"
		default:
			e.What = c.Op + " failed"
		}
		e.Note = "took " + millis(c.Return.Sub(c.Start))
		if c.Err != "" {
			e.Note += ": " + c.Err
		}
		out = append(out, e)
	}
	for _, f := range faults {
		out = append(out, Event{At: f.Start, What: "fault began", Note: f.Kind}, Event{At: f.End, What: "fault ended", Note: f.Kind})
	}
	slices.SortStableFunc(out, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return out
}

// reportContext is how many events a Report shows just before and just after a
// violation, and at each end of it.
const reportContext = 5

// Report explains one violation to whoever reads a failed run: which invariant broke,
// on which key, with which fencing tokens, what happened on that key just before,
// during and just after, and how late the scheduler ran each process meanwhile. A
// breach found while every process ran on time points at the engine; one found while a
// process stalled for about as long as the breach lasted points at the host first.
type Report struct {
	Violation
	// Placed says how the violation was placed in time when its check could not tell
	// (From and To then hold the place found); empty when the check timed it.
	Placed string
	// NearFault reports whether the violation happened while a fault was injected or
	// within a lock TTL after it ended: where a fault that loses data (a restart, a
	// failover) can explain a breach. Explain leaves it false; the harness that knows
	// the TTL sets it.
	NearFault bool
	// Origin is the history's first event; the report gives the violation's time from
	// it.
	Origin Mono
	// Before, During and After are the events on the violation's key, and the faults,
	// just before From, between From and To, and just after To. During keeps the
	// first and last few; Elided counts the events left out between them.
	Before, During, After []Event
	Elided                int
	// Measured reports whether a probe measured the scheduling lag; Lags is then the
	// largest delay each process measured from From to To, and RunP99 and RunMax are
	// the whole run's, to compare with.
	Measured       bool
	Lags           []Lag
	RunP99, RunMax time.Duration
}

// Explain returns a Report for each of vs, from h's events and the scheduling lag that
// stalls measured (none when stalls is nil). A violation its check could not time (an
// audit after the run) is placed by its tokens, from the entry of the first section
// that held one of them to the exit of the last; failing that, at the last event on
// its key.
func (h *History) Explain(vs []Violation, stalls *Stalls) []Report {
	if len(vs) == 0 {
		return nil
	}
	events := h.Events()
	sections := h.Sections()
	var origin Mono
	if len(events) > 0 {
		origin = events[0].At
	}
	var p99, worst time.Duration
	if stalls != nil {
		p99, worst = stalls.Summary()
	}
	// The events on each key, faults included, made once per key.
	byKey := map[string][]Event{"": events}
	out := make([]Report, 0, len(vs))
	for _, v := range vs {
		r := Report{Violation: v, Origin: origin, Measured: stalls != nil, RunP99: p99, RunMax: worst}
		on, ok := byKey[v.Key]
		if !ok {
			for _, e := range events {
				if e.Key == v.Key || e.Key == "" {
					on = append(on, e)
				}
			}
			byKey[v.Key] = on
		}
		if r.From == 0 && r.To == 0 {
			r.place(sections, on)
		}
		lo, _ := slices.BinarySearchFunc(on, r.From, func(e Event, t Mono) int { return cmp.Compare(e.At, t) })
		hi, _ := slices.BinarySearchFunc(on, r.To+1, func(e Event, t Mono) int { return cmp.Compare(e.At, t) })
		r.Before = on[max(0, lo-reportContext):lo]
		r.During = on[lo:hi]
		if n := len(r.During); n > 2*reportContext {
			r.During = append(slices.Clone(r.During[:reportContext]), r.During[n-reportContext:]...)
			r.Elided = n - 2*reportContext
		}
		r.After = on[hi:min(len(on), hi+reportContext)]
		if stalls != nil {
			r.Lags = stalls.Lags(r.From, r.To)
		}
		out = append(out, r)
	}
	return out
}

// place finds r's time from the sections holding its tokens, or else the last of the
// events on its key.
func (r *Report) place(sections []Section, on []Event) {
	for _, s := range sections {
		if s.Key != r.Key || !slices.Contains(r.Tokens, s.Token) {
			continue
		}
		if r.Placed == "" || s.Enter < r.From {
			r.From = s.Enter
		}
		r.To = max(r.To, s.Exit)
		r.Placed = "by the sections holding its tokens"
	}
	if r.Placed == "" && len(on) > 0 {
		r.From, r.To = on[len(on)-1].At, on[len(on)-1].At
		r.Placed = "at the last event on its key"
	}
}

// String renders r over several lines: the violation, its time, the timing and lag
// that tell a loaded host from an engine fault, then the events around it with times
// in milliseconds from the violation's start.
func (r Report) String() string {
	var b strings.Builder
	b.WriteString(string(r.Inv))
	if r.Key != "" {
		fmt.Fprintf(&b, " on key %q", r.Key)
	}
	switch len(r.Tokens) {
	case 0:
	case 1:
		fmt.Fprintf(&b, ", token %d", r.Tokens[0])
	default:
		ts := make([]string, len(r.Tokens))
		for i, t := range r.Tokens {
			ts[i] = strconv.FormatInt(t, 10)
		}
		fmt.Fprintf(&b, ", tokens %s", strings.Join(ts, " and "))
	}
	b.WriteString(": " + r.Detail)
	switch {
	case r.From == 0 && r.To == 0:
		b.WriteString("\n  when: unknown (no event recorded)")
	default:
		fmt.Fprintf(&b, "\n  when: %.3fs into the run, for %s", r.From.Sub(r.Origin).Seconds(), millis(r.To.Sub(r.From)))
		if r.Placed != "" {
			b.WriteString(" (placed " + r.Placed + ")")
		}
	}
	if line := r.timing(); line != "" {
		b.WriteString("\n  timing: " + line)
	}
	b.WriteString("\n  scheduling lag then (largest probe delay per process): ")
	switch {
	case !r.Measured:
		b.WriteString("not measured")
	case len(r.Lags) == 0:
		b.WriteString("no probe sleep recorded then")
	default:
		for i, l := range r.Lags {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(procName(l.Proc) + " " + millis(l.Max))
		}
	}
	if r.Measured {
		fmt.Fprintf(&b, "; whole run p99 %s, max %s", millis(r.RunP99), millis(r.RunMax))
	}
	b.WriteString("\n  events")
	if r.Key != "" {
		fmt.Fprintf(&b, " on key %q and faults", r.Key)
	}
	b.WriteString(", ms from the violation's start:")
	if len(r.Before)+len(r.During)+len(r.After) == 0 {
		b.WriteString(" none recorded")
	}
	for _, e := range r.Before {
		r.event(&b, e)
	}
	b.WriteString("\n    ---- violation ----")
	for i, e := range r.During {
		if i == reportContext && r.Elided > 0 {
			fmt.Fprintf(&b, "\n    … %d more events …", r.Elided)
		}
		r.event(&b, e)
	}
	b.WriteString("\n    ---- after ----")
	for _, e := range r.After {
		r.event(&b, e)
	}
	return b.String()
}

// timing is the line that weighs a late event against the scheduling stall its
// process measured, or says that the invariant has no slack to weigh.
func (r Report) timing() string {
	switch {
	case r.Late > 0 || r.Slack > 0:
		line := fmt.Sprintf("%s late, slack %s, so %s beyond it", millis(r.Late), millis(r.Slack), millis(r.Late-r.Slack))
		if !r.Measured {
			return line
		}
		var stall time.Duration
		for _, l := range r.Lags {
			if l.Proc == r.Proc {
				stall = l.Max
			}
		}
		line += fmt.Sprintf("; its process (%s) stalled at most %s meanwhile", procName(r.Proc), millis(stall))
		if stall >= r.Late-r.Slack {
			return line + ", enough to explain it: the host was overloaded"
		}
		return line + fmt.Sprintf(", which explains at most %s of the %s", millis(stall), millis(r.Late-r.Slack))
	case slices.Contains([]Invariant{I1, I2, M3, M4}, r.Inv):
		return "not a timing invariant: " + string(r.Inv) + " has no slack, and no scheduling stall excuses it"
	}
	return ""
}

func (r Report) event(b *strings.Builder, e Event) {
	who := e.Worker
	if who == "" {
		who = "-"
	}
	line := fmt.Sprintf("%9s  %-16s %-15s", relMillis(e.At, r.From), who, e.What)
	var parts []string
	if e.Token != 0 {
		parts = append(parts, "token "+strconv.FormatInt(e.Token, 10))
	}
	if e.Valid != 0 {
		parts = append(parts, "valid until "+relMillis(e.Valid, r.From))
	}
	if e.Note != "" {
		note := strings.ReplaceAll(e.Note, "\n", " / ") // one line per event
		if len(note) > 160 {
			n := 160
			for !utf8.RuneStart(note[n]) {
				n--
			}
			note = note[:n] + "…"
		}
		parts = append(parts, note)
	}
	b.WriteString("\n    " + strings.TrimRight(line+" "+strings.Join(parts, ", "), " "))
}

func procName(p string) string {
	if p == "" {
		return "test process"
	}
	return p
}

func millis(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

func relMillis(t, from Mono) string {
	return fmt.Sprintf("%+.1f", float64(t.Sub(from))/float64(time.Millisecond))
}
