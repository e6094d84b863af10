package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Invariant names a property that every run must keep. The list is the one in the
// package documentation; a harness may name further checks of its own the same way,
// for its failure reports, but only the Invariants are columns of the table.
type Invariant string

// The invariants checked on every run.
const (
	// I1: no two critical sections on one key overlap while both leases are valid, unless
	// both hold shares of it (two readers, two permit holders), and a semaphore key never
	// has more valid holders than its limit.
	I1 Invariant = "I1"
	// I2: no release, renewal or decrement changes another owner's state.
	I2 Invariant = "I2"
	// I3: no goroutine outlives the Lockers that started it.
	I3 Invariant = "I3"
	// I4: no call returns later than its deadline plus the call slack.
	I4 Invariant = "I4"
	// M2: a lost lease's context is cancelled no later than its validity deadline plus
	// the loss slack.
	M2 Invariant = "M2"
	// M3: fencing tokens strictly increase, per key, in the order leases were granted.
	M3 Invariant = "M3"
	// M4: the fenced register counts exactly the acknowledged sections and accepts no
	// stale operation.
	M4 Invariant = "M4"
	// I5: no hold without a caller that believes it holds it: once Redis answers again
	// after a fault, every hold in Redis is one that an Acquire handed out (its token was
	// returned to a caller); an attempt whose caller was told it failed leaves none.
	I5 Invariant = "I5"
)

// Invariants lists every invariant in table order.
var Invariants = []Invariant{I1, I2, I3, I4, I5, M2, M3, M4}

// Section is one critical section as its worker saw it: one lease from the return of
// Acquire to the moment the work ended, just before Release.
type Section struct {
	Proc   string `json:"proc,omitempty"` // the process it ran in; empty for the test process
	Key    string `json:"key"`
	Worker string `json:"worker"` // who ran it: process or Locker, and goroutine
	Token  int64  `json:"token"`  // the lease's fencing token
	Enter  Mono   `json:"enter"`  // when Acquire returned
	Exit   Mono   `json:"exit"`   // when the work ended, before Release
	// Valid is the lease's ValidUntil sampled at Exit. Validity only moves forward,
	// by renewals, and stops moving when the lease is lost, so the lease promised
	// exclusivity from Enter until Valid.
	Valid   Mono `json:"valid"`
	Lost    bool `json:"lost,omitempty"`    // the lease was lost before Exit
	Acked   bool `json:"acked,omitempty"`   // the storage accepted the section's fenced write
	Stopped bool `json:"stopped,omitempty"` // the worker's process was stopped during the section
	// Kind is the lease's guard.Kind as a string; "" or "exclusive" for the exclusive lock.
	// Readers ("read") may overlap one another, and permit holders ("semaphore") up to
	// Limit of them; every other pair on a key excludes each other.
	Kind  string `json:"kind,omitempty"`
	Limit int    `json:"limit,omitempty"` // a semaphore's permits
	// Owner is the lease's owner (guard.Lease.Owner): what a fair lock's queue lists.
	Owner string `json:"owner,omitempty"`
}

// shared reports whether s holds a share that others of its kind may hold beside it.
func (s Section) shared() bool { return s.Kind == "read" || s.Kind == "semaphore" }

// compatible reports whether a and b may hold their key at once: two readers, or two
// permit holders (whose number Crowds checks).
func compatible(a, b Section) bool { return a.shared() && a.Kind == b.Kind }

// Loss is a lease loss as its holder noticed it: the moment its context was cancelled
// with a lease-lost cause.
type Loss struct {
	Proc    string `json:"proc,omitempty"` // the process it happened in; empty for the test process
	Key     string `json:"key"`
	Worker  string `json:"worker"`
	Token   int64  `json:"token,omitempty"` // the lost lease's fencing token
	Valid   Mono   `json:"valid"`           // the lease's validity deadline when it was lost
	Noticed Mono   `json:"noticed"`         // when the lease's context was cancelled
	Reason  string `json:"reason"`
	// Stopped marks a loss in a process that was stopped (SIGSTOP) meanwhile: a stopped
	// process runs no code, so M2 does not apply to it.
	Stopped bool `json:"stopped,omitempty"`
}

