package examples_test

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/internal/redistest"
)

// programs says how to run each example and how it reports success: a line of output
// that starts with verdict. Every main package under examples must be listed.
// A program marked realOnly is the README's minimal program, which uses a plain
// redis.NewClient: it runs on the real server only.
var programs = map[string]struct {
	args     []string
	verdict  string
	realOnly bool
}{
	"deadlock":  {nil, "ok: ", false},
	"demo":      {nil, "PASS:", false},
	"echo":      {[]string{"-smoke"}, "smoke: ok", false},
	"fair":      {nil, "ok: ", false},
	"grpc":      {nil, "ok: ", false},
	"minimal":   {nil, "holding order:42 with fencing token ", true},
	"nethttp":   {nil, "ok: ", false},
	"readwrite": {nil, "ok: ", false},
	"semaphore": {nil, "ok: ", false},
	"service":   {nil, "ok: ", false},
	"tracing":   {nil, "ok: ", false},
	"transfer":  {nil, "ok: ", false},
}

// runDeadline bounds one run of one example.
const runDeadline = 60 * time.Second

// TestExamplesRun builds every example and runs it twice: on the embedded default
// (REDIS_ADDR unset) and on a real redis-server (REDIS_ADDR set), checking the first line
// of output (which Redis), the exit status and the verdict of the example's own check,
// and that the real run wrote to the real server.
func TestExamplesRun(t *testing.T) {
	bin := buildExamples(t)
	for _, name := range slices.Sorted(maps.Keys(programs)) {
		p := programs[name]
		if !p.realOnly {
			t.Run(name+"/embedded", func(t *testing.T) {
				out := runExample(t, filepath.Join(bin, name), p.args, "")
				checkOutput(t, out, embedded.Banner, p.verdict)
			})
		}
		t.Run(name+"/redis-server", func(t *testing.T) {
			srv := redistest.Start(t)
			out := runExample(t, filepath.Join(bin, name), p.args, srv.Addr())
			first := "using the Redis server at " + srv.Addr()
			if p.realOnly {
				first = "paid order 42" // then the lock by hand: "holding order:42 …"
			}
			checkOutput(t, out, first, p.verdict)
			if n, err := srv.Client(t).DBSize(context.Background()).Result(); err != nil || n == 0 {
				t.Fatalf("the real server holds %d keys (%v) after the run: the example did not use it", n, err)
			}
		})
	}
}

// buildExamples builds every main package under examples into a temporary directory,
// after checking that each is in the programs table.
func buildExamples(t *testing.T) string {
	t.Helper()
	list, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(list)) {
		name := filepath.Base(p)
		if _, ok := programs[name]; !ok {
			t.Errorf("example %s is not in the programs table of this test", p)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) != len(programs) {
		t.Fatalf("found examples %v, the programs table lists %d", pkgs, len(programs))
	}
	bin := t.TempDir()
	cmd := exec.Command("go", append([]string{"build", "-o", bin + string(os.PathSeparator)}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runExample runs an example with REDIS_ADDR set to redisAddr and returns its output,
// stdout and stderr interleaved as written.
func runExample(t *testing.T, path string, args []string, redisAddr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), embedded.EnvAddr+"="+redisAddr)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out // one pipe: the order of lines is kept
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %s; output:\n%s", filepath.Base(path), runDeadline, out.String())
	}
	if err != nil {
		t.Fatalf("%s: %v; output:\n%s", filepath.Base(path), err, out.String())
	}
	return out.String()
}

func checkOutput(t *testing.T, out, first, verdict string) {
	t.Helper()
	if line, _, _ := strings.Cut(out, "\n"); line != first && !(strings.HasSuffix(first, " ") && strings.HasPrefix(line, first)) {
		t.Errorf("first line %q, want %q", line, first)
	}
	if !strings.Contains(out, "\n"+verdict) {
		t.Errorf("no line starts with %q", verdict)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
