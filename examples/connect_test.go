package examples_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestConnectRun builds examples/connect, a module of its own (so that guardkit's module
// does not require connect, and go list ./... here does not see it), and runs it as
// TestExamplesRun runs the others: on the embedded Redis and on a real redis-server.
func TestConnectRun(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "connect")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "connect"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in examples/connect: %v\n%s", err, out)
	}
	const verdict = "ok: "
	t.Run("embedded", func(t *testing.T) {
		checkOutput(t, runExample(t, bin, nil, ""), embedded.Banner, verdict)
	})
	t.Run("redis-server", func(t *testing.T) {
		srv := redistest.Start(t)
		checkOutput(t, runExample(t, bin, nil, srv.Addr()), "using the Redis server at "+srv.Addr(), verdict)
		if n, err := srv.Client(t).DBSize(context.Background()).Result(); err != nil || n == 0 {
			t.Fatalf("the real server holds %d keys (%v) after the run: the example did not use it", n, err)
		}
	})
}
