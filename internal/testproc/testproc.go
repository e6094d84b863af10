// Package testproc runs the test binary again as a helper process: a holder, a worker,
// a service that a test needs in a process of its own. The test's TestMain looks for the
// helper's environment variable first and, when it is set, runs the helper instead of the
// tests.
package testproc

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"testing"
)

// Proc is a helper process started by Start.
type Proc struct {
	// Cmd is the running process.
	Cmd *exec.Cmd
	// Stdin is the process's standard input; closing it tells a helper that reads it to end.
	Stdin io.WriteCloser
	// Lines receives the lines the process writes on its standard output, and is closed
	// when the output ends. A helper that writes more than its reader takes blocks.
	Lines <-chan string
}

// Start runs the test binary with env set to spec as JSON (and extraEnv, "NAME=value"
// each, added), its standard error going to the test's. The process is killed, and
// waited for, when the test ends.
func Start(tb testing.TB, env string, spec any, extraEnv ...string) *Proc {
	tb.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), env+"="+string(raw)), extraEnv...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	lines := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	tb.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for range lines { // let the reader end if the test stopped reading
		}
		<-done
	})
	return &Proc{Cmd: cmd, Stdin: stdin, Lines: lines}
}
