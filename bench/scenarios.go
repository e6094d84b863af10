package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// env is what every scenario run shares: the server, a client for INFO, durations.
type env struct {
	addr string
	info *redis.Client
	dur  durations
	ttl  time.Duration // lease time of the uncontended, contended and reentrant runs
	seq  atomic.Int64  // makes every run's keys new

	// A deployment with replicas (cluster.go) sets these instead of info: cluster holds
	// the seed addresses of a Redis Cluster (addr is then empty), place puts keys on its
	// primaries, and the server counters are summed over primaries, with the replicas'
	// share read apart.
	cluster []string
	place   *placement
	// quorum holds the addresses of the quorum scenarios' independent servers
	// (quorum.go); addr is then the first of them, for the single-server variants.
	quorum    []string
	primaries []*redis.Client
	replicas  []*redis.Client
}

// durations are the time budgets of one run of each scenario cell.
type durations struct {
	warm        time.Duration // unmeasured warm-up before each cell
	uncontended time.Duration
	contended   time.Duration
	reentrant   time.Duration
	manyWindow  time.Duration
	manyTTL     time.Duration
}

// measurement is one run of one variant in one cell, or the medians of several.
type measurement struct {
	Scenario string
	Cell     string
	Variant  string
	Rep      int // repetition, or the number of repetitions of a median
	Metrics  map[string]float64
	Commands map[string]int64 // server commands by name, for runs
	Usec     map[string]int64 // server time by command, µs, for runs
	Err      string
}

func (e *env) key(kind string) string { return fmt.Sprintf("bench:%s:%d", kind, e.seq.Add(1)) }

func (e *env) snap() serverStats {
	servers := e.primaries
	if servers == nil {
		servers = []*redis.Client{e.info}
	}
	return mustSnapshot(servers)
}

func mustSnapshot(servers []*redis.Client) serverStats {
	s, err := snapshotAll(context.Background(), servers)
	if err != nil {
		panic(fmt.Sprintf("bench: INFO: %v", err))
	}
	return s
}

func memStats() runtime.MemStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// counts is the before/after of every counter a run reads.
type counts struct {
	srv serverStats
	rep serverStats // the replicas', when the env has some
	rts rtStats
	rt  int64
	mem runtime.MemStats
	cpu time.Duration
	at  time.Time
}

func (e *env) counts(libs []Lib, mem bool) counts {
	c := counts{rt: roundTrips(libs), cpu: cpuTime(), rts: readRuntime()}
	if mem {
		c.mem = memStats()
	}
	c.srv = e.snap()
	if e.replicas != nil {
		c.rep = mustSnapshot(e.replicas)
	}
	c.at = time.Now()
	return c
}

func roundTrips(libs []Lib) int64 {
	var n int64
	for _, l := range libs {
		r := l.RoundTrips()
		if r < 0 {
			return -1
		}
		n += r
	}
	return n
}

// perOp fills the counters of a run divided by ops.
func perOp(m map[string]float64, a, b counts, ops int64, suffix string) serverDelta {
	d := a.srv.to(b.srv)
	if ops == 0 {
		return d
	}
	n := float64(ops)
	if a.rt >= 0 && b.rt >= 0 {
		m["rt_"+suffix+"_hook"] = float64(b.rt-a.rt) / n
	}
	m["reads_"+suffix] = float64(d.reads) / n
	m["cmds_"+suffix] = float64(d.cmds) / n
	m["scripts_"+suffix] = float64(d.scripts) / n
	replicaPerOp(m, a, b, ops, suffix)
	return d
}

func closeAll(libs []Lib) {
	for _, l := range libs {
		_ = l.Close()
	}
}

func newLibs(v variant, cfg libConfig, n int) ([]Lib, error) {
	libs := make([]Lib, 0, n)
	for range n {
		l, err := v.new(cfg)
		if err != nil {
			closeAll(libs)
			return nil, err
		}
		libs = append(libs, l)
	}
	return libs, nil
}

// --- 1. uncontended ---

