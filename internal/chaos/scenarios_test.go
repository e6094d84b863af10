package chaos_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/chaos"
	"github.com/guardkit/guardkit/internal/redistest"
)

// scale sizes a run: the smoke subset that `make test` runs, or the full suite of
// `make chaos`. Scenario code is the same for both.
type scale struct {
	smoke   bool
	run     time.Duration // how long each scenario runs its workload
	workers int           // worker goroutines per Locker
	waiters int           // waiters on one key in the waiters scenario
	slack   chaos.Slack
	kind    string // the lock kind of the contended load (see load.Kind); "" exclusive
	// autoPipeline runs the scenario's Lockers on auto-pipelining clients (config.AutoPipeline).
	autoPipeline bool
}

// tune applies the scale's client choices to a scenario's configuration.
func (sc scale) tune(c config) config {
	c.AutoPipeline = c.AutoPipeline || sc.autoPipeline
	return c
}

var (
	// The smoke subset shares two cores with whatever else runs: timing slack is wide,
	// correctness checks (I1, I2, I3, M3, M4) stay exact.
	smokeScale = scale{smoke: true, run: 1500 * time.Millisecond, workers: 2, waiters: 1000,
		slack: chaos.Slack{Call: 500 * time.Millisecond, Loss: 250 * time.Millisecond}}
	// The full suite checks I4 and M2 with the slack the invariants name.
	fullScale = scale{run: 12 * time.Second, workers: 6, waiters: 10000,
		slack: chaos.Slack{Call: 50 * time.Millisecond, Loss: 20 * time.Millisecond}}
)

// scenario is one fault scenario.
type scenario struct {
	name  string
	smoke bool // part of the smoke subset
	// expected lists invariants that the scenario shows can break around its faults:
	// their violations near a fault (chaos.Report.NearFault) are reported in the table
	// but do not fail the test; far from every fault they fail it like any other.
	expected []chaos.Invariant
	run      func(t *testing.T, sc scale) (chaos.Row, []chaos.Report)
}

var scenarios = []scenario{
	{name: "contention baseline", smoke: true, run: baseline},
	{name: "redis paused < TTL", run: pausedShort},
	{name: "redis paused > TTL", smoke: true, run: pausedLong},
	{name: "distinct keys, redis paused > TTL", run: distinctKeys},
	{name: "holder process paused > TTL (fenced)", smoke: true, run: holderPaused},
	{name: "latency above read timeout", smoke: true, run: latency},
	{name: "partition (black hole) > TTL", run: partition},
	{name: "connection resets", run: resets},
	{name: "restart without persistence, held down ≥ TTL", run: restartDelayed},
	{name: "restart without persistence, immediate (fenced)", smoke: true, run: restartImmediate, expected: []chaos.Invariant{chaos.I1}},
	{name: "pub/sub connection killed", smoke: true, run: pubsubKilled},
	{name: "SCRIPT FLUSH (NOSCRIPT)", run: scriptFlush},
	{name: "OOM (maxmemory, noeviction)", smoke: true, run: oom},
	{name: "READONLY replica", smoke: true, run: readonly},
	{name: "waiters on one key, half cancelled", smoke: true, run: waiters},
	{name: "context-cancel storm", smoke: true, run: cancelStorm},
	{name: "no ContextTimeoutEnabled, redis paused", run: noContextTimeout},
	{name: "budget-bound calls: redis paused > MaxWait, < TTL", smoke: true, run: frozenBudget(time.Second)},
	{name: "budget-bound calls: redis paused > TTL", run: frozenBudget(6 * time.Second)},
	{name: "deadlock detection: ordered two-key holds, redis paused, connections reset", run: deadlockFalseAlarms},
	{name: "several keys as one lock: redis paused > TTL", smoke: true, run: setsPaused},
	{name: "several keys as one lock: connection resets, redis paused < TTL", run: setsResets},
	{name: "auto-pipelined: redis paused > TTL", run: withAutoPipeline(pausedLong)},
	{name: "auto-pipelined: latency above read timeout", run: withAutoPipeline(latency)},
	{name: "auto-pipelined: context-cancel storm", smoke: true, run: withAutoPipeline(cancelStorm)},
	{name: "read-write: redis paused > TTL", smoke: true, run: withKind("read-write", pausedLong)},
	{name: "read-write: latency above read timeout", run: withKind("read-write", latency)},
	{name: "read-write: restart without persistence, immediate (fenced)", run: withKind("read-write", restartImmediate), expected: []chaos.Invariant{chaos.I1}},
	{name: "read-write: pub/sub connection killed", run: withKind("read-write", pubsubKilled)},
	{name: "semaphore: redis paused > TTL", smoke: true, run: withKind("semaphore", pausedLong)},
	{name: "semaphore: latency above read timeout", run: withKind("semaphore", latency)},
	{name: "semaphore: restart without persistence, immediate", run: withKind("semaphore", restartImmediate), expected: []chaos.Invariant{chaos.I1}},
	{name: "semaphore: pub/sub connection killed", run: withKind("semaphore", pubsubKilled)},
	{name: "fair: redis paused > TTL", smoke: true, run: withKind("fair", pausedLong)},
	{name: "fair: latency above read timeout", run: withKind("fair", latency)},
	{name: "fair: restart without persistence, immediate (fenced)", run: withKind("fair", restartImmediate), expected: []chaos.Invariant{chaos.I1}},
	{name: "fair: pub/sub connection killed", run: withKind("fair", pubsubKilled)},
	{name: "cluster: primary killed", run: clusterKilled(false), expected: []chaos.Invariant{chaos.I1}},
	{name: "cluster: primary killed, SyncReplicas", smoke: true, run: clusterKilled(true)},
	{name: "cluster: planned failover (CLUSTER FAILOVER)", run: clusterFailover},
	{name: "cluster: replica lag, then primary killed", run: clusterLag(false), expected: []chaos.Invariant{chaos.I1}},
	{name: "cluster: replica lag, then primary killed, SyncReplicas", run: clusterLag(true)},
	{name: "sentinel: primary killed", run: sentinelKilled(false), expected: []chaos.Invariant{chaos.I1}},
	{name: "sentinel: primary killed, SyncReplicas", run: sentinelKilled(true)},
	{name: "sentinel: planned failover (SENTINEL FAILOVER)", run: sentinelFailover(false), expected: []chaos.Invariant{chaos.I1}},
	{name: "sentinel: planned failover (SENTINEL FAILOVER), SyncReplicas", run: sentinelFailover(true)},
	{name: "sentinel: replica lag, then primary killed", run: sentinelLag(false), expected: []chaos.Invariant{chaos.I1}},
	{name: "sentinel: replica lag, then primary killed, SyncReplicas", run: sentinelLag(true)},
	{name: "quorum of 3: a server killed and restarted empty at once", smoke: true, run: quorumRestarted(3, true)},
	// Without the restart check a restarted server forgets holds: another owner can take
	// a lock still held (I1), and the holder's own reentry through Redis can then count
	// as a fresh hold with a new token (I2, M3). Fencing catches what follows (M4 = 0).
	{name: "quorum of 3: a server killed and restarted empty at once, no restart check", run: quorumRestarted(3, false), expected: []chaos.Invariant{chaos.I1, chaos.I2, chaos.M3}},
	{name: "quorum of 5: two servers killed and restarted empty at once", run: quorumRestarted(5, true)},
	{name: "quorum of 3: a server paused > TTL", smoke: true, run: quorumPaused(3, false)},
	{name: "quorum of 5: two servers paused > TTL", run: quorumPaused(5, false)},
	{name: "quorum of 3: a majority paused > TTL", run: quorumPaused(3, true)},
	{name: "quorum of 3: a server paused 2s while two Lockers contend", run: quorumPausedRate},
	{name: "quorum of 3: latency above read timeout on a server", run: quorumLatency(3)},
}

