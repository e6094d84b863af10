package redistest

import (
	"sync"
	"testing"
)

// deployment is what a [Shared] holds: a [Cluster] or a [Sentinel].
type deployment interface {
	Stopper
	reset() error
}

// Shared holds one deployment for all the tests of a package, so that the
// seconds it takes to form are spent once. It starts the deployment on the
// first [Shared.Get] and resets it on every later one; the TestMain stops
// it:
//
//	var cluster = redistest.ShareCluster(redistest.ClusterNodeTimeout(time.Second))
//
//	func TestMain(m *testing.M) {
//		goleak.VerifyTestMain(redistest.StopAfter(m, cluster))
//	}
//
//	func TestFailover(t *testing.T) {
//		c := cluster.Get(t)
//		// ...
//	}
//
// Tests that share a deployment must not run in parallel with each other:
// each one's Get empties the deployment under the others. A deployment
// that fails to start fails every Get with the same error instead of
// spending the formation time again. Its files are in a temporary
// directory that Stop removes.
type Shared[D deployment] struct {
	start func() (D, error)

	mu      sync.Mutex
	d       D
	started bool
	err     error
}

// ShareCluster returns a Shared cluster started with opts on first use.
func ShareCluster(opts ...ClusterOption) *Shared[*Cluster] {
	return &Shared[*Cluster]{start: func() (*Cluster, error) { return NewCluster(opts...) }}
}

// ShareSentinel returns a Shared Sentinel group started with opts on first
// use.
func ShareSentinel(opts ...SentinelOption) *Shared[*Sentinel] {
	return &Shared[*Sentinel]{start: func() (*Sentinel, error) { return NewSentinel(opts...) }}
}

// Get returns the deployment, ready for tb: on the first call it starts it,
// on later calls it resets it ([Cluster.Reset], [Sentinel.Reset]): every
// process running again, healthy and empty. Faults a test made (a killed
// or paused node, a failover) are repaired by the next Get, not undone:
// roles may have changed. It fails the test when the deployment does not
// start or does not recover.
func (s *Shared[D]) Get(tb testing.TB) D {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.err != nil:
	case !s.started:
		s.d, s.err = s.start()
		s.started = s.err == nil
	default:
		if err := s.d.reset(); err != nil {
			tb.Fatalf("%v", err)
		}
	}
	if s.err != nil {
		tb.Fatalf("%v", s.err)
	}
	return s.d
}

// Stop stops the deployment if it was started, and lets the next Get start
// a new one. It needs no testing.TB, for a TestMain (see [StopAfter]).
func (s *Shared[D]) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		s.d.Stop()
	}
	var zero D
	s.d, s.started, s.err = zero, false, nil
}
