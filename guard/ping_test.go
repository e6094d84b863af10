package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// pingCtx bounds a Ping so that a hang fails instead of blocking.
func pingCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantDown fails t unless err is Ping's error for an unreachable Redis.
func wantDown(t *testing.T, err error, what string) {
	t.Helper()
	var re *guard.RedisError
	if !errors.Is(err, guard.ErrUnavailable) || !errors.As(err, &re) || re.Op != "ping" {
		t.Fatalf("%s: Ping returned %v, want a *guard.RedisError with Op ping matching ErrUnavailable", what, err)
	}
}

// TestPing: Locker.Ping answers nil while every server the Locker needs answers, and
// ErrUnavailable once one does not — a single server, a Cluster's primaries, a Sentinel
// deployment's primary, a quorum's majority — and ErrClosed after Close.
func TestPing(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		l, _ := newLocker(t, srv)
		if err := l.Ping(pingCtx(t)); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		srv.Kill(t)
		wantDown(t, l.Ping(pingCtx(t)), "server killed")
		_ = l.Close()
		if err := l.Ping(pingCtx(t)); !errors.Is(err, guard.ErrClosed) {
			t.Fatalf("Ping after Close: %v, want ErrClosed", err)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := redis.NewClusterClient(cluster.Get(t).ClientOptions())
		t.Cleanup(func() { _ = c.Close() })
		l, err := guard.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		if err := l.Ping(pingCtx(t)); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		dead := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{closedAddr(t)}, MaxRetries: -1})
		t.Cleanup(func() { _ = dead.Close() })
		ld, err := guard.New(dead)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ld.Close() })
		wantDown(t, ld.Ping(pingCtx(t)), "no node reachable")
	})
	t.Run("sentinel", func(t *testing.T) {
		c := sentinel.Get(t).Client(t)
		l, err := guard.New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		if err := l.Ping(pingCtx(t)); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		dead := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{closedAddr(t)}, MaxRetries: -1})
		t.Cleanup(func() { _ = dead.Close() })
		ld, err := guard.New(dead)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ld.Close() })
		wantDown(t, ld.Ping(pingCtx(t)), "no sentinel reachable")
	})
	t.Run("quorum", func(t *testing.T) {
		r := startQuorum(t, 3, false)
		l := r.locker(t)
		if err := l.Ping(pingCtx(t)); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		r.servers[0].Kill(t)
		if err := l.Ping(pingCtx(t)); err != nil {
			t.Fatalf("Ping with 2 of 3 servers up: %v, want nil (a majority serves)", err)
		}
		r.servers[1].Kill(t)
		err := l.Ping(pingCtx(t))
		wantDown(t, err, "2 of 3 servers killed")
		if op, errs, ok := guard.QuorumFailure(err); !ok || op != "ping" || errs[0] == nil || errs[1] == nil || errs[2] != nil {
			t.Fatalf("Ping error %v: want a quorum failure naming servers 0 and 1", err)
		}
	})
}

// closedAddr returns a loopback address where nothing listens: a server's, killed.
func closedAddr(t *testing.T) string {
	t.Helper()
	srv := redistest.Start(t)
	srv.Kill(t)
	return srv.Addr()
}

// TestNewMakesNoCall: New hands out a Locker without a Redis call, even when Redis cannot
// be reached; Ping after it is what fails at start-up, with ErrUnavailable, and passes
// on a live server.
func TestNewMakesNoCall(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: closedAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	l, err := guard.New(c)
	if err != nil {
		t.Fatalf("New on a closed port: %v", err)
	}
	start := time.Now()
	err = l.Ping(pingCtx(t))
	t.Logf("Ping after New on a closed port failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, guard.ErrUnavailable) {
		t.Fatalf("Ping after New on a closed port: %v; want ErrUnavailable", err)
	}
	_ = l.Close()

	live := redistest.Start(t).Client(t)
	l, err = guard.New(live)
	if err != nil {
		t.Fatalf("New on a live server: %v", err)
	}
	if err := l.Ping(pingCtx(t)); err != nil {
		t.Fatalf("Ping after New on a live server: %v", err)
	}
	_ = l.Close()
}