// Call is one bounded engine call: an Acquire with a context deadline, or a Release,
// whose bound is the Locker's release timeout.
type Call struct {
	Proc     string `json:"proc,omitempty"` // the process that made it; empty for the test process
	Op       string `json:"op"`
	Key      string `json:"key"`
	Worker   string `json:"worker"`
	Token    int64  `json:"token,omitempty"` // the lease's fencing token: the one granted, or the one released
	Start    Mono   `json:"start"`
	Deadline Mono   `json:"deadline"`
	Return   Mono   `json:"return"`
	// Fired is when the call's process saw its context's deadline pass (a goroutine
	// started by context.AfterFunc ran), or 0 when it did not watch. A deadline is a
	// runtime timer of the processor the context was made on: while the OS does not run
	// that processor's thread, the timer does not fire and nothing waiting on it wakes,
	// even though the process's other threads (and its scheduling probe) run on time.
	Fired Mono   `json:"fired,omitempty"`
	Err   string `json:"err,omitempty"`
	// Stopped marks a call in a process that was stopped (SIGSTOP) meanwhile: I4 does
	// not apply to it.
	Stopped bool `json:"stopped,omitempty"`
}

// seen says when the call's process saw its deadline, when it watched and that was late.
func (c Call) seen() string {
	if c.Fired == 0 || c.Fired.Sub(c.Deadline) < time.Millisecond {
		return ""
	}
	return fmt.Sprintf(", which its process saw %s late", c.Fired.Sub(c.Deadline).Round(100*time.Microsecond))
}

// Fault is one injected fault, from when it started to when it was healed.
type Fault struct {
	Kind  string `json:"kind"`
	Start Mono   `json:"start"`
	End   Mono   `json:"end"`
}

// Violation is one breach of an invariant, or of another check a harness names, with
// what a report needs to place it in the history (see History.Explain).
type Violation struct {
	Inv    Invariant `json:"inv"`
	Key    string    `json:"key,omitempty"`    // the lock key; empty when the breach concerns no one key
	Tokens []int64   `json:"tokens,omitempty"` // the fencing tokens of the leases involved
	// From and To bound when the breach happened: the overlap of two sections, the
	// time between a deadline and a late return, the moment of a probe. Both are zero
	// when the check cannot tell (an audit after the run).
	From Mono `json:"from,omitempty"`
	To   Mono `json:"to,omitempty"`
	// Proc is the process of a late event (I4, M2); empty for the test process.
	Proc string `json:"proc,omitempty"`
	// Late and Slack are, for a timing invariant, how late the event was after its
	// deadline and the slack it was allowed.
	Late   time.Duration `json:"late,omitempty"`
	Slack  time.Duration `json:"slack,omitempty"`
	Detail string        `json:"detail"`
}

// String describes the Violation for reports.
func (v Violation) String() string { return string(v.Inv) + ": " + v.Detail }

// History collects what the workers of one scenario did and what was done to them. It
// is safe for concurrent use; the zero value is ready.
type History struct {
	mu         sync.Mutex
	sections   []Section
	losses     []Loss
	calls      []Call
	faults     []Fault
	violations []Violation
	acquires   int
}

// AddSection records a critical section.
func (h *History) AddSection(s Section) {
	h.mu.Lock()
	h.sections = append(h.sections, s)
	h.mu.Unlock()
}

// AddLoss records a lease loss.
func (h *History) AddLoss(l Loss) {
	h.mu.Lock()
	h.losses = append(h.losses, l)
	h.mu.Unlock()
}

// AddCall records a bounded call; Acquire calls also count as operations.
func (h *History) AddCall(c Call) {
	h.mu.Lock()
	h.calls = append(h.calls, c)
	if c.Op == "acquire" {
		h.acquires++
	}
	h.mu.Unlock()
}

// AddFault records an injected fault.
func (h *History) AddFault(f Fault) {
	h.mu.Lock()
	h.faults = append(h.faults, f)
	h.mu.Unlock()
}

// AddViolation records a violation found outside the history, such as a probe of
// another owner's state (I2), a leaked goroutine (I3) or a register audit (M4).
func (h *History) AddViolation(v Violation) {
	h.mu.Lock()
	h.violations = append(h.violations, v)
	h.mu.Unlock()
}

// Sections returns a copy of the recorded critical sections.
func (h *History) Sections() []Section {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sections)
}

// Losses returns a copy of the recorded lease losses.
func (h *History) Losses() []Loss {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.losses)
}

// Calls returns a copy of the recorded calls.
func (h *History) Calls() []Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// Faults returns a copy of the recorded faults.
func (h *History) Faults() []Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.faults)
}

// Acquires returns the number of Acquire calls recorded.
func (h *History) Acquires() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.acquires
}

// Slack is how late a timed event may be before it counts as a violation. Correctness
// invariants (I1, I2, M3, M4) have no slack.
type Slack struct {
	Call time.Duration // I4: a call's return after its deadline
	Loss time.Duration // M2: a loss notice after the validity deadline
	// Stalls, when set, excuses a late event whose lateness beyond the slack is no more
	// than the largest scheduling stall measured in its process while it was late: a
	// goroutine the scheduler did not run could not have been on time, whatever the
	// engine did.
	Stalls *Stalls
}