// uncontended runs g goroutines, each on its own key, doing try-acquire → release.
func (e *env) uncontended(v variant, g int) (map[string]float64, serverDelta, error) {
	libs, err := newLibs(v, libConfig{addr: e.addr, cluster: e.cluster, quorum: e.quorum, ttl: e.ttl}, 1)
	if err != nil {
		return nil, serverDelta{}, err
	}
	defer closeAll(libs)
	lib := libs[0]
	keys := make([]string, g)
	for i := range keys {
		keys[i] = e.keyFor("u", i)
	}
	hists := make([]hist, g)
	run := func(d time.Duration, record bool) (int64, int64) {
		var stop atomic.Bool
		var ops, fails atomic.Int64
		var wg sync.WaitGroup
		for i := range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				h := &hists[i]
				var n, f int64
				for !stop.Load() {
					t0 := time.Now()
					le, err := lib.TryLock(ctx, keys[i])
					if err != nil {
						f++
						continue
					}
					if le.Unlock(ctx) != nil {
						f++
					}
					if record {
						h.add(time.Since(t0))
					}
					n++
				}
				ops.Add(n)
				fails.Add(f)
			}()
		}
		time.Sleep(d)
		stop.Store(true)
		wg.Wait()
		return ops.Load(), fails.Load()
	}
	run(e.dur.warm, false)
	runtime.GC()
	a := e.counts(libs, true)
	ops, fails := run(e.dur.uncontended, true)
	b := e.counts(libs, true)
	el := b.at.Sub(a.at).Seconds()
	var all hist
	for i := range hists {
		all.merge(&hists[i])
	}
	m := map[string]float64{
		"pairs_per_s":   float64(ops) / el,
		"p50_us":        us(all.quantile(0.50)),
		"p99_us":        us(all.quantile(0.99)),
		"errors":        float64(fails),
		"allocs_per_op": float64(b.mem.Mallocs-a.mem.Mallocs) / float64(max(ops, 1)),
		"bytes_per_op":  float64(b.mem.TotalAlloc-a.mem.TotalAlloc) / float64(max(ops, 1)),
		// CPU per pair, client process and server: where the time of a pair goes.
		"client_cpu_us_per_pair": us(b.cpu-a.cpu) / float64(max(ops, 1)),
	}
	d := perOp(m, a, b, ops, "per_pair")
	addRuntime(m, a.rts, b.rts, ops)
	m["server_cpu_us_per_pair"] = us(d.cpu) / float64(max(ops, 1))
	// Time Redis spent executing scripts (their commands included) and SET, per pair.
	// For a library that runs everything in scripts, the other commands' time is the part
	// of the scripts' time spent in the Redis commands they call.
	var scriptUsec, otherUsec int64
	for k, v := range d.usecBy {
		if strings.HasPrefix(k, "eval") || strings.HasPrefix(k, "fcall") {
			scriptUsec += v
		} else {
			otherUsec += v
		}
	}
	m["script_us_per_pair"] = float64(scriptUsec) / float64(max(ops, 1))
	for k, v := range d.byCmd {
		m["cmd:"+k] = float64(v) / float64(max(ops, 1))
	}
	m["nonscript_us_per_pair"] = float64(otherUsec) / float64(max(ops, 1))
	m["set_us_per_pair"] = float64(d.usecBy["set"]) / float64(max(ops, 1))
	// The lock's own time in Redis: its scripts (inner commands included) and SET NX.
	m["redis_us_per_pair"] = m["script_us_per_pair"] + m["set_us_per_pair"]
	return m, d, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// --- 2. contended ---

// event is one acquisition of the contended key, in nanoseconds from the run's start.
type event struct {
	worker     int32
	start, acq int64 // Lock called, Lock returned
	rel        int64 // Unlock returned
}

var events = make([]event, 1<<18)

