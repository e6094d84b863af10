//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package main

import "syscall"

// The ioctl requests that read and set a terminal's attributes.
const (
	ioctlGetTermios = syscall.TIOCGETA
	ioctlSetTermios = syscall.TIOCSETA
)
