package chaos

import (
	"syscall"
	"unsafe"
)

// hostMono reads CLOCK_MONOTONIC, the clock Go's runtime also reads on Linux.
func hostMono() Mono {
	const clockMonotonic = 1
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("chaos: clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return Mono(ts.Nano())
}