// runScenarios runs the scenarios that pick selects, each as a subtest, and returns
// their rows. A violation fails the subtest unless the scenario expects it.
func runScenarios(t *testing.T, sc scale, pick func(scenario) bool) []chaos.Row {
	var rows []chaos.Row
	for _, s := range scenarios {
		if !pick(s) {
			continue
		}
		t.Run(strings.NewReplacer(" ", "_", "/", "_").Replace(s.name), func(t *testing.T) {
			row, reports := s.run(t, sc)
			row.Scenario = s.name
			rows = append(rows, row)
			judge(t, s, reports)
			t.Logf("%d sections, %d acquires; violations %v; %s", row.Sections, row.Acquires, row.Violations, row.Note)
		})
	}
	return rows
}

// shownReports is how many violations a failed scenario explains in full.
const shownReports = 5

// judge fails t, in one message, with the reports of the violations that scenario s
// does not expect: a count of them by invariant, then the first shownReports in the
// order they happened (the first breach is often the cause of the next).
func judge(t testing.TB, s scenario, reports []chaos.Report) {
	t.Helper()
	var bad []chaos.Report
	counts := map[chaos.Invariant]int{}
	var order []chaos.Invariant
	for _, r := range reports {
		if expectedInv(s, r.Inv) {
			if r.NearFault {
				continue
			}
			r.Detail += " (the scenario expects " + string(r.Inv) + " only near its faults: this one is far from every fault)"
		}
		if counts[r.Inv] == 0 {
			order = append(order, r.Inv)
		}
		counts[r.Inv]++
		bad = append(bad, r)
	}
	if len(bad) == 0 {
		return
	}
	// The table's invariants first, in its order, then the harness's checks.
	rank := func(inv chaos.Invariant) int {
		if i := slices.Index(chaos.Invariants, inv); i >= 0 {
			return i
		}
		return len(chaos.Invariants)
	}
	slices.SortStableFunc(order, func(a, b chaos.Invariant) int { return cmp.Compare(rank(a), rank(b)) })
	slices.SortStableFunc(bad, func(a, b chaos.Report) int { return cmp.Compare(a.From, b.From) })
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %q broke its invariants:", s.name)
	for i, inv := range order {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %d× %s", sep, counts[inv], inv)
	}
	for i, r := range bad[:min(len(bad), shownReports)] {
		fmt.Fprintf(&b, "\n\nviolation %d of %d: %s", i+1, len(bad), r)
	}
	if len(bad) > shownReports {
		fmt.Fprintf(&b, "\n\n… and %d more violations, not shown", len(bad)-shownReports)
	}
	t.Errorf("%s", b.String())
}