// contended runs w workers on one key: blocking acquire → hold → release.
func (e *env) contended(v variant, w int, hold time.Duration) (map[string]float64, serverDelta, error) {
	n := 1
	if v.perWorker {
		n = w
	}
	libs, err := newLibs(v, libConfig{addr: e.addr, cluster: e.cluster, quorum: e.quorum, ttl: e.ttl}, n)
	if err != nil {
		return nil, serverDelta{}, err
	}
	defer closeAll(libs)
	key := e.keyFor("c", 0)
	type result struct {
		acqs, violations, gaveUp, errs int64
		perWorker                      []int64
		elapsed                        time.Duration
	}
	run := func(d time.Duration, record bool) result {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			seq, violations, gaveUp, errs atomic.Int64
			holders                       atomic.Int32
			wg                            sync.WaitGroup
		)
		per := make([]int64, w)
		t0 := time.Now()
		for i := range w {
			lib := libs[i%len(libs)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					start := time.Since(t0)
					le, err := lib.Lock(ctx, key)
					if err != nil {
						switch {
						case ctx.Err() != nil:
						case errors.Is(err, errGaveUp):
							gaveUp.Add(1)
						default:
							errs.Add(1)
							_ = sleepCtx(ctx, time.Millisecond)
						}
						continue
					}
					acq := time.Since(t0)
					if holders.Add(1) != 1 {
						violations.Add(1)
					}
					s := seq.Add(1) - 1
					if hold > 0 {
						time.Sleep(hold)
					}
					holders.Add(-1)
					uerr := le.Unlock(context.Background())
					rel := time.Since(t0)
					if uerr != nil && ctx.Err() == nil {
						errs.Add(1)
					}
					per[i]++
					if record && s < int64(len(events)) {
						events[s] = event{worker: int32(i), start: int64(start), acq: int64(acq), rel: int64(rel)}
					}
				}
			}()
		}
		time.Sleep(d)
		r := result{acqs: seq.Load(), elapsed: time.Since(t0)}
		cancel()
		wg.Wait()
		r.violations, r.gaveUp, r.errs, r.perWorker = violations.Load(), gaveUp.Load(), errs.Load(), per
		return r
	}
	run(e.dur.warm, false)
	a := e.counts(libs, false)
	r := run(e.dur.contended, true)
	b := e.counts(libs, false)
	total := r.acqs // acquisitions before the stop; seq may have moved on by a few since
	m := map[string]float64{
		"acq_per_s":  float64(r.acqs) / r.elapsed.Seconds(),
		"violations": float64(r.violations),
		"gave_up":    float64(r.gaveUp),
		"errors":     float64(r.errs),
	}
	var sum int64
	for _, c := range r.perWorker {
		sum += c
	}
	d := perOp(m, a, b, sum, "per_acq") // every acquisition's whole cost, including those after the stop
	addRuntime(m, a.rts, b.rts, sum)
	if sum > 0 {
		// guardkit's acquire script calls PTTL only when the lock is busy: one per failed
		// attempt. PUBLISH is its release notification.
		for k, v := range d.byCmd {
			m["cmd:"+k] = float64(v) / float64(sum)
		}
		m["pttl_per_acq"] = float64(d.byCmd["pttl"]) / float64(sum)
		m["publish_per_acq"] = float64(d.byCmd["publish"]) / float64(sum)
	}
	recorded := min(total, int64(len(events)))
	if recorded >= 2 {
		gaps := make([]int64, 0, recorded-1)
		other := make([]int64, 0, recorded-1) // handoffs to another worker
		waits := make([]int64, 0, recorded)
		var gapSum, otherSum int64
		for s := range recorded {
			ev := events[s]
			waits = append(waits, ev.acq-ev.start)
			if s+1 < recorded {
				next := events[s+1]
				g := next.acq - ev.rel
				gaps = append(gaps, g)
				gapSum += g
				if next.worker != ev.worker {
					other = append(other, g)
					otherSum += g
				}
			}
		}
		self := len(gaps) - len(other)
		m["gap_mean_us"] = float64(gapSum) / float64(len(gaps)) / 1e3
		m["gap_p50_us"] = float64(quantileOf(gaps, 0.50)) / 1e3
		m["gap_p99_us"] = float64(quantileOf(gaps, 0.99)) / 1e3
		if len(other) > 0 {
			m["gap_other_mean_us"] = float64(otherSum) / float64(len(other)) / 1e3
			m["gap_other_p99_us"] = float64(quantileOf(other, 0.99)) / 1e3
		}
		m["wait_p99_ms"] = float64(quantileOf(waits, 0.99)) / 1e6
		m["self_handoff_pct"] = 100 * float64(self) / float64(len(gaps))
	}
	lo, hi, starved := r.perWorker[0], r.perWorker[0], 0
	for _, c := range r.perWorker {
		lo, hi = min(lo, c), max(hi, c)
		if c == 0 {
			starved++
		}
	}
	m["jain"] = jain(r.perWorker)
	m["starved"] = float64(starved)
	if lo > 0 {
		m["max_min"] = float64(hi) / float64(lo)
	} else {
		m["max_min"] = math.Inf(1)
	}
	return m, d, nil
}

// --- 3. reentrant ---