// excused reports whether an event of process proc, due at due, that happened at at,
// late beyond slack, is explained by a scheduling stall.
func (s Slack) excused(proc string, due, at Mono, slack time.Duration) bool {
	return s.Stalls != nil && at.Sub(due)-slack <= s.Stalls.Max(proc, due, at)
}

// Check returns the violations in h: those found by checking its sections, losses and
// calls (I1; I4 — late calls, and leases handed out expired —; M2 — late notices, and
// sections that ran past their validity with no loss announced —; M3) and those recorded with AddViolation. It also returns how many late
// events it excused for a scheduling stall (see Slack.Stalls).
func (h *History) Check(slack Slack) (vs []Violation, excused int) {
	h.mu.Lock()
	vs = slices.Clone(h.violations)
	sections, losses, calls := slices.Clone(h.sections), slices.Clone(h.losses), slices.Clone(h.calls)
	h.mu.Unlock()
	for _, o := range Overlaps(sections) {
		vs = append(vs, Violation{Inv: I1, Key: o.A.Key, Tokens: []int64{o.A.Token, o.B.Token},
			From: o.B.Enter, To: o.B.Enter.Add(o.For), Detail: o.String()})
	}
	for _, c := range LateCalls(calls, slack.Call) {
		if slack.excused(c.Proc, c.Deadline, c.Return, slack.Call) || c.Fired != 0 && c.Return.Sub(c.Fired) <= slack.Call {
			// A call owes its slack from when its process could act on the deadline.
			excused++
			continue
		}
		vs = append(vs, Violation{Inv: I4, Key: c.Key, Tokens: tokens(c.Token), From: c.Deadline, To: c.Return,
			Proc: c.Proc, Late: c.Return.Sub(c.Deadline), Slack: slack.Call,
			Detail: fmt.Sprintf("%s %q by %s returned %s after its deadline%s (%s)", c.Op, c.Key, c.Worker, c.Return.Sub(c.Deadline), c.seen(), c.Err)})
	}
	for _, s := range ExpiredAtEntry(sections, calls, slack.Call) {
		if slack.excused(s.Proc, s.Valid, s.Enter, slack.Call) {
			excused++
			continue
		}
		vs = append(vs, Violation{Inv: I4, Key: s.Key, Tokens: tokens(s.Token), From: s.Valid, To: s.Enter,
			Proc: s.Proc, Late: s.Enter.Sub(s.Valid), Slack: slack.Call,
			Detail: fmt.Sprintf("acquire of %q by %s returned its lease %s after the lease's validity deadline", s.Key, s.Worker, s.Enter.Sub(s.Valid))})
	}
	for _, l := range LateLosses(losses, slack.Loss) {
		if slack.excused(l.Proc, l.Valid, l.Noticed, slack.Loss) {
			excused++
			continue
		}
		vs = append(vs, Violation{Inv: M2, Key: l.Key, Tokens: tokens(l.Token), From: l.Valid, To: l.Noticed,
			Proc: l.Proc, Late: l.Noticed.Sub(l.Valid), Slack: slack.Loss,
			Detail: fmt.Sprintf("loss of %q by %s noticed %s after its validity deadline (%s)", l.Key, l.Worker, l.Noticed.Sub(l.Valid), l.Reason)})
	}
	for _, s := range Unnoticed(sections, slack.Loss) {
		if slack.excused(s.Proc, s.Valid, s.Exit, slack.Loss) {
			excused++
			continue
		}
		vs = append(vs, Violation{Inv: M2, Key: s.Key, Tokens: tokens(s.Token), From: s.Valid, To: s.Exit,
			Proc: s.Proc, Late: s.Exit.Sub(s.Valid), Slack: slack.Loss,
			Detail: fmt.Sprintf("section on %q by %s ran %s past its lease's validity deadline, and the lease was not lost at its exit: the loss was never announced", s.Key, s.Worker, s.Exit.Sub(s.Valid))})
	}
	for _, c := range Crowds(sections) {
		ts := make([]int64, len(c.Holders))
		for i, h := range c.Holders {
			ts[i] = h.Token
		}
		vs = append(vs, Violation{Inv: I1, Key: c.Key, Tokens: ts, From: c.At, To: c.At, Detail: c.String()})
	}
	for _, p := range TokenOrder(sections) {
		vs = append(vs, Violation{Inv: M3, Key: p.Earlier.Key, Tokens: []int64{p.Earlier.Token, p.Later.Token},
			From: p.Earlier.Enter, To: p.Later.Enter, Detail: p.String()})
	}
	return vs, excused
}

