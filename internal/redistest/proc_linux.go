package redistest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel send SIGKILL to redis-server when the test
// binary dies, so a crashed or killed test run leaves no server behind.
// Pdeathsig fires when the thread that started the child exits; Go threads
// outlive the test run unless a goroutine locked to one exits, which this
// package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until /proc reports the process as stopped, so that a
// test acting right after Pause finds the server frozen.
func waitStopped(pid int, timeout time.Duration) error {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		// The state follows the command name, which is in parentheses and
		// may itself contain spaces or parentheses.
		if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) && data[i+2] == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process not stopped after %v", timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