// addNote puts note first in row's notes.
func addNote(row *chaos.Row, note string) {
	if row.Note != "" {
		note += "; " + row.Note
	}
	row.Note = note
}

func expectedInv(s scenario, inv chaos.Invariant) bool {
	for _, e := range s.expected {
		if e == inv {
			return true
		}
	}
	return false
}

// contended is the default workload: a few keys, short holds, reentry through a second
// Locker in every section.
func contended(sc scale) load {
	return load{
		Keys: []string{"k0", "k1"}, Workers: sc.workers,
		AcquireMin: time.Second, AcquireMax: time.Second,
		HoldMin: time.Millisecond, HoldMax: 5 * time.Millisecond,
		Nested: true,
		Kind:   sc.kind, Permits: kindPermits,
	}
}

// kindPermits is the semaphore's limit in the rows of the semaphore kind: below the
// number of workers, so that permits are contended.
const kindPermits = 2

// withKind runs a scenario with its contended load taking locks of kind (see load.Kind).
// withAutoPipeline runs a scenario with every Locker on go-redis's auto-pipelining
// client: first attempts and releases wait in its batches, so a caller's context can end
// while its call is queued behind a batch in flight.
func withAutoPipeline(run func(*testing.T, scale) (chaos.Row, []chaos.Report)) func(*testing.T, scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		sc.autoPipeline = true
		return run(t, sc)
	}
}

func withKind(kind string, run func(*testing.T, scale) (chaos.Row, []chaos.Report)) func(*testing.T, scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		sc.kind = kind
		return run(t, sc)
	}
}

// baseline: two worker processes with two Lockers each contend on two keys.
func baseline(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	w := newWorld(t, baseConfig())
	ld := contended(sc)
	w.startProc("p1", 2, ld)
	w.startProc("p2", 2, ld)
	time.Sleep(sc.run)
	return w.finish("", "none (2 processes × 2 Lockers)", sc.slack)
}

// pausedFor stops the lock Redis for d, every gap, while two Lockers contend.
func pausedFor(t *testing.T, sc scale, d time.Duration) (chaos.Row, []chaos.Report) {
	return pausedUnder(t, sc, d, contended(sc), "")
}

// pausedUnder stops the lock Redis for d, every gap, while two Lockers run ld; more is
// added to the row's description of the faults.
func pausedUnder(t *testing.T, sc scale, d time.Duration, ld load, more string) (chaos.Row, []chaos.Report) {
	cfg := sc.tune(baseConfig())
	w := newWorld(t, cfg)
	w.addNode("a", false)
	w.addNode("b", false)
	stop := w.run(ld)
	n := w.faultLoop(sc.run, d+700*time.Millisecond, func(int) { w.pause(d) })
	stop()
	return w.finish("", fmt.Sprintf("%d× SIGSTOP redis %s (TTL %s)%s", n, d, cfg.TTL, more), sc.slack)
}

// pause stops the lock Redis for d, as a fault.
func (w *world) pause(d time.Duration) {
	w.fault("SIGSTOP redis", func() {
		w.lock.Pause(w.tb)
		time.Sleep(d)
		w.lock.Resume(w.tb)
	})
}

// pausesAndResets makes the fault loop's faults, every gap for the run: in turn a pause
// of the lock Redis for pause, and a TCP reset of every connection of nodes a and b. It
// returns the number of faults, of pauses and of resets.
func (w *world) pausesAndResets(run, gap, pause time.Duration, a, b *node) (n, pauses, resets int) {
	n = w.faultLoop(run, gap, func(i int) {
		if i%2 == 0 {
			pauses++
			w.pause(pause)
			return
		}
		resets++
		w.fault("reset", func() {
			a.proxy.ResetConns()
			b.proxy.ResetConns()
		})
	})
	return n, pauses, resets
}

// frozenBudget freezes Redis for d now and then while the workers acquire with a wait
// budget (200 ms) and a context that never ends: every call must return within its
// budget plus the engine's grace (I4, the call's deadline), and once Redis answers again
// no hold may be left that no caller was handed (I5): the attempts that reached the
// frozen server after their callers gave up are refused or undone. The TTL is 3 s here,
// so that such a hold would still be there when the holders are sampled, 1.5 s after
// each freeze; their tokens are checked against every token an Acquire returned once
// the workers have stopped.
func frozenBudget(d time.Duration) func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		cfg := sc.tune(baseConfig())
		cfg.TTL = 3 * time.Second
		w := newWorld(t, cfg)
		w.addNode("a", false)
		w.addNode("b", false)
		ld := contended(sc)
		ld.Budget = 200 * time.Millisecond
		stop := w.run(ld)
		const settle = 1500 * time.Millisecond
		var seen []heldToken
		n := w.faultLoop(sc.run, d+settle+700*time.Millisecond, func(int) {
			w.fault("SIGSTOP redis", func() {
				w.lock.Pause(w.tb)
				time.Sleep(d)
				w.lock.Resume(w.tb)
			})
			time.Sleep(settle)
			seen = append(seen, w.holders(ld.Keys)...)
		})
		stop()
		w.checkNoGhosts(seen, settle)
		return w.finish("", fmt.Sprintf("%d× SIGSTOP redis %s (TTL %s, MaxWait %s, no context deadline)", n, d, cfg.TTL, ld.Budget), sc.slack)
	}
}

