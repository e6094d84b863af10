package chaos_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/guardkit/guardkit/chaos"
)

// brokenHistory fills h with sections on key "acct", from base on (in milliseconds),
// with a double grant: b (token 8) entered at +230 while a (token 7) ran until +260,
// both leases valid. Around it: c before, a restart of Redis just before b's entry, d
// after, and a section on another key at the same time. It returns the register log of
// "acct" in which a's write (token 7) was applied after b's (token 8): a stale fenced
// write.
func brokenHistory(h *chaos.History, base chaos.Mono) []string {
	at := func(n int) chaos.Mono { return base.Add(time.Duration(n) * time.Millisecond) }
	h.AddSection(chaos.Section{Key: "acct", Worker: "c/0", Token: 5, Enter: at(100), Exit: at(110), Valid: at(600), Acked: true})
	h.AddCall(chaos.Call{Op: "release", Key: "acct", Worker: "c/0", Token: 5, Start: at(111), Deadline: at(411), Return: at(112)})
	h.AddFault(chaos.Fault{Kind: "kill -9 + restart", Start: at(215), End: at(225)})
	h.AddSection(chaos.Section{Key: "acct", Worker: "a/0", Token: 7, Enter: at(200), Exit: at(260), Valid: at(700), Acked: true})
	h.AddSection(chaos.Section{Key: "acct", Worker: "b/1", Token: 8, Enter: at(230), Exit: at(250), Valid: at(730), Acked: true})
	h.AddSection(chaos.Section{Key: "other", Worker: "e/0", Token: 3, Enter: at(235), Exit: at(240), Valid: at(735)})
	h.AddCall(chaos.Call{Op: "acquire", Key: "acct", Worker: "d/0", Start: at(240), Deadline: at(270), Return: at(270),
		Err: "guard: locked"})
	h.AddSection(chaos.Section{Key: "acct", Worker: "d/0", Token: 9, Enter: at(300), Exit: at(310), Valid: at(800)})
	return []string{"r 5 0 c/0/1", "w 5 1 c/0/1", "r 7 1 a/0/1", "r 8 1 b/1/1", "w 8 2 b/1/1", "w 7 3 a/0/1"}
}

// brokenStalls is what the probe measured around the double grant: the test process
// stalled 12ms once, a worker process 3ms.
func brokenStalls(base chaos.Mono) *chaos.Stalls {
	at := func(n int) chaos.Mono { return base.Add(time.Duration(n) * time.Millisecond) }
	var s chaos.Stalls
	for n := 0; n < 400; n += 5 {
		s.Add(chaos.Stall{From: at(n), To: at(n + 5), Late: 200 * time.Microsecond})
		s.Add(chaos.Stall{Proc: "p1", From: at(n), To: at(n + 5), Late: 100 * time.Microsecond})
	}
	s.Add(chaos.Stall{From: at(235), To: at(252), Late: 12 * time.Millisecond})
	s.Add(chaos.Stall{Proc: "p1", From: at(240), To: at(248), Late: 3 * time.Millisecond})
	return &s
}

