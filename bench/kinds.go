package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/guard"
)

// The lock kinds' scenarios run guardkit only: none of the other libraries offers a
// read-write lock or a semaphore with per-holder leases, renewal and fencing, so there is
// nothing to set beside it on equal terms. The read-write scenario compares guardkit's
// read-write lock with its exclusive lock doing the same work, which is what sharing
// buys.

// Hold times of the kinds' scenarios.
const (
	kindReadHold   = 200 * time.Microsecond // a reader's work
	kindWriteHold  = 200 * time.Microsecond // the writer's work
	kindWritePause = 5 * time.Millisecond   // the writer's pause between writes
	kindSemHold    = time.Millisecond       // a permit holder's work
	kindSemW       = 64                     // semaphore workers

	kindUncontendedPermits = 4 // the semaphore's permits in scenario kinds-uncontended
)

// rwReaders and semPermits are the cells of the two scenarios.
var (
	rwReaders  = []int{1, 4, 16, 64}
	semPermits = []int{1, 4, 16}
)

// guardOnly builds v, a guardkit variant, and returns its Locker besides the Lib (to close).
func (e *env) guardOnly(v variant) ([]Lib, *guard.Locker, error) {
	libs, err := newLibs(v, libConfig{addr: e.addr, ttl: e.ttl}, 1)
	if err != nil {
		return nil, nil, err
	}
	g, ok := libs[0].(*guardLib)
	if !ok {
		closeAll(libs)
		return nil, nil, fmt.Errorf("bench: the kinds' scenarios run guardkit only, got %T", libs[0])
	}
	return libs, g.l, nil
}

// readWrite runs r readers looping Read → hold → release on one key, and one writer
// looping pause → Write → hold → release. With v.exclusive every one of them takes the
// exclusive lock instead. It counts both, the writer's waits, and any moment a writer
// held the key together with anyone (violations).
func (e *env) readWrite(v variant, r int) (map[string]float64, serverDelta, error) {
	libs, l, err := e.guardOnly(v)
	if err != nil {
		return nil, serverDelta{}, err
	}
	defer closeAll(libs)
	readOpt, writeOpt := guard.Read(), guard.Write()
	if v.exclusive {
		readOpt, writeOpt = guard.Option{}, guard.Option{}
	}
	key := e.keyFor("rw", 0)
	type result struct {
		reads, writes, violations, errs int64
		peak                            int32
		waits                           []int64 // the writer's, in ns
		elapsed                         time.Duration
	}
	run := func(d time.Duration) result {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			reads, writes, violations, errs atomic.Int64
			readers, writers, peak          atomic.Int32
			waits                           []int64
			wg                              sync.WaitGroup
		)
		fail := func(err error) {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				errs.Add(1)
			}
		}
		t0 := time.Now()
		for range r {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					le, err := l.Acquire(ctx, key, readOpt)
					if err != nil {
						fail(err)
						continue
					}
					n := readers.Add(1)
					if writers.Load() != 0 {
						violations.Add(1)
					}
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(kindReadHold)
					readers.Add(-1)
					if err := le.Release(context.Background()); err != nil {
						fail(err)
					}
					reads.Add(1)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if sleepCtx(ctx, kindWritePause) != nil {
					return
				}
				start := time.Now()
				le, err := l.Acquire(ctx, key, writeOpt)
				if err != nil {
					fail(err)
					continue
				}
				waits = append(waits, int64(time.Since(start)))
				if writers.Add(1) != 1 || readers.Load() != 0 {
					violations.Add(1)
				}
				time.Sleep(kindWriteHold)
				writers.Add(-1)
				if err := le.Release(context.Background()); err != nil {
					fail(err)
				}
				writes.Add(1)
			}
		}()
		time.Sleep(d)
		res := result{reads: reads.Load(), writes: writes.Load(), elapsed: time.Since(t0)}
		cancel()
		wg.Wait()
		res.violations, res.errs, res.peak, res.waits = violations.Load(), errs.Load(), peak.Load(), waits
		return res
	}
	run(e.dur.warm)
	a := e.counts(libs, false)
	res := run(e.dur.contended)
	b := e.counts(libs, false)
	el := res.elapsed.Seconds()
	m := map[string]float64{
		"reads_per_s":  float64(res.reads) / el,
		"writes_per_s": float64(res.writes) / el,
		"peak_readers": float64(res.peak),
		"violations":   float64(res.violations),
		"errors":       float64(res.errs),
	}
	ops := res.reads + res.writes
	d := perOp(m, a, b, ops, "per_acq")
	m["server_cpu_us_per_acq"] = us(d.cpu) / float64(max(ops, 1))
	if len(res.waits) > 0 {
		m["write_wait_p50_ms"] = float64(quantileOf(res.waits, 0.50)) / 1e6
		m["write_wait_p99_ms"] = float64(quantileOf(res.waits, 0.99)) / 1e6
		m["write_wait_max_ms"] = float64(quantileOf(res.waits, 1)) / 1e6
	}
	return m, d, nil
}