// heldToken is a hold Redis reported on a key, when.
type heldToken struct {
	key   string
	owner string
	token int64
	at    chaos.Mono
}

// holders returns the holds Redis reports on keys now.
func (w *world) holders(keys []string) []heldToken {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []heldToken
	for _, k := range keys {
		st, err := w.nodes[0].locker.Inspect(ctx, k)
		if err != nil {
			w.fatalf(setup, k, 0, "inspect after a fault: %v", err)
		}
		for _, h := range st.Holders {
			out = append(out, heldToken{key: k, owner: string(h.Owner), token: h.Token, at: chaos.Now()})
		}
	}
	return out
}

// checkNoGhosts checks I5 on the holds seen settle after a fault, once the workers have
// stopped: each carries a token that an Acquire returned.
func (w *world) checkNoGhosts(seen []heldToken, settle time.Duration) {
	handed := map[int64]bool{}
	for _, s := range w.hist.Sections() {
		handed[s.Token] = true
	}
	for _, c := range w.hist.Calls() {
		if c.Token != 0 {
			handed[c.Token] = true
		}
	}
	for _, h := range seen {
		if !handed[h.token] {
			w.failf(chaos.I5, h.key, h.at.Add(-settle), "%s after Redis answered again, %s held the lock with token %d, which no Acquire returned", settle, h.owner, h.token)
		}
	}
}

func pausedShort(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return pausedFor(t, sc, baseConfig().TTL/2)
}

func pausedLong(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return pausedFor(t, sc, 2*baseConfig().TTL)
}

// distinctKeys gives every section a key of its own (keys made from request ids), with
// nested reentry, while Redis is paused past the TTL now and then; once the Lockers are
// closed and the fence retention has passed, nothing may be left in Redis: memory follows
// what is held, not every key ever locked. The row notes the keys and the memory.
func distinctKeys(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := sc.tune(baseConfig())
	cfg.FenceRetention = time.Second
	w := newWorld(t, cfg)
	w.addNode("a", false)
	w.addNode("b", false)
	ctx := context.Background()
	memory := func() int64 {
		v, _ := w.lock.Client(w.tb).Info(ctx, "memory").Result()
		for _, line := range strings.Split(v, "\r\n") {
			if n, ok := strings.CutPrefix(line, "used_memory:"); ok {
				b, _ := strconv.ParseInt(n, 10, 64)
				return b
			}
		}
		return 0
	}
	before := memory()
	stop := w.run(load{Keys: []string{"d"}, Distinct: true, Workers: sc.workers,
		AcquireMin: 100 * time.Millisecond, AcquireMax: 500 * time.Millisecond,
		HoldMin: 0, HoldMax: 5 * time.Millisecond, Nested: true})
	d := 2 * cfg.TTL
	n := w.faultLoop(sc.run, d+2*time.Second, func(int) {
		w.fault("SIGSTOP redis", func() {
			w.lock.Pause(w.tb)
			time.Sleep(d)
			w.lock.Resume(w.tb)
		})
	})
	stop()
	for _, nd := range w.nodes {
		_ = nd.locker.Close()
	}
	keys := map[string]bool{}
	for _, s := range w.hist.Sections() {
		keys[s.Key] = true
	}
	// Every lock ends within its TTL, its fence record a retention after its release;
	// a wait queue lives 3 TTLs after its last waiter queued.
	time.Sleep(3*cfg.TTL + cfg.FenceRetention + time.Second)
	left, err := w.lock.Client(w.tb).DBSize(ctx).Result()
	if err != nil {
		w.fatalf(setup, "", 0, "DBSIZE at the end: %v", err)
	}
	if left > 0 {
		w.failf(chaos.I3, "", 0, "%d keys left in Redis after %d distinct keys were locked and released, 3 TTLs and the fence retention after the Lockers closed", left, len(keys))
	}
	row, vs := w.finish("", fmt.Sprintf("%d distinct keys, %d× SIGSTOP redis %s (TTL %s, FenceRetention %s)", len(keys), n, d, cfg.TTL, cfg.FenceRetention), sc.slack)
	addNote(&row, fmt.Sprintf("%d distinct keys locked and released: DBSIZE %d and used_memory %+d B a retention after the end", len(keys), left, memory()-before))
	return row, vs
}

