package chaos

import (
	"time"
)

// Mono is a reading of the host's monotonic clock (CLOCK_MONOTONIC on Linux) in
// nanoseconds. Unlike the monotonic reading inside a time.Time, which Go counts from the
// start of each process, it is the same clock in every process of the host, so the
// critical sections of several worker processes can be compared with one another.
type Mono int64

// Sub returns m − o.
func (m Mono) Sub(o Mono) time.Duration { return time.Duration(m - o) }

// Add returns m + d.
func (m Mono) Add(d time.Duration) Mono { return m + Mono(d) }

// Before reports whether m is earlier than o.
func (m Mono) Before(o Mono) bool { return m < o }

// calibration ties this process's time.Time monotonic readings to the host clock.
type calibration struct {
	t    time.Time
	mono Mono
}

var calib = calibrate()

// calibrate reads the host clock between two time.Now calls and keeps the tightest of a
// few tries, so the offset is known to within the time of one clock read.
func calibrate() calibration {
	best := calibration{}
	bestGap := time.Duration(1<<63 - 1)
	for range 16 {
		t1 := time.Now()
		m := hostMono()
		t2 := time.Now()
		if gap := t2.Sub(t1); gap < bestGap {
			bestGap = gap
			best = calibration{t: t1.Add(gap / 2), mono: m}
		}
	}
	return best
}

// Now returns the host's monotonic clock.
func Now() Mono { return MonoOf(time.Now()) }

// MonoOf converts t, which must carry a monotonic reading (time.Now and values derived
// from it with Add do, such as a Lease's ValidUntil), to the host's monotonic clock.
func MonoOf(t time.Time) Mono { return calib.mono.Add(t.Sub(calib.t)) }