// tokens lists the tokens of the leases involved in a violation, leaving out 0 (none).
func tokens(ts ...int64) []int64 {
	var out []int64
	for _, t := range ts {
		if t != 0 {
			out = append(out, t)
		}
	}
	return out
}

// Count tallies violations per invariant.
func Count(vs []Violation) map[Invariant]int {
	n := make(map[Invariant]int, len(Invariants))
	for _, v := range vs {
		n[v.Inv]++
	}
	return n
}

// Overlap is two critical sections on one key that ran at the same time while both
// leases were valid.
type Overlap struct {
	A, B Section
	For  time.Duration // how long both ran while valid
}

// String describes the Overlap for reports.
func (o Overlap) String() string {
	return fmt.Sprintf("sections on %q by %s (token %d) and %s (token %d) overlapped for %s while both leases were valid",
		o.A.Key, o.A.Worker, o.A.Token, o.B.Worker, o.B.Token, o.For)
}

// Overlaps returns the pairs of sections that break mutual exclusion (I1): on the same
// key, both inside their sections at some instant t with t before both validity
// deadlines, unless their kinds share the lock (two readers, two permit holders: see
// Crowds for a semaphore's limit). A section whose lease had expired when it entered, or
// that ran on after its lease expired (a stopped process), overlaps nothing for the time
// it was invalid.
func Overlaps(sections []Section) []Overlap {
	var out []Overlap
	for _, ss := range byKey(sections) {
		slices.SortFunc(ss, func(a, b Section) int { return cmp.Compare(a.Enter, b.Enter) })
		for i, a := range ss {
			endA := min(a.Exit, a.Valid)
			for _, b := range ss[i+1:] {
				if b.Enter >= endA {
					break
				}
				if end := min(endA, b.Exit, b.Valid); b.Enter < end && !compatible(a, b) {
					out = append(out, Overlap{A: a, B: b, For: end.Sub(b.Enter)})
				}
			}
		}
	}
	return out
}

// Crowd is a moment when more permit holders of a semaphore key held it, with valid
// leases, than the semaphore's limit (I1 for a semaphore).
type Crowd struct {
	Key     string
	At      Mono
	Holders []Section // the sections inside at that moment
	Limit   int
}

// String describes the Crowd for reports.
func (c Crowd) String() string {
	ws := make([]string, len(c.Holders))
	for i, h := range c.Holders {
		ws[i] = fmt.Sprintf("%s (token %d)", h.Worker, h.Token)
	}
	return fmt.Sprintf("%d permit holders of %q at once, limit %d: %s", len(c.Holders), c.Key, c.Limit, strings.Join(ws, ", "))
}

// Crowds returns the moments when a semaphore key had more holders inside their sections,
// with valid leases, than the smallest limit among them (one per excess, at the section
// that made the excess).
func Crowds(sections []Section) []Crowd {
	var out []Crowd
	for key, ss := range byKey(sections) {
		ss = slices.DeleteFunc(ss, func(s Section) bool { return s.Kind != "semaphore" })
		slices.SortFunc(ss, func(a, b Section) int { return cmp.Compare(a.Enter, b.Enter) })
		var open []Section
		for _, s := range ss {
			open = slices.DeleteFunc(open, func(o Section) bool { return min(o.Exit, o.Valid) <= s.Enter })
			if min(s.Exit, s.Valid) <= s.Enter {
				continue // invalid from the start: it held nothing
			}
			open = append(open, s)
			limit := s.Limit
			for _, o := range open {
				limit = min(limit, o.Limit)
			}
			if len(open) > limit {
				out = append(out, Crowd{Key: key, At: s.Enter, Holders: slices.Clone(open), Limit: limit})
			}
		}
	}
	return out
}

// TokenPair is two sections on one key whose fencing tokens are out of order.
type TokenPair struct {
	Earlier, Later Section
}

// String describes the TokenPair for reports.
func (p TokenPair) String() string {
	return fmt.Sprintf("on %q, %s entered before %s with token %d, not below %d",
		p.Earlier.Key, p.Earlier.Worker, p.Later.Worker, p.Earlier.Token, p.Later.Token)
}