// holderPaused stops a worker process with SIGSTOP between the read and the write of its
// critical section, for three TTLs, while a rival process takes the lock. The holder
// writes anyway after it resumes; the fenced register must reject it.
func holderPaused(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	w := newWorld(t, cfg)
	began := chaos.Now()
	holder := w.startProc("holder", 1, load{
		Keys: []string{"fenced"}, Workers: 1, AcquireMin: 2 * time.Second, AcquireMax: 2 * time.Second,
		HoldMin: 5 * time.Millisecond, HoldMax: 5 * time.Millisecond,
		Stubborn: true, PauseMark: true, MarkWait: 300 * time.Millisecond, Unfenced: true,
	})
	w.startProc("rival", 1, load{
		Keys: []string{"fenced"}, Workers: sc.workers, AcquireMin: 2 * time.Second, AcquireMax: 2 * time.Second,
		HoldMin: 2 * time.Millisecond, HoldMax: 10 * time.Millisecond, Unfenced: true,
	})
	end := time.Now().Add(max(sc.run, 4*cfg.TTL))
	pauses := 0
	for time.Now().Before(end) {
		waiting := chaos.Now()
		select {
		case <-holder.marks:
		case <-time.After(3 * time.Second):
			w.fatalf(liveness, "fenced", waiting, "the holder process announced no section to pause in for 3s")
		}
		pauses++
		holder.pause()
		time.Sleep(3 * cfg.TTL)
		holder.resume()
		time.Sleep(200 * time.Millisecond)
	}
	w.stopProcs()
	plain, err := w.sc.Get(context.Background(), "plain:fenced").Int()
	if err != nil {
		w.fatalf(setup, "fenced", 0, "reading the unfenced counter: %v", err)
	}
	row, vs := w.finish("", fmt.Sprintf("%d× SIGSTOP holder process %s inside its section", pauses, 3*cfg.TTL), sc.slack)
	if lost := w.mark("plain") - plain; lost > 0 {
		addNote(&row, fmt.Sprintf("without fencing, %d of %d updates would have been lost", lost, w.mark("plain")))
	}
	if !strings.Contains(row.Note, "rejected by fencing") {
		w.failf(liveness, "fenced", began, "no stale write reached the register: the pauses did not land inside sections, the scenario proved nothing")
	}
	return row, vs
}

// latency puts both Lockers behind proxies and makes replies slower than the clients'
// read timeout: whole periods of latency, single delayed replies and dropped replies.
// Acquires become ambiguous (compensated), scripts are retried by the client, and every
// section reenters through the other Locker with hold counts checked in Redis.
func latency(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := sc.tune(baseConfig())
	cfg.TTL = time.Second
	cfg.ReleaseTimeout = 500 * time.Millisecond
	cfg.ReadTimeout = 100 * time.Millisecond
	w := newWorld(t, cfg)
	a := w.addNode("a", true)
	b := w.addNode("b", true)
	ld := contended(sc)
	ld.AcquireMin, ld.AcquireMax = 300*time.Millisecond, time.Second
	stop := w.run(ld)
	var kinds [3]int
	w.faultLoop(sc.run, 400*time.Millisecond, func(i int) {
		switch i % 3 {
		case 0:
			kinds[0]++
			w.fault("latency", func() {
				a.proxy.SetLatency(150 * time.Millisecond)
				b.proxy.SetLatency(150 * time.Millisecond)
				time.Sleep(300 * time.Millisecond)
				a.proxy.SetLatency(0)
				b.proxy.SetLatency(0)
			})
		case 1:
			kinds[1]++
			w.fault("delayed reply", func() {
				a.proxy.DelayNextReply(300 * time.Millisecond)
				b.proxy.DelayNextReply(300 * time.Millisecond)
			})
		case 2:
			kinds[2]++
			w.fault("dropped reply", func() {
				a.proxy.DropNextReply()
				b.proxy.DropNextReply()
			})
		}
	})
	stop()
	return w.finish("", fmt.Sprintf("%d× 150 ms latency for 300 ms, %d× reply delayed 300 ms, %d× reply dropped (read timeout 100 ms)",
		kinds[0], kinds[1], kinds[2]), sc.slack)
}

// partition black-holes one Locker's connections for twice the TTL: its leases run out
// on the validity clock while the other Locker takes over, and its queued commands reach
// Redis when the partition heals.
func partition(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	w := newWorld(t, cfg)
	a := w.addNode("a", true)
	w.addNode("b", false)
	stop := w.run(contended(sc))
	n := w.faultLoop(sc.run, 700*time.Millisecond, func(int) {
		w.fault("black hole", func() {
			a.proxy.Blackhole(true)
			time.Sleep(2 * cfg.TTL)
			a.proxy.Blackhole(false)
		})
	})
	stop()
	return w.finish("", fmt.Sprintf("%d× black hole on one Locker for %s", n, 2*cfg.TTL), sc.slack)
}

// resets resets every connection of both Lockers, pub/sub included, every 300ms.
func resets(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	w := newWorld(t, baseConfig())
	a := w.addNode("a", true)
	b := w.addNode("b", true)
	stop := w.run(contended(sc))
	n := w.faultLoop(sc.run, 300*time.Millisecond, func(int) {
		w.fault("reset", func() {
			a.proxy.ResetConns()
			b.proxy.ResetConns()
		})
	})
	stop()
	return w.finish("", fmt.Sprintf("%d× TCP reset of every connection", n), sc.slack)
}

// setLoad is the load of the several-keys rows: every section takes three of four keys,
// listed in a random order, as one lock (load.Set), so that each worker's sets overlap
// every other's on two keys at least, in every listing order.
func setLoad(sc scale) load {
	return load{Keys: []string{"s0", "s1", "s2", "s3"}, Set: 3, Workers: sc.workers,
		AcquireMin: time.Second, AcquireMax: time.Second,
		HoldMin: time.Millisecond, HoldMax: 5 * time.Millisecond}
}

// setsPaused stops the lock Redis past the TTL now and then while two Lockers take sets
// of keys as one lock: each key excludes as a key of its own would, its token fences its
// register, a set lost is lost on every key, and no set fails with ErrDeadlock.
func setsPaused(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return pausedUnder(t, sc, 2*baseConfig().TTL, setLoad(sc), "; sets of 3 of 4 keys in any order")
}

