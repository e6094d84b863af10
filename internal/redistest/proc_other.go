//go:build unix && !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr returns nil: parent-death signals exist only on Linux, so
// elsewhere a server outlives a test binary that is killed outright.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped returns at once: without /proc there is no portable way to
// observe the stop, and the kernel delivers SIGSTOP promptly.
func waitStopped(pid int, timeout time.Duration) error { return nil }
