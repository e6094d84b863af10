package guard

import "time"

// Monotonic clock readings as integers, for validity deadlines read without a lock
// (held.due).

// monoBase is the origin of monoNow's readings.
var monoBase = time.Now()

// monoNow reads the monotonic clock as nanoseconds since monoBase (never 0).
func monoNow() int64 { return int64(time.Since(monoBase)) + 1 }

// monoAt is t as a monoNow reading.
func monoAt(t time.Time) int64 { return int64(t.Sub(monoBase)) + 1 }
