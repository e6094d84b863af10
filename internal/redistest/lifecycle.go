package redistest

import (
	"fmt"
	"os"
	"testing"
)

// inTestDir starts a deployment with its files under tb.TempDir() and
// registers its Stop as cleanup; it fails the test when start fails.
func inTestDir[D Stopper](tb testing.TB, start func(dir string) (D, error)) D {
	tb.Helper()
	d, err := start(tb.TempDir())
	if err != nil {
		tb.Fatalf("%v", err)
	}
	// Registered after TempDir so that it runs first: the processes stop
	// before their directory is removed.
	tb.Cleanup(d.Stop)
	return d
}

// inOwnDir starts a deployment with its files in a new temporary directory,
// which start hands to the deployment for its Stop to remove, and which is
// removed at once when start fails.
func inOwnDir[D Stopper](prefix string, start func(dir string) (D, error)) (D, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		var zero D
		return zero, fmt.Errorf("redistest: create directory: %w", err)
	}
	d, err := start(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
	}
	return d, err
}

// Stopper is what this package starts and a TestMain stops: a [Server], a
// [Cluster], a [Sentinel] or a [Shared] deployment.
type Stopper interface {
	Stop()
}

// TestingM is the part of *testing.M that TestMain helpers such as
// goleak.VerifyTestMain call.
type TestingM interface {
	Run() int
}

// StopAfter returns m whose Run runs the tests and then stops the given
// deployments, for a TestMain that checks for leaks once the tests are done:
//
//	goleak.VerifyTestMain(redistest.StopAfter(m, cluster))
//
// Stopping inside Run matters: a deployment still running when the leak
// check starts owns goroutines that wait for its processes.
func StopAfter(m TestingM, deployments ...Stopper) TestingM {
	return stopAfter{m: m, deployments: deployments}
}

type stopAfter struct {
	m           TestingM
	deployments []Stopper
}

// Run runs the tests, then stops the deployments.
func (s stopAfter) Run() int {
	defer func() {
		for _, d := range s.deployments {
			d.Stop()
		}
	}()
	return s.m.Run()
}
