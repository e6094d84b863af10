package chaos_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/internal/chaos"
	"github.com/guardkit/guardkit/internal/redistest"
)

func ms(n int) chaos.Mono { return chaos.Mono(n) * chaos.Mono(time.Millisecond) }

func TestOverlaps(t *testing.T) {
	sec := func(key, worker string, enter, exit, valid int) chaos.Section {
		return chaos.Section{Key: key, Worker: worker, Enter: ms(enter), Exit: ms(exit), Valid: ms(valid)}
	}
	cases := []struct {
		name string
		in   []chaos.Section
		want []time.Duration
	}{
		{"back to back", []chaos.Section{sec("k", "a", 0, 10, 500), sec("k", "b", 10, 20, 510)}, nil},
		{"overlap", []chaos.Section{sec("k", "a", 0, 10, 500), sec("k", "b", 5, 20, 510)}, []time.Duration{5 * time.Millisecond}},
		{"other key", []chaos.Section{sec("k", "a", 0, 10, 500), sec("j", "b", 5, 20, 510)}, nil},
		{"first expired", []chaos.Section{sec("k", "a", 0, 900, 400), sec("k", "b", 500, 600, 1000)}, nil},
		{"second entered expired", []chaos.Section{sec("k", "a", 0, 100, 500), sec("k", "b", 50, 60, 40)}, nil},
		{"contained", []chaos.Section{sec("k", "a", 0, 100, 500), sec("k", "b", 20, 30, 500)}, []time.Duration{10 * time.Millisecond}},
		{"three, unsorted", []chaos.Section{sec("k", "c", 8, 12, 500), sec("k", "a", 0, 10, 500), sec("k", "b", 5, 9, 500)},
			[]time.Duration{4 * time.Millisecond, 2 * time.Millisecond, 1 * time.Millisecond}},
	}
	for _, tc := range cases {
		got := chaos.Overlaps(tc.in)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d overlaps %v, want %d", tc.name, len(got), got, len(tc.want))
			continue
		}
		for i, o := range got {
			if o.For != tc.want[i] {
				t.Errorf("%s: overlap %d lasted %s, want %s", tc.name, i, o.For, tc.want[i])
			}
		}
	}
}

// TestKindsChecks: readers overlap freely but never with a writer; permit holders up to
// their limit; a writer's token must exceed every earlier one, a reader's every earlier
// writer's.
func TestKindsChecks(t *testing.T) {
	sec := func(worker, kind string, token int64, enter, exit int) chaos.Section {
		return chaos.Section{Key: "k", Worker: worker, Kind: kind, Limit: 2, Token: token, Enter: ms(enter), Exit: ms(exit), Valid: ms(1000)}
	}
	if got := chaos.Overlaps([]chaos.Section{sec("a", "read", 1, 0, 10), sec("b", "read", 2, 5, 20)}); len(got) != 0 {
		t.Errorf("two readers: %v", got)
	}
	if got := chaos.Overlaps([]chaos.Section{sec("a", "read", 1, 0, 10), sec("b", "write", 2, 5, 20)}); len(got) != 1 {
		t.Errorf("a reader and a writer: %d overlaps, want 1", len(got))
	}
	if got := chaos.Overlaps([]chaos.Section{sec("a", "semaphore", 1, 0, 10), sec("b", "fair", 2, 5, 20)}); len(got) != 1 {
		t.Errorf("a permit holder and a fair holder: %d overlaps, want 1", len(got))
	}
	three := []chaos.Section{sec("a", "semaphore", 1, 0, 30), sec("b", "semaphore", 2, 5, 30), sec("c", "semaphore", 3, 10, 30)}
	if got := chaos.Crowds(three[:2]); len(got) != 0 {
		t.Errorf("two holders of two permits: %v", got)
	}
	if got := chaos.Crowds(three); len(got) != 1 || len(got[0].Holders) != 3 {
		t.Errorf("three holders of two permits: %v", got)
	}
	three[0].Exit = ms(10) // the first left as the third came in
	if got := chaos.Crowds(three); len(got) != 0 {
		t.Errorf("holders one after another: %v", got)
	}
	readers := []chaos.Section{sec("a", "read", 5, 0, 10), sec("b", "read", 4, 1, 10)}
	if got := chaos.TokenOrder(readers); len(got) != 0 {
		t.Errorf("readers granted in one order, entered in the other: %v", got)
	}
	if got := chaos.TokenOrder(append(readers, sec("w", "write", 5, 20, 30))); len(got) != 1 {
		t.Errorf("a writer's token not above a reader's: %d pairs, want 1", len(got))
	}
	if got := chaos.TokenOrder([]chaos.Section{sec("w", "write", 9, 0, 10), sec("r", "read", 8, 20, 30)}); len(got) != 1 {
		t.Errorf("a reader's token not above the writer's before it: %d pairs, want 1", len(got))
	}
}