// reentrant holds a lock and measures nested acquire → release at each level below it.
func (e *env) reentrant(v variant, levels int) ([]map[string]float64, error) {
	libs, err := newLibs(v, libConfig{addr: e.addr, ttl: e.ttl}, 1)
	if err != nil {
		return nil, err
	}
	defer closeAll(libs)
	re, ok := libs[0].(Reenterer)
	if !ok {
		return nil, fmt.Errorf("%s: not reentrant", v.name)
	}
	ctx := context.Background()
	key := e.key("r")
	outer, err := libs[0].TryLock(ctx, key)
	if err != nil {
		return nil, err
	}
	chain := []Lease{outer}
	defer func() {
		for i := len(chain) - 1; i >= 0; i-- {
			_ = chain[i].Unlock(ctx)
		}
	}()
	var out []map[string]float64
	for level := 1; level <= levels; level++ {
		in := chain[len(chain)-1]
		for range 1000 { // warm-up
			le, err := re.Reenter(in, key)
			if err != nil {
				return nil, err
			}
			_ = le.Unlock(ctx)
		}
		runtime.GC()
		a := e.counts(libs, true)
		var ops int64
		deadline := time.Now().Add(e.dur.reentrant)
		for time.Now().Before(deadline) {
			for range 100 {
				le, err := re.Reenter(in, key)
				if err != nil {
					return nil, err
				}
				if err := le.Unlock(ctx); err != nil {
					return nil, err
				}
			}
			ops += 100
		}
		b := e.counts(libs, true)
		el := b.at.Sub(a.at)
		m := map[string]float64{
			"level":         float64(level),
			"ops_per_s":     float64(ops) / el.Seconds(),
			"ns_per_op":     float64(el.Nanoseconds()) / float64(ops),
			"allocs_per_op": float64(b.mem.Mallocs-a.mem.Mallocs) / float64(ops),
			"bytes_per_op":  float64(b.mem.TotalAlloc-a.mem.TotalAlloc) / float64(ops),
		}
		perOp(m, a, b, ops, "per_op")
		out = append(out, m)
		next, err := re.Reenter(in, key)
		if err != nil {
			return nil, err
		}
		chain = append(chain, next)
	}
	return out, nil
}

// --- 4. many leases ---

// many holds n leases on distinct keys with a short TTL and measures what keeping them
// alive costs.
func (e *env) many(v variant, n int) (map[string]float64, serverDelta, error) {
	ttl := e.dur.manyTTL
	libs, err := newLibs(v, libConfig{addr: e.addr, ttl: ttl, renew: true}, 1)
	if err != nil {
		return nil, serverDelta{}, err
	}
	defer closeAll(libs)
	lib := libs[0]
	ctx := context.Background()
	prefix := e.key("m")
	runtime.GC()
	mem0, g0 := memStats(), runtime.NumGoroutine()
	leases := make([]Lease, n)
	var setupErrs atomic.Int64
	t0 := time.Now()
	err = pool(n, 64, func(i int) error {
		key := fmt.Sprintf("%s:%d", prefix, i)
		var err error
		for range 5 { // a library's own short timeouts can fail an attempt under load
			if leases[i], err = lib.TryLock(ctx, key); err == nil {
				return nil
			}
			setupErrs.Add(1)
		}
		return err
	})
	setup := time.Since(t0)
	defer func() {
		_ = pool(n, 64, func(i int) error {
			if leases[i] != nil {
				_ = leases[i].Unlock(ctx)
			}
			return nil
		})
	}()
	if err != nil {
		return nil, serverDelta{}, err
	}
	runtime.GC()
	mem1, g1 := memStats(), runtime.NumGoroutine()
	// Start half a renewal period in, and measure whole periods, so that every lease
	// renews the same number of times inside the window whatever its phase.
	time.Sleep(ttl / 6)
	a := e.counts(libs, false)
	time.Sleep(e.dur.manyWindow)
	b := e.counts(libs, false)
	el := b.at.Sub(a.at).Seconds()
	lost := 0
	for _, le := range leases {
		if le.Lost() {
			lost++
		}
	}
	d := a.srv.to(b.srv)
	m := map[string]float64{
		"leases":               float64(n),
		"expected_per_s":       float64(n) / (ttl / 3).Seconds(),
		"renew_scripts_per_s":  float64(d.scripts) / el,
		"cmds_per_s":           float64(d.cmds) / el,
		"reads_per_s":          float64(d.reads) / el,
		"client_cpu_pct":       100 * (b.cpu - a.cpu).Seconds() / el,
		"server_cpu_pct":       100 * d.cpu.Seconds() / el,
		"heap_per_lease_B":     float64(int64(mem1.HeapAlloc)-int64(mem0.HeapAlloc)) / float64(n),
		"stack_per_lease_B":    float64(int64(mem1.StackInuse)-int64(mem0.StackInuse)) / float64(n),
		"setup_errors":         float64(setupErrs.Load()),
		"goroutines_per_lease": float64(g1-g0) / float64(n),
		"lost":                 float64(lost),
		"setup_s":              setup.Seconds(),
	}
	if a.rt >= 0 {
		m["rt_per_s_hook"] = float64(b.rt-a.rt) / el
	}
	return m, d, nil
}