// semaphore runs kindSemW workers looping Permits(n) → hold → release on one key,
// counting the holders inside at once.
func (e *env) semaphore(v variant, n int) (map[string]float64, serverDelta, error) {
	libs, l, err := e.guardOnly(v)
	if err != nil {
		return nil, serverDelta{}, err
	}
	defer closeAll(libs)
	key := e.keyFor("sem", 0)
	type result struct {
		acqs, violations, errs int64
		peak                   int32
		per                    []int64
		elapsed                time.Duration
	}
	run := func(d time.Duration) result {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			acqs, violations, errs atomic.Int64
			inside, peak           atomic.Int32
			wg                     sync.WaitGroup
		)
		per := make([]int64, kindSemW)
		t0 := time.Now()
		for i := range kindSemW {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					le, err := l.Acquire(ctx, key, guard.Permits(n))
					if err != nil {
						if ctx.Err() == nil {
							errs.Add(1)
						}
						continue
					}
					now := inside.Add(1)
					if now > int32(n) {
						violations.Add(1)
					}
					for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
					}
					time.Sleep(kindSemHold)
					inside.Add(-1)
					if err := le.Release(context.Background()); err != nil && ctx.Err() == nil {
						errs.Add(1)
					}
					acqs.Add(1)
					per[i]++
				}
			}()
		}
		time.Sleep(d)
		res := result{acqs: acqs.Load(), elapsed: time.Since(t0)}
		cancel()
		wg.Wait()
		res.violations, res.errs, res.peak, res.per = violations.Load(), errs.Load(), peak.Load(), per
		return res
	}
	run(e.dur.warm)
	a := e.counts(libs, false)
	res := run(e.dur.contended)
	b := e.counts(libs, false)
	var sum int64
	for _, c := range res.per {
		sum += c
	}
	m := map[string]float64{
		"acq_per_s":    float64(res.acqs) / res.elapsed.Seconds(),
		"peak_holders": float64(res.peak),
		"violations":   float64(res.violations),
		"errors":       float64(res.errs),
		"jain":         jain(res.per),
	}
	d := perOp(m, a, b, sum, "per_acq")
	m["server_cpu_us_per_acq"] = us(d.cpu) / float64(max(sum, 1))
	return m, d, nil
}

// kindsUncontended runs the kinds-uncontended scenario in turns (see turns), one variant
// per kind: "script_x_exclusive" is a slice's script time per pair over the exclusive
// lock's (variant guardkit) in the same round. record gets every slice.
func (e *env) kindsUncontended(vs []variant, rounds, pairs int, record func(measurement)) error {
	base := slices.IndexFunc(vs, func(v variant) bool { return v.name == "guardkit" })
	byRound, err := e.turns("kinds-uncontended", vs, rounds, pairs)
	if err != nil {
		return err
	}
	for _, ms := range byRound {
		if base >= 0 {
			if ex := ms[base].Metrics["script_us_per_pair"]; ex > 0 {
				for i := range ms {
					ms[i].Metrics["script_x_exclusive"] = ms[i].Metrics["script_us_per_pair"] / ex
				}
			}
		}
		for _, m := range ms {
			record(m)
		}
	}
	return nil
}