// inOrder reports whether every one of parts occurs in s, each after the one before.
func inOrder(s string, parts ...string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// TestReport explains a synthetic history with a double grant and a stale fenced write:
// each report names its invariant, key and tokens, shows the events before, during and
// after it, and the scheduling lag measured then.
func TestReport(t *testing.T) {
	base := chaos.Mono(time.Hour)
	var h chaos.History
	log := brokenHistory(&h, base)
	_, audit, err := chaos.AuditLog("acct", log, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range audit {
		h.AddViolation(v)
	}
	vs, _ := h.Check(chaos.Slack{Call: 50 * time.Millisecond, Loss: 20 * time.Millisecond})
	if got := chaos.Count(vs); len(vs) != 2 || got[chaos.I1] != 1 || got[chaos.M4] != 1 {
		t.Fatalf("violations %v, want one I1 and one M4", vs)
	}
	reports := h.Explain(vs, brokenStalls(base))
	var dbl, stale string
	for _, r := range reports {
		switch r.Inv {
		case chaos.I1:
			dbl = r.String()
		case chaos.M4:
			stale = r.String()
		}
	}

	for _, want := range []string{
		`I1 on key "acct", tokens 7 and 8: sections on "acct" by a/0 (token 7) and b/1 (token 8) overlapped for 20ms`,
		"when: 0.130s into the run, for 20.0ms",
		"timing: not a timing invariant: I1 has no slack",
		"scheduling lag then (largest probe delay per process): test process 12.0ms, p1 3.0ms; whole run p99 3.0ms, max 12.0ms",
	} {
		if !strings.Contains(dbl, want) {
			t.Errorf("double grant report lacks %q:\n%s", want, dbl)
		}
	}
	// Times are in milliseconds from the second grant, at +230.
	if !inOrder(dbl,
		"-118.0  c/0              released        token 5, took 1.0ms",
		"-30.0  a/0              acquired        token 7",
		"-15.0  -                fault began     kill -9 + restart",
		"-5.0  -                fault ended     kill -9 + restart",
		"---- violation ----",
		"+0.0  b/1              acquired        token 8",
		"+20.0  b/1              left section    token 8, valid until +500.0, write acked",
		"---- after ----",
		"+30.0  a/0              left section    token 7, valid until +470.0, write acked",
		"+40.0  d/0              acquire failed  took 30.0ms: guard: locked",
		"+70.0  d/0              acquired        token 9",
	) {
		t.Errorf("double grant report lacks the events around it, in order:\n%s", dbl)
	}
	if strings.Contains(dbl, "e/0") {
		t.Errorf("double grant report shows another key's section:\n%s", dbl)
	}

	for _, want := range []string{
		`M4 on key "acct", tokens 7 and 8: register "acct": w by a/0/1 with token 7 applied after token 8: a stale operation accepted`,
		"when: 0.100s into the run, for 60.0ms (placed by the sections holding its tokens)",
		"timing: not a timing invariant: M4 has no slack",
		"test process 12.0ms, p1 3.0ms",
	} {
		if !strings.Contains(stale, want) {
			t.Errorf("stale write report lacks %q:\n%s", want, stale)
		}
	}
	if !inOrder(stale, "-88.0  c/0              released", "---- violation ----", "+0.0  a/0              acquired        token 7",
		"+30.0  b/1              acquired        token 8", "+60.0  a/0              left section", "---- after ----", "d/0") {
		t.Errorf("stale write report lacks the events around it, in order:\n%s", stale)
	}
}

// TestReportTiming: a late event's report weighs its lateness beyond the slack against
// the stall its own process measured then.
func TestReportTiming(t *testing.T) {
	base := chaos.Mono(time.Hour)
	at := func(n int) chaos.Mono { return base.Add(time.Duration(n) * time.Millisecond) }
	var h chaos.History
	h.AddSection(chaos.Section{Proc: "p1", Key: "acct", Worker: "p1.0/0", Token: 4, Enter: at(0), Exit: at(300), Valid: at(240), Lost: true})
	h.AddLoss(chaos.Loss{Proc: "p1", Key: "acct", Worker: "p1.0/0", Token: 4, Valid: at(240), Noticed: at(290), Reason: "guard: lease lost"})
	vs, _ := h.Check(chaos.Slack{Loss: 20 * time.Millisecond, Stalls: brokenStalls(base)})
	if len(vs) != 1 || vs[0].Inv != chaos.M2 {
		t.Fatalf("violations %v, want one M2", vs)
	}
	r := h.Explain(vs, brokenStalls(base))[0].String()
	for _, want := range []string{
		`M2 on key "acct", token 4: loss of "acct" by p1.0/0 noticed 50ms after its validity deadline`,
		"timing: 50.0ms late, slack 20.0ms, so 30.0ms beyond it; its process (p1) stalled at most 3.0ms meanwhile, which explains at most 3.0ms of the 30.0ms",
		"-240.0  p1.0/0           acquired        token 4",
		"+50.0  p1.0/0           lost lease      token 4, valid until +0.0, guard: lease lost",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("late loss report lacks %q:\n%s", want, r)
		}
	}

	// Checked without the probe, the same loss is reported; a 40ms stall of its
	// process then explains it, and the report says so.
	vs, _ = h.Check(chaos.Slack{Loss: 20 * time.Millisecond})
	stalls := brokenStalls(base)
	stalls.Add(chaos.Stall{Proc: "p1", From: at(250), To: at(291), Late: 40 * time.Millisecond})
	if r := h.Explain(vs, stalls)[0].String(); !strings.Contains(r, "stalled at most 40.0ms meanwhile, enough to explain it: the host was overloaded") {
		t.Errorf("late loss report does not put it down to the stall:\n%s", r)
	}
}

// recorder is a testing.TB whose failures are kept for the test to read.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

// TestBrokenRunReported feeds a broken history through the checks every scenario ends
// with (finish: the register audit in Redis, the history's checks, the reports) and the
// verdict that fails a scenario, and reads the failure message.
func TestBrokenRunReported(t *testing.T) {
	w := newWorld(t, baseConfig())
	time.Sleep(500 * time.Millisecond)
	base := chaos.Now().Add(-400 * time.Millisecond)
	log := brokenHistory(w.hist, base)
	// The scheduling probe has measured the whole time the history covers once one of
	// its sleeps ends after the history's last event.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		all := w.stalls.All()
		if len(all) > 0 && all[len(all)-1].To > base.Add(310*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduling probe recorded no sleep in 10s")
		}
	}
	if err := w.sc.RPush(context.Background(), "register:acct:log", log).Err(); err != nil {
		t.Fatal(err)
	}
	_, reports := w.finish("", "none", smokeScale.slack)

	rec := &recorder{TB: t}
	judge(rec, scenario{name: "broken on purpose"}, reports)
	if len(rec.failed) != 1 {
		t.Fatalf("the verdict failed the scenario %d times, want once: %q", len(rec.failed), rec.failed)
	}
	msg := rec.failed[0]
	if !inOrder(msg,
		`scenario "broken on purpose" broke its invariants: 1× I1, 1× M4`,
		// In the order they happened: the stale write's sections began first.
		`violation 1 of 2: M4 on key "acct", tokens 7 and 8: register "acct": w by a/0/1 with token 7 applied after token 8`,
		"scheduling lag then (largest probe delay per process): test process ", "ms; whole run p99 ",
		"c/0              released        token 5",
		"---- violation ----", "a/0              acquired        token 7", "b/1              acquired        token 8",
		"---- after ----", "d/0              acquire failed",
		"violation 2 of 2: I1 on key \"acct\", tokens 7 and 8: sections on \"acct\" by a/0 (token 7) and b/1 (token 8) overlapped for 20ms",
		"scheduling lag then (largest probe delay per process): test process ", "ms; whole run p99 ",
		"a/0              acquired        token 7",
		"---- violation ----", "b/1              acquired        token 8",
		"---- after ----", "d/0              acquired        token 9",
	) {
		t.Errorf("the failure message does not explain the broken history:\n%s", msg)
	}

	// A scenario that expects I1 (Redis restarted empty) still fails on the stale write.
	rec = &recorder{TB: t}
	judge(rec, scenario{name: "restart", expected: []chaos.Invariant{chaos.I1}}, reports)
	if len(rec.failed) != 1 || !strings.Contains(rec.failed[0], "broke its invariants: 1× M4\n\nviolation 1 of 1: M4 on key \"acct\"") {
		t.Errorf("with I1 expected, the verdict was %q, want the M4 report alone", rec.failed)
	}

	// The expectation covers breaches near a fault only: the same overlap far from
	// every fault fails the scenario too.
	far := slices.Clone(reports)
	for i := range far {
		far[i].NearFault = false
	}
	rec = &recorder{TB: t}
	judge(rec, scenario{name: "restart", expected: []chaos.Invariant{chaos.I1}}, far)
	if len(rec.failed) != 1 || !inOrder(rec.failed[0], "broke its invariants: 1× I1, 1× M4", "only near its faults: this one is far from every fault") {
		t.Errorf("with I1 expected but far from the faults, the verdict was %q, want the I1 and M4 reports", rec.failed)
	}
}

// TestNearFault: a violation is near a fault when it overlaps the time from the
// fault's start to a TTL after its end.
func TestNearFault(t *testing.T) {
	at := func(n int) chaos.Mono { return chaos.Mono(n) * chaos.Mono(time.Millisecond) }
	faults := []chaos.Fault{{Kind: "restart", Start: at(1000), End: at(1100)}}
	for _, c := range []struct {
		from, to int
		near     bool
	}{
		{900, 950, false},   // before the fault
		{900, 1000, true},   // ends as it starts
		{1050, 1050, true},  // during it
		{1500, 1700, true},  // within the TTL after it
		{1600, 1600, true},  // at the TTL's end
		{1601, 1800, false}, // later
		{1601, 0, false},    // no end recorded
	} {
		v := chaos.Violation{Inv: chaos.I1, From: at(c.from), To: at(c.to)}
		if got := nearFault(v, faults, 500*time.Millisecond); got != c.near {
			t.Errorf("violation from %dms to %dms: nearFault = %t, want %t", c.from, c.to, got, c.near)
		}
	}
	if nearFault(chaos.Violation{From: at(1050)}, nil, time.Second) {
		t.Error("near a fault in a run without faults")
	}
}
