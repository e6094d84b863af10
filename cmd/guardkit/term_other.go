//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import "os"

// keysMode is not available here: watch reads lines (q then Enter).
func keysMode(*os.File) func() { return nil }
