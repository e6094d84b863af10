package chaos

import (
	"math"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"time"
)

// Stalls records how late the scheduler let a probe goroutine run: a goroutine that
// sleeps for a fixed tick, over and over, and notes how much longer each sleep took. On
// a loaded machine every deadline of every goroutine is late by about that much, engine
// or not, so timing invariants are read against it (see Slack). It is safe for
// concurrent use; the zero value is ready.
type Stalls struct {
	mu sync.Mutex
	s  []Stall
}

// Stall is one probe sleep: it ran From–To and woke Late after it should have.
type Stall struct {
	Proc string        `json:"proc,omitempty"` // the process measured; empty for the test process
	From Mono          `json:"from"`
	To   Mono          `json:"to"`
	Late time.Duration `json:"late"`
}

// Watch starts the probe goroutine, sleeping tick at a time. Each sleep is recorded
// with the larger of two delays: how late the probe itself woke (the whole process not
// running: a loaded host, a stop-the-world pause), and the longest time any goroutine of
// the process waited in the run queue meanwhile (runtime/metrics /sched/latencies). The
// returned function stops it and waits for it to end.
func (s *Stalls) Watch(tick time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(tick)
		defer t.Stop()
		q := newRunQueue()
		for {
			start := time.Now()
			select {
			case <-quit:
				return
			case <-t.C:
				end := time.Now()
				s.Add(Stall{From: MonoOf(start), To: MonoOf(end), Late: max(end.Sub(start)-tick, q.longestWait())})
				t.Reset(tick)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// Add records stalls measured elsewhere, such as in a worker process.
func (s *Stalls) Add(st ...Stall) {
	s.mu.Lock()
	s.s = append(s.s, st...)
	s.mu.Unlock()
}

// All returns a copy of the recorded stalls.
func (s *Stalls) All() []Stall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.s)
}

// Max returns the largest delay of a probe sleep in process proc that overlapped
// from–to.
func (s *Stalls) Max(proc string, from, to Mono) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var worst time.Duration
	for _, st := range s.s {
		if st.Proc == proc && st.From <= to && from <= st.To {
			worst = max(worst, st.Late)
		}
	}
	return worst
}

// Lag is the largest scheduling delay one process measured over a stretch of time.
type Lag struct {
	Proc string        // the process; empty for the test process
	Max  time.Duration // the largest delay of a probe sleep that overlapped the stretch
}

// Lags returns the Lag over from–to of every process that measured a probe sleep
// overlapping it, the test process first, then by name.
func (s *Stalls) Lags(from, to Mono) []Lag {
	s.mu.Lock()
	worst := map[string]time.Duration{}
	for _, st := range s.s {
		if st.From <= to && from <= st.To {
			worst[st.Proc] = max(worst[st.Proc], st.Late)
		}
	}
	s.mu.Unlock()
	out := make([]Lag, 0, len(worst))
	for proc, d := range worst {
		out = append(out, Lag{Proc: proc, Max: d})
	}
	slices.SortFunc(out, func(a, b Lag) int { return strings.Compare(a.Proc, b.Proc) })
	return out
}

// Summary returns the p99 and the largest delay recorded.
func (s *Stalls) Summary() (p99, worst time.Duration) {
	s.mu.Lock()
	lates := make([]time.Duration, len(s.s))
	for i, st := range s.s {
		lates[i] = st.Late
		worst = max(worst, st.Late)
	}
	s.mu.Unlock()
	p99, _ = Percentile(lates, 99)
	return p99, worst
}

// runQueue reads how long goroutines waited to run, from the runtime's histogram of
// scheduling latencies.
type runQueue struct {
	sample []metrics.Sample
	prev   []uint64
}

const schedLatencies = "/sched/latencies:seconds"

func newRunQueue() *runQueue {
	q := &runQueue{sample: []metrics.Sample{{Name: schedLatencies}}}
	q.longestWait()
	return q
}

// longestWait returns the upper bound of the highest histogram bucket that gained a
// count since the last call: the longest a goroutine waited to run meanwhile.
func (q *runQueue) longestWait() time.Duration {
	metrics.Read(q.sample)
	if q.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := q.sample[0].Value.Float64Histogram()
	var longest time.Duration
	for i, n := range h.Counts {
		if i < len(q.prev) && n > q.prev[i] {
			upper := h.Buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = h.Buckets[i]
			}
			longest = time.Duration(upper * float64(time.Second))
		}
	}
	q.prev = append(q.prev[:0], h.Counts...)
	return longest
}
