//go:build !linux

package main

import (
	"syscall"
	"time"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// cpuTime is not measured on this platform.
func cpuTime() time.Duration { return 0 }