// TokenOrder returns the pairs of sections on one key whose tokens are out of order
// (M3): in the order the sections entered, the token of an exclusive section (the
// exclusive and fair locks, a writer) must exceed the tokens of every section before it,
// and the token of a shared one (a reader, a permit holder) those of every exclusive
// section before it; shares held at once may have been granted in any order. Only
// sections that entered while their lease was valid are ordered: a lease granted by
// Redis but returned to its caller after it had already expired may enter after its
// successor. Each pair names the earlier section with the highest token.
func TokenOrder(sections []Section) []TokenPair {
	var out []TokenPair
	for _, ss := range byKey(sections) {
		ss = slices.DeleteFunc(ss, func(s Section) bool { return s.Valid <= s.Enter })
		slices.SortFunc(ss, func(a, b Section) int { return cmp.Compare(a.Enter, b.Enter) })
		var top, topExclusive *Section // the earlier sections with the highest tokens
		for i := range ss {
			s := &ss[i]
			before := top
			if s.shared() {
				before = topExclusive
			}
			if before != nil && s.Token <= before.Token {
				out = append(out, TokenPair{Earlier: *before, Later: *s})
			}
			if top == nil || s.Token > top.Token {
				top = s
			}
			if !s.shared() && (topExclusive == nil || s.Token > topExclusive.Token) {
				topExclusive = s
			}
		}
	}
	return out
}

// LateCalls returns the calls that returned more than slack after their deadline (I4),
// leaving out those of stopped processes.
func LateCalls(calls []Call, slack time.Duration) []Call {
	var out []Call
	for _, c := range calls {
		if !c.Stopped && c.Return.Sub(c.Deadline) > slack {
			out = append(out, c)
		}
	}
	return out
}

// Unnoticed returns the sections that ran more than slack past their lease's validity
// deadline while the lease did not count as lost at their exit (Section.Lost): a loss
// that was never announced, which M2 covers as much as a late notice. The lease reads
// its deadline when asked, so even a process stopped past it hears of the loss at the
// exit's check: stopped sections are not left out.
func Unnoticed(sections []Section, slack time.Duration) []Section {
	var out []Section
	for _, s := range sections {
		if !s.Lost && s.Exit.Sub(s.Valid) > slack {
			out = append(out, s)
		}
	}
	return out
}

// ExpiredAtEntry returns the sections whose lease was handed out more than slack after
// its validity deadline (I4: an Acquire that returns a lease returns it before the
// lease's deadline, the engine undoing a grant whose reply came too late), leaving out
// those whose Acquire call (the one of the same worker and key that returned at the
// section's entry) ran in a stopped process. Valid, sampled at the exit, only moves
// forward, so a section that entered after it entered with an expired lease.
func ExpiredAtEntry(sections []Section, calls []Call, slack time.Duration) []Section {
	type entry struct {
		worker, key string
		at          Mono
	}
	stopped := map[entry]bool{}
	for _, c := range calls {
		if c.Op == "acquire" && c.Stopped {
			stopped[entry{c.Worker, c.Key, c.Return}] = true
		}
	}
	var out []Section
	for _, s := range sections {
		if s.Enter.Sub(s.Valid) > slack && !stopped[entry{s.Worker, s.Key, s.Enter}] {
			out = append(out, s)
		}
	}
	return out
}

// LateLosses returns the losses noticed more than slack after their validity deadline
// (M2), leaving out those of stopped processes.
func LateLosses(losses []Loss, slack time.Duration) []Loss {
	var out []Loss
	for _, l := range losses {
		if !l.Stopped && l.Noticed.Sub(l.Valid) > slack {
			out = append(out, l)
		}
	}
	return out
}

func byKey(sections []Section) map[string][]Section {
	m := make(map[string][]Section)
	for _, s := range sections {
		m[s.Key] = append(m[s.Key], s)
	}
	return m
}

// FaultTimes measures each recorded fault: detect is the time from its start to the
// first lease loss noticed after it and no later than window after its end (faults that
// end no lease give none; losses in stopped processes do not count), recover the time
// from its end to the first section entered after it.
func (h *History) FaultTimes(window time.Duration) (detect, recover []time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.faults {
		first := Mono(-1)
		for _, l := range h.losses {
			if !l.Stopped && l.Noticed >= f.Start && l.Noticed <= f.End.Add(window) && (first < 0 || l.Noticed < first) {
				first = l.Noticed
			}
		}
		if first >= 0 {
			detect = append(detect, first.Sub(f.Start))
		}
		first = -1
		for _, s := range h.sections {
			if s.Enter >= f.End && (first < 0 || s.Enter < first) {
				first = s.Enter
			}
		}
		if first >= 0 {
			recover = append(recover, first.Sub(f.End))
		}
	}
	return detect, recover
}

// Percentile returns the p-th percentile (0 < p ≤ 100, nearest rank) of ds, and false
// when ds is empty.
func Percentile(ds []time.Duration, p float64) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))], true
}
