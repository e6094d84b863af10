//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"os"
	"syscall"
	"unsafe"
)

// keysMode puts the terminal that f is, if it is one, in cbreak mode: each key is read as
// it is typed, without Enter, and not echoed; Ctrl-C and Ctrl-Z still send their signals,
// and output is processed as before (a newline still returns the carriage). It returns
// the function that restores the terminal as it was, or nil when f is not a terminal
// (a pipe, a file: lines are read as before).
func keysMode(f *os.File) func() {
	fd := f.Fd()
	var old syscall.Termios
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, ioctlGetTermios, uintptr(unsafe.Pointer(&old))); errno != 0 {
		return nil
	}
	keys := old
	keys.Lflag &^= syscall.ICANON | syscall.ECHO
	keys.Cc[syscall.VMIN], keys.Cc[syscall.VTIME] = 1, 0
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, ioctlSetTermios, uintptr(unsafe.Pointer(&keys))); errno != 0 {
		return nil
	}
	return func() {
		_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, fd, ioctlSetTermios, uintptr(unsafe.Pointer(&old)))
	}
}
