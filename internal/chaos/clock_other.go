//go:build !linux

package chaos

import "time"

var processStart = time.Now()

// hostMono falls back to this process's own monotonic clock: readings of different
// processes cannot be compared, so multi-process scenarios need Linux.
func hostMono() Mono { return Mono(time.Since(processStart)) }
