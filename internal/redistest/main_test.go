package redistest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(StopAfter(m, sharedCluster, sharedSentinel), goleak.Cleanup(func(code int) {
		if pids := childProcesses(); len(pids) > 0 {
			fmt.Fprintf(os.Stderr, "redistest: child processes left running: %v\n", pids)
			code = 1
		}
		os.Exit(code)
	}))
}

// childProcesses lists the processes, zombies included, whose parent is this
// test binary, by scanning /proc; without /proc it finds none.
func childProcesses() []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	self := strconv.Itoa(os.Getpid())
	var pids []int
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // exited meanwhile
		}
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		// After the command name: state, then the parent's PID.
		fields := strings.Fields(string(data[i+1:]))
		if len(fields) > 1 && fields[1] == self {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			pids = append(pids, pid)
		}
	}
	return pids
}

// fatalTB records the first Fatalf and ends the calling goroutine, as
// testing.T does, so tests can check how the harness fails.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// expectFatal runs fn with a TB whose Fatalf is recorded and returns the
// message; it fails t when fn does not call Fatalf.
func expectFatal(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.msg == "" {
		t.Fatal("expected the harness to fail the test, it did not")
	}
	return f.msg
}