func TestTokenOrder(t *testing.T) {
	sec := func(worker string, token int64, enter, valid int) chaos.Section {
		return chaos.Section{Key: "k", Worker: worker, Token: token, Enter: ms(enter), Exit: ms(enter + 1), Valid: ms(valid)}
	}
	if got := chaos.TokenOrder([]chaos.Section{sec("b", 2, 10, 500), sec("a", 1, 0, 500)}); len(got) != 0 {
		t.Errorf("increasing tokens: %v", got)
	}
	if got := chaos.TokenOrder([]chaos.Section{sec("a", 2, 0, 500), sec("b", 2, 10, 500)}); len(got) != 1 {
		t.Errorf("a repeated token: %v, want one pair", got)
	}
	if got := chaos.TokenOrder([]chaos.Section{sec("a", 3, 0, 500), sec("b", 2, 10, 500)}); len(got) != 1 {
		t.Errorf("a falling token: %v, want one pair", got)
	}
	// A lease that was already invalid when its holder got it is not ordered.
	if got := chaos.TokenOrder([]chaos.Section{sec("a", 3, 600, 500), sec("b", 4, 10, 500)}); len(got) != 0 {
		t.Errorf("late, expired grant: %v", got)
	}
}

func TestLateCallsAndLosses(t *testing.T) {
	calls := []chaos.Call{
		{Op: "acquire", Deadline: ms(100), Return: ms(150)},
		{Op: "acquire", Deadline: ms(100), Return: ms(151)},
		{Op: "acquire", Deadline: ms(100), Return: ms(900), Stopped: true},
	}
	if got := chaos.LateCalls(calls, 50*time.Millisecond); len(got) != 1 || got[0].Return != ms(151) {
		t.Errorf("late calls: %v", got)
	}
	losses := []chaos.Loss{
		{Valid: ms(100), Noticed: ms(90)},
		{Valid: ms(100), Noticed: ms(121)},
		{Valid: ms(100), Noticed: ms(900), Stopped: true},
	}
	if got := chaos.LateLosses(losses, 20*time.Millisecond); len(got) != 1 || got[0].Noticed != ms(121) {
		t.Errorf("late losses: %v", got)
	}
}

// TestUnnoticedLosses: a section that ran past its validity deadline with its lease not
// lost at its exit is an M2 violation, however it was stopped; one whose lease was lost,
// or that left within the slack, is not.
func TestUnnoticedLosses(t *testing.T) {
	sections := []chaos.Section{
		{Key: "k", Worker: "on time", Enter: ms(0), Exit: ms(90), Valid: ms(100)},
		{Key: "k", Worker: "within slack", Enter: ms(0), Exit: ms(120), Valid: ms(100)},
		{Key: "k", Worker: "lost", Enter: ms(0), Exit: ms(900), Valid: ms(100), Lost: true},
		{Key: "k", Worker: "unannounced", Enter: ms(0), Exit: ms(121), Valid: ms(100)},
		{Key: "k", Worker: "stopped", Enter: ms(0), Exit: ms(900), Valid: ms(100), Stopped: true},
	}
	got := chaos.Unnoticed(sections, 20*time.Millisecond)
	if len(got) != 2 || got[0].Worker != "unannounced" || got[1].Worker != "stopped" {
		t.Errorf("unnoticed: %v", got)
	}
	var h chaos.History
	for _, s := range sections {
		h.AddSection(s)
	}
	vs, _ := h.Check(chaos.Slack{Loss: 20 * time.Millisecond})
	if n := chaos.Count(vs)[chaos.M2]; n != 2 {
		t.Errorf("Check found %d M2 violations, want 2: %v", n, vs)
	}
}

// TestExpiredAtEntry: a lease handed out after its validity deadline, beyond the call
// slack, is an I4 violation unless its Acquire ran in a stopped process.
func TestExpiredAtEntry(t *testing.T) {
	sections := []chaos.Section{
		{Key: "k", Worker: "valid", Enter: ms(90), Exit: ms(95), Valid: ms(100)},
		{Key: "k", Worker: "within slack", Enter: ms(150), Exit: ms(160), Valid: ms(100), Lost: true},
		{Key: "k", Worker: "expired", Enter: ms(151), Exit: ms(160), Valid: ms(100), Lost: true},
		{Key: "k", Worker: "stopped", Enter: ms(900), Exit: ms(910), Valid: ms(100), Lost: true},
	}
	calls := []chaos.Call{
		{Op: "acquire", Key: "k", Worker: "expired", Start: ms(0), Deadline: ms(1000), Return: ms(151)},
		{Op: "acquire", Key: "k", Worker: "stopped", Start: ms(0), Deadline: ms(1000), Return: ms(900), Stopped: true},
	}
	got := chaos.ExpiredAtEntry(sections, calls, 50*time.Millisecond)
	if len(got) != 1 || got[0].Worker != "expired" {
		t.Errorf("expired at entry: %v", got)
	}
	var h chaos.History
	for _, s := range sections {
		h.AddSection(s)
	}
	for _, c := range calls {
		h.AddCall(c)
	}
	vs, _ := h.Check(chaos.Slack{Call: 50 * time.Millisecond, Loss: 20 * time.Millisecond})
	if n := chaos.Count(vs)[chaos.I4]; n != 1 {
		t.Errorf("Check found %d I4 violations, want 1: %v", n, vs)
	}
}