// setsResets resets every connection and pauses Redis for half a TTL, in turn, while two
// Lockers take sets of keys as one lock: the set's one script call, its waits for a
// later key and its one release call meet lost replies and frozen servers.
func setsResets(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := sc.tune(baseConfig())
	w := newWorld(t, cfg)
	a := w.addNode("a", true)
	b := w.addNode("b", true)
	stop := w.run(setLoad(sc))
	pause := cfg.TTL / 2
	n, pauses, resets := w.pausesAndResets(sc.run, 500*time.Millisecond, pause, a, b)
	stop()
	return w.finish("", fmt.Sprintf("%d faults: %d× SIGSTOP redis %s, %d× TCP reset of every connection; sets of 3 of 4 keys in any order",
		n, pauses, pause, resets), sc.slack)
}

// deadlockFalseAlarms: every section holds two keys of eight, taken in key order, so
// that waiters wait while holding (chains of waits, never a cycle), with deadlock
// detection after 100ms, so that the waiters walk the wait-for graph all the time, while
// Redis is paused for half a TTL and every connection is reset, in turn. No acquisition
// may fail with ErrDeadlock (noFalseDeadlock).
func deadlockFalseAlarms(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := sc.tune(baseConfig())
	cfg.DeadlockDelay = 100 * time.Millisecond
	w := newWorld(t, cfg)
	a := w.addNode("a", true)
	b := w.addNode("b", true)
	keys := []string{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"}
	stop := w.run(load{Keys: keys, Workers: 2 * sc.workers, Ordered: true,
		AcquireMin: 2 * time.Second, AcquireMax: 3 * time.Second,
		HoldMin: time.Millisecond, HoldMax: 20 * time.Millisecond})
	pause := cfg.TTL / 2
	n, pauses, resets := w.pausesAndResets(sc.run, 700*time.Millisecond, pause, a, b)
	stop()
	// The inner acquisitions are the ones recorded (the outer ones are not sections of
	// the history): those that waited past the delay were watched.
	watched := 0
	for _, c := range w.hist.Calls() {
		if c.Op == "acquire" && c.Return.Sub(c.Start) > cfg.DeadlockDelay {
			watched++
		}
	}
	row, vs := w.finish("", fmt.Sprintf("%d faults: %d× SIGSTOP redis %s, %d× TCP reset of every connection; 8 keys, two-key holds in order, detection after %s",
		n, pauses, pause, resets, cfg.DeadlockDelay), sc.slack)
	if watched == 0 {
		w.failf(liveness, "", 0, "no nested acquisition waited past the detection delay (%s): detection had nothing to look at", cfg.DeadlockDelay)
	}
	addNote(&row, fmt.Sprintf("%d nested acquisitions waited past the detection delay, walking the wait-for graph; none failed with ErrDeadlock", watched))
	return row, vs
}

// restartDelayed kills the lock Redis and starts it empty only after a TTL, the
// operational rule for Redis without persistence.
func restartDelayed(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	w := newWorld(t, cfg)
	w.addNode("a", false)
	w.addNode("b", false)
	stop := w.run(contended(sc))
	down := cfg.TTL + 100*time.Millisecond
	n := w.faultLoop(sc.run, 700*time.Millisecond, func(int) {
		w.fault("kill -9 + delayed restart", func() {
			w.forget(func() { w.lock.Kill(w.tb) })
			time.Sleep(down)
			w.lock.Restart(w.tb)
		})
	})
	stop()
	return w.finish("", fmt.Sprintf("%d× kill -9, restart empty after %s", n, down), sc.slack)
}

// restartImmediate kills the lock Redis and starts it empty at once: a lock granted
// before can be granted again while its holder still believes it valid. Only fencing
// keeps the data right; the I1 count shows how often the lock alone failed.
func restartImmediate(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	w := newWorld(t, cfg)
	w.addNode("a", false)
	w.addNode("b", false)
	stop := w.run(contended(sc))
	n := w.faultLoop(sc.run, 700*time.Millisecond, func(int) {
		w.fault("kill -9 + restart", func() {
			w.forget(func() { w.lock.Restart(w.tb) })
		})
	})
	stop()
	row, vs := w.finish("", fmt.Sprintf("%d× kill -9 and immediate empty restart", n), sc.slack)
	if i1 := row.Violations[chaos.I1]; i1 > 0 {
		addNote(&row, fmt.Sprintf("I1 breaks by design (%d overlaps): the empty Redis grants locks still held; the fenced register rejected the stale writes (M4 = %d)",
			i1, row.Violations[chaos.M4]))
	}
	return row, vs
}

// pubsubKilled kills the Lockers' Pub/Sub connections over and over while waiters rely
// on release notifications (their backoff is 2s).
func pubsubKilled(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	cfg.RetryDelay, cfg.RetryJitter = 2*time.Second, 0
	w := newWorld(t, cfg)
	w.addNode("a", false)
	w.addNode("b", false)
	ld := contended(sc)
	ld.AcquireMin, ld.AcquireMax = 3*time.Second, 3*time.Second
	ld.Nested = false // the liveness checked here is the release notifications'
	stop := w.run(ld)
	ctx := context.Background()
	killed := 0
	n := w.faultLoop(sc.run-time.Second, 250*time.Millisecond, func(int) {
		w.fault("CLIENT KILL TYPE pubsub", func() {
			k, _ := w.probe.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
			killed += int(k)
		})
	})
	time.Sleep(time.Second)
	stop()
	if _, recovered := w.hist.FaultTimes(0); len(recovered) < n {
		faults := w.hist.Faults()
		w.failf(liveness, "", faults[len(recovered)].End, "%d of %d pub/sub kills were followed by no acquisition, from this one on", n-len(recovered), n)
	}
	return w.finish("", fmt.Sprintf("%d× CLIENT KILL TYPE pubsub (%d connections)", n, killed), sc.slack)
}

// scriptFlush empties Redis's script cache over and over: every script call may meet
// NOSCRIPT and must fall back to sending the script.
func scriptFlush(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	w := newWorld(t, baseConfig())
	w.addNode("a", false)
	w.addNode("b", false)
	stop := w.run(contended(sc))
	n := w.faultLoop(sc.run, 100*time.Millisecond, func(int) {
		w.fault("SCRIPT FLUSH", func() { _ = w.probe.ScriptFlush(context.Background()).Err() })
	})
	stop()
	// The workers ran in this process: every call and loss is in the history now.
	for _, c := range w.hist.Calls() {
		if strings.Contains(c.Err, "NOSCRIPT") {
			w.hist.AddViolation(chaos.Violation{Inv: typedErrors, Key: c.Key, Tokens: nonzero(c.Token), From: c.Start, To: c.Return,
				Detail: fmt.Sprintf("%s by %s failed with NOSCRIPT instead of falling back to sending the script: %s", c.Op, c.Worker, c.Err)})
		}
	}
	for _, l := range w.hist.Losses() {
		if strings.Contains(l.Reason, "NOSCRIPT") {
			w.hist.AddViolation(chaos.Violation{Inv: typedErrors, Key: l.Key, Tokens: nonzero(l.Token), From: l.Noticed, To: l.Noticed,
				Detail: fmt.Sprintf("lease of %s lost to NOSCRIPT instead of falling back to sending the script: %s", l.Worker, l.Reason)})
		}
	}
	return w.finish("", fmt.Sprintf("%d× SCRIPT FLUSH", n), sc.slack)
}

// oom fills the lock Redis up to its maxmemory (noeviction) while Lockers contend, then
// frees it. Acquires must fail with a typed error and leave nothing behind; held leases
// cannot be renewed and are lost on the validity clock.
func oom(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	w := newWorld(t, cfg, "--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
	a := w.addNode("a", false)
	w.addNode("b", false)
	stop := w.run(contended(sc))
	ctx := context.Background()
	// Small values, so that no large request buffer makes Redis look full only while
	// it is being read.
	filler := strings.Repeat("x", 16<<10)
	checked, fill := 0, 0
	n := w.faultLoop(sc.run, 600*time.Millisecond, func(i int) {
		w.fault("OOM", func() {
			filling := chaos.Now()
			for start := fill; ; {
				pipe := w.probe.Pipeline()
				for range 32 {
					pipe.Set(ctx, fmt.Sprintf("filler:%d", fill), filler, 0)
					fill++
				}
				// Near the limit, a batch's request buffer (32 values) can push Redis over
				// it while the batch is read, and the batch is refused, while a tiny probe
				// that follows finds the memory below it again: the batch's OOM says Redis
				// is at its limit just as well (maxmemory is set below used_memory next).
				_, perr := pipe.Exec(ctx)
				err := w.probe.Set(ctx, "filler:probe", "x", 0).Err()
				if err != nil && strings.HasPrefix(err.Error(), "OOM") || perr != nil && strings.HasPrefix(perr.Error(), "OOM") {
					break
				}
				if err != nil || fill-start > 10000 {
					// Say what the server thought of its memory, to tell a limit not in force
					// from one never reached.
					mm, _ := w.probe.ConfigGet(ctx, "maxmemory").Result()
					w.fatalf(setup, "", filling, "filling Redis up to maxmemory: %v after %d values (used_memory %d, maxmemory %v, fillers %d)",
						err, fill-start, w.lock.Stat(w.tb, "used_memory"), mm, w.probe.DBSize(ctx).Val())
				}
			}
			// Full by a margin, so that a lock deleted meanwhile does not make room.
			used := w.lock.Stat(w.tb, "used_memory")
			if err := w.probe.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-(256<<10), 10)).Err(); err != nil {
				w.fatalf(setup, "", 0, "CONFIG SET maxmemory: %v", err)
			}
			// While Redis is full, a fresh acquire fails with a typed error and writes nothing.
			key := fmt.Sprintf("oom-probe-%d", i)
			trying := chaos.Now()
			_, err := a.locker.TryAcquire(ctx, key)
			var re *guard.RedisError
			if !errors.Is(err, guard.ErrUnavailable) || !errors.As(err, &re) || re.Op != "acquire" || !strings.Contains(err.Error(), "OOM") {
				w.failf(typedErrors, key, trying, "acquire on a full Redis = %v, want a *RedisError (ErrUnavailable) carrying OOM", err)
			}
			if n, _ := w.probe.Exists(ctx, lockName(key)).Result(); n != 0 {
				w.failf(noPartialState, key, trying, "acquire on a full Redis left %d keys behind", n)
			}
			checked++
			time.Sleep(2 * cfg.TTL)
			keys, _ := w.probe.Keys(ctx, "filler:*").Result()
			_ = w.probe.Del(ctx, keys...).Err()
			if err := w.probe.ConfigSet(ctx, "maxmemory", "8mb").Err(); err != nil {
				w.fatalf(setup, "", 0, "CONFIG SET maxmemory: %v", err)
			}
		})
	})
	stop()
	row, vs := w.finish("", fmt.Sprintf("%d× Redis filled past maxmemory for %s", n, 2*cfg.TTL), sc.slack)
	addNote(&row, fmt.Sprintf("%d acquires on a full Redis: typed ErrUnavailable (OOM), no keys written", checked))
	return row, vs
}

