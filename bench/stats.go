package main

import (
	"bufio"
	"context"
	"math"
	"math/bits"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// hist is a log-linear latency histogram with about 1.6% resolution and no allocation
// per sample, so that recording does not disturb allocs/op.
type hist struct {
	counts [64 * 64]int64
	n      int64
}

const histSub = 64 // sub-buckets per power of two

func histBucket(ns int64) int {
	if ns < histSub {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 7 // ns >> e is in [64, 128)
	return (e+1)*histSub + int(ns>>e) - histSub
}

// histLow is the lower bound of bucket b, in nanoseconds.
func histLow(b int) int64 {
	if b < histSub {
		return int64(b)
	}
	e := b/histSub - 1
	return int64(b%histSub+histSub) << e
}

func (h *hist) add(d time.Duration) {
	b := min(histBucket(int64(d)), len(h.counts)-1)
	h.counts[b]++
	h.n++
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (0 < q ≤ 1), as the lower bound of its bucket.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(histLow(b))
		}
	}
	return time.Duration(histLow(len(h.counts) - 1))
}

// quantileOf returns the q-quantile of xs, which it sorts.
func quantileOf(xs []int64, q float64) int64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(i, 0)]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// jain is Jain's fairness index of xs: 1 when all are equal, 1/n when one has all.
func jain(xs []int64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// serverStats is one INFO snapshot of the counters the scenarios read.
type serverStats struct {
	reads int64            // total_reads_processed
	infos int64            // servers read: each counts the read of its own INFO
	calls map[string]int64 // commandstats calls by command
	usec  map[string]int64 // commandstats time in microseconds by command
	cpu   float64          // used_cpu_user + used_cpu_sys, seconds
}

// snapshot reads INFO stats, commandstats and cpu in one command, so one read.
func snapshot(ctx context.Context, c *redis.Client) (serverStats, error) {
	txt, err := c.Info(ctx, "stats", "commandstats", "cpu").Result()
	if err != nil {
		return serverStats{}, err
	}
	s := serverStats{infos: 1, calls: make(map[string]int64), usec: make(map[string]int64)}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch {
		case k == "total_reads_processed":
			s.reads, _ = strconv.ParseInt(v, 10, 64)
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		case strings.HasPrefix(k, "cmdstat_"):
			name := strings.TrimPrefix(k, "cmdstat_")
			for _, f := range strings.Split(v, ",") {
				fk, fv, _ := strings.Cut(f, "=")
				switch fk {
				case "calls":
					s.calls[name], _ = strconv.ParseInt(fv, 10, 64)
				case "usec":
					s.usec[name], _ = strconv.ParseInt(fv, 10, 64)
				}
			}
		}
	}
	return s, sc.Err()
}

// serverDelta is what the server did between two snapshots, without the snapshots'
// own work.
type serverDelta struct {
	reads   int64
	cmds    int64            // every command, including those run by scripts
	scripts int64            // EVAL, EVALSHA and FCALL calls: top-level script runs
	byCmd   map[string]int64 // cmds by command
	usecBy  map[string]int64 // time spent in each command, µs (a script's includes its commands')
	cpu     time.Duration
}

func (a serverStats) to(b serverStats) serverDelta {
	d := serverDelta{reads: b.reads - a.reads - b.infos, byCmd: make(map[string]int64), usecBy: make(map[string]int64),
		cpu: time.Duration((b.cpu - a.cpu) * float64(time.Second))}
	for k, v := range b.calls {
		if k == "info" {
			continue
		}
		if n := v - a.calls[k]; n > 0 {
			d.byCmd[k] = n
			d.usecBy[k] = b.usec[k] - a.usec[k]
			d.cmds += n
			if strings.HasPrefix(k, "eval") || strings.HasPrefix(k, "fcall") {
				d.scripts += n
			}
		}
	}
	return d
}

// rtStats are Go runtime counters read around a run.
type rtStats struct {
	created, gcs uint64
	lat          *metrics.Float64Histogram // scheduling latency: runnable → running
}

var rtSamples = []metrics.Sample{
	{Name: "/sched/goroutines-created:goroutines"},
	{Name: "/gc/cycles/total:gc-cycles"},
	{Name: "/sched/latencies:seconds"},
}

func readRuntime() rtStats {
	s := slices.Clone(rtSamples)
	metrics.Read(s)
	var r rtStats
	if s[0].Value.Kind() == metrics.KindUint64 {
		r.created = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		r.gcs = s[1].Value.Uint64()
	}
	if s[2].Value.Kind() == metrics.KindFloat64Histogram {
		r.lat = s[2].Value.Float64Histogram()
	}
	return r
}

// addRuntime adds the runtime counters of a run to m, per op where it says so.
func addRuntime(m map[string]float64, a, b rtStats, ops int64) {
	if ops <= 0 {
		return
	}
	if b.created > 0 {
		m["goroutines_created_per_op"] = float64(b.created-a.created) / float64(ops)
	}
	m["gc_per_kop"] = 1000 * float64(b.gcs-a.gcs) / float64(ops)
	if a.lat != nil && b.lat != nil && len(a.lat.Counts) == len(b.lat.Counts) {
		var total uint64
		d := make([]uint64, len(b.lat.Counts))
		for i := range d {
			d[i] = b.lat.Counts[i] - a.lat.Counts[i]
			total += d[i]
		}
		if total > 0 {
			rank := uint64(math.Ceil(0.99 * float64(total)))
			var seen uint64
			for i, c := range d {
				seen += c
				if seen >= rank {
					m["sched_latency_p99_us"] = b.lat.Buckets[i] * 1e6 // bucket's lower bound
					break
				}
			}
		}
	}
}