func TestFaultTimes(t *testing.T) {
	var h chaos.History
	h.AddFault(chaos.Fault{Kind: "pause", Start: ms(1000), End: ms(2000)})
	h.AddLoss(chaos.Loss{Noticed: ms(900)}) // before the fault: not its detection
	h.AddLoss(chaos.Loss{Noticed: ms(1400)})
	h.AddLoss(chaos.Loss{Noticed: ms(1300)})
	h.AddSection(chaos.Section{Enter: ms(1500)})
	h.AddSection(chaos.Section{Enter: ms(2250)})
	h.AddSection(chaos.Section{Enter: ms(2100)})
	detect, recover := h.FaultTimes(time.Second)
	if len(detect) != 1 || detect[0] != 300*time.Millisecond || len(recover) != 1 || recover[0] != 100*time.Millisecond {
		t.Fatalf("detect %v, recover %v; want [300ms] and [100ms]", detect, recover)
	}
	// A loss long after the fault is not its detection.
	var late chaos.History
	late.AddFault(chaos.Fault{Kind: "pause", Start: ms(1000), End: ms(2000)})
	late.AddLoss(chaos.Loss{Noticed: ms(3500)})
	if detect, _ := late.FaultTimes(time.Second); len(detect) != 0 {
		t.Errorf("a loss 1.5s after the fault's end was taken for its detection: %v", detect)
	}
	if p, ok := chaos.Percentile([]time.Duration{5, 1, 4, 2, 3}, 99); !ok || p != 5 {
		t.Errorf("p99 = %v", p)
	}
	if p, ok := chaos.Percentile([]time.Duration{5, 1, 4, 2, 3}, 50); !ok || p != 3 {
		t.Errorf("p50 = %v", p)
	}
	if _, ok := chaos.Percentile(nil, 99); ok {
		t.Error("percentile of nothing")
	}
}

func TestMarkdown(t *testing.T) {
	md := chaos.Markdown([]chaos.Row{{
		Scenario: "s", Sections: 3, Acquires: 4, Faults: "f",
		Violations: map[chaos.Invariant]int{chaos.I1: 2}, Detect: 1500 * time.Microsecond, Recover: 20 * time.Millisecond, Note: "n",
	}})
	for _, want := range []string{"| s | 3 / 4 | f | 2 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 1.5 ms | 20 ms | – / – |", "- **s**: n"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}

// TestRegisterAudit drives the fenced register by hand and forges log entries that the
// audit must flag.
func TestRegisterAudit(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	r := chaos.NewRegister(c, "r")

	v, ok, err := r.Read(ctx, 10, "a")
	if err != nil || !ok || v != 0 {
		t.Fatalf("first read: %d %v %v", v, ok, err)
	}
	if ok, err := r.Write(ctx, 10, 1, "a"); err != nil || !ok {
		t.Fatalf("write: %v %v", ok, err)
	}
	if _, ok, _ := r.Read(ctx, 11, "b"); !ok {
		t.Fatal("read with a newer token rejected")
	}
	if ok, _ := r.Write(ctx, 10, 2, "a"); ok {
		t.Fatal("a write with a superseded token was applied")
	}
	st, vs, err := r.Audit(ctx, 1)
	if err != nil || len(vs) != 0 || st.Writes != 1 || st.Rejected != 1 || st.Value != 1 {
		t.Fatalf("clean audit: %+v %v %v", st, vs, err)
	}
	if _, vs, _ := r.Audit(ctx, 2); len(vs) != 1 {
		t.Errorf("audit with a wrong acknowledged count: %v, want one violation", vs)
	}
	// A stale write and a lost update, as a broken storage would have applied them.
	c.RPush(ctx, "register:r:log", "w 9 2 forged", "w 12 2 forged")
	_, vs, _ = r.Audit(ctx, 3)
	if len(vs) != 3 {
		t.Errorf("audit of a forged log: %v, want a stale write, a lost update and a count mismatch", vs)
	}
}

// TestMonoAcrossProcesses: a reading taken in another process lies between two taken
// here.
func TestMonoAcrossProcesses(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), clockEnv+"=1")
	before := chaos.Now()
	out, err := cmd.Output()
	after := chaos.Now()
	if err != nil {
		t.Fatalf("clock process: %v", err)
	}
	child, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("clock process printed %q", out)
	}
	if m := chaos.Mono(child); m < before || m > after {
		t.Fatalf("child read %d, outside [%d, %d]", m, before, after)
	}
	if d := chaos.MonoOf(time.Now().Add(time.Second)).Sub(chaos.Now()); d < 990*time.Millisecond || d > time.Second {
		t.Fatalf("MonoOf(now + 1s) − Now() = %s", d)
	}
}