// readonly points one Locker at a replica while two others use the master.
func readonly(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	w := newWorld(t, baseConfig())
	replica := redistest.Start(w.tb, redistest.Args("--replicaof", "127.0.0.1", strings.TrimPrefix(w.lock.Addr(), "127.0.0.1:")))
	rc := replica.Client(w.tb)
	ctx := context.Background()
	connecting := chaos.Now()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			w.fatalf(setup, "", connecting, "replica did not connect to its master in 10s:\n%s", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = rc.Close()
	w.addNode("a", false)
	w.addNode("b", false)
	r := &node{name: "replica"}
	r.client = replica.Client(w.tb, w.cfg.clientOpts)
	l, err := guard.New(r.client, w.cfg.lockerOpts()...)
	if err != nil {
		w.fatalf(setup, "", 0, "guard.New: %v", err)
	}
	r.locker = l
	w.nodes = append(w.nodes, r)

	ld := contended(sc)
	ld.Nested = false // a reentry through the replica would fail by design
	stop := w.run(ld)
	// Through the replica, a free lock cannot be taken (READONLY); a lock the master's
	// Lockers hold may be reported busy, since that takes no write. Nothing succeeds.
	readOnly, busy := 0, 0
	for i, end := 0, time.Now().Add(sc.run); time.Now().Before(end); i++ {
		key := "replica-only"
		if i%2 == 1 {
			key = ld.Keys[i/2%len(ld.Keys)]
		}
		trying := chaos.Now()
		_, err := r.locker.TryAcquire(ctx, key)
		var re *guard.RedisError
		switch {
		case errors.Is(err, guard.ErrUnavailable) && errors.As(err, &re) && strings.Contains(err.Error(), "READONLY"):
			readOnly++
		case errors.Is(err, guard.ErrLocked) && key != "replica-only":
			busy++
		default:
			w.fatalf(typedErrors, key, trying, "acquire of %q through a replica = %v, want a *RedisError (ErrUnavailable) carrying READONLY, or ErrLocked", key, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if n, _ := w.probe.Exists(ctx, lockName("replica-only")).Result(); n != 0 {
		w.failf(noPartialState, "replica-only", 0, "acquires through the replica left %d keys on the master", n)
	}
	row, vs := w.finish("", "1 of 3 Lockers pointed at a replica", sc.slack)
	addNote(&row, fmt.Sprintf("through the replica: %d acquires failed with typed ErrUnavailable (READONLY), %d found the lock busy, none succeeded, no keys written", readOnly, busy))
	return row, vs
}

// noContextTimeout runs the Lockers on clients built without ContextTimeoutEnabled,
// which hold a call on a stalled Redis until their read timeout (here 1s) whatever its
// context says. The engine must still return at the caller's deadline (I4), leaving the
// call to finish aside.
func noContextTimeout(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	cfg.NoCtxTimeout = true
	cfg.ReadTimeout = time.Second
	w := newWorld(t, cfg)
	w.addNode("a", false)
	w.addNode("b", false)
	ld := contended(sc)
	ld.AcquireMin, ld.AcquireMax = 200*time.Millisecond, 200*time.Millisecond
	stop := w.run(ld)
	pause := 1500 * time.Millisecond
	n := w.faultLoop(min(sc.run, 6*time.Second), pause+time.Second, func(int) {
		w.fault("SIGSTOP redis", func() {
			w.lock.Pause(w.tb)
			time.Sleep(pause)
			w.lock.Resume(w.tb)
		})
	})
	stop()
	worst := map[string]time.Duration{}
	timedOut := map[string]int{}
	for _, c := range w.hist.Calls() {
		if c.Return >= c.Deadline {
			timedOut[c.Op]++
			worst[c.Op] = max(worst[c.Op], c.Return.Sub(c.Deadline))
		}
	}
	row, vs := w.finish("", fmt.Sprintf("%d× SIGSTOP redis %s; acquire deadline 200 ms, release timeout 300 ms, client read timeout 1 s", n, pause), sc.slack)
	addNote(&row, fmt.Sprintf("on clients that ignore deadlines, %d acquires reached their deadline and returned at most %s after it; %d releases reached the release timeout and returned at most %s after it",
		timedOut["acquire"], worst["acquire"].Round(100*time.Microsecond), timedOut["release"], worst["release"].Round(time.Millisecond)))
	return row, vs
}
