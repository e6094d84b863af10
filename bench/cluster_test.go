package main

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// tiny are durations that keep a scenario run in a test short.
var tiny = durations{warm: 10 * time.Millisecond, uncontended: 50 * time.Millisecond, contended: 100 * time.Millisecond}

func variantByName(t *testing.T, name string) variant {
	t.Helper()
	for _, v := range variants() {
		if v.name == name {
			return v
		}
	}
	t.Fatalf("no variant %q", name)
	return variant{}
}

func newLib(t *testing.T, v variant, cfg libConfig) Lib {
	t.Helper()
	l, err := v.new(cfg)
	if err != nil {
		t.Fatalf("%s: %v", v.name, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// near fails t unless metric key of m is within tol of want.
func near(t *testing.T, m map[string]float64, key string, want, tol float64) {
	t.Helper()
	got, ok := m[key]
	if !ok || math.Abs(got-want) > tol {
		t.Errorf("%s = %v (present %v), want %v ± %v", key, got, ok, want, tol)
	}
}

// TestCluster checks the cluster scenarios on a real Redis Cluster of three primaries:
// every adapter locks, excludes and wakes a waiter on a key of each primary, and the key
// it is given for goroutine i is served by primary i mod 3 (only that primary sees the
// lock's commands); the uncontended loop counts 2 round trips a pair on the node
// clients and the server commands of all primaries (raw: SET, EVALSHA, GET, DEL — 4 a
// pair, where one primary alone would show a third of them); the contended loop sees no
// violation.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterPrimaries(3), redistest.ClusterReplicas(0))
	p := newPlacement(c)
	primaries := infoClients(c.Primaries())
	t.Cleanup(func() { closeClients(primaries) })
	e := &env{cluster: c.ClientOptions().Addrs, place: &p, primaries: primaries, dur: tiny, ttl: 10 * time.Second}

	var names []string
	for _, s := range []string{"cluster-uncontended", "cluster-contended"} {
		for _, n := range scenarioVariants[s] {
			if v := variantByName(t, n); !v.replicated && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	for _, name := range names {
		v := variantByName(t, name)
		t.Run(name, func(t *testing.T) {
			cfg := libConfig{cluster: e.cluster, ttl: 10 * time.Second}
			a, b := newLib(t, v, cfg), newLib(t, v, cfg)
			for i := range p.primaries {
				key := e.keyFor("conformance", i)
				before := make([]serverStats, len(primaries))
				for j, pc := range primaries {
					before[j] = mustSnapshot([]*redis.Client{pc})
				}
				checkLock(t, a, b, key)
				for j, pc := range primaries {
					d := before[j].to(mustSnapshot([]*redis.Client{pc}))
					n := lockCmds(d)
					if j == i && n == 0 {
						t.Errorf("primary %d served no command for key %q placed on it", j, key)
					}
					if j != i && n != 0 {
						t.Errorf("primary %d served %v for key %q placed on primary %d", j, d.byCmd, key, i)
					}
				}
			}
			if slices.Contains(scenarioVariants["cluster-uncontended"], name) {
				m, _, err := e.uncontended(v, 3)
				if err != nil {
					t.Fatal(err)
				}
				if m["errors"] != 0 || m["pairs_per_s"] <= 0 {
					t.Errorf("uncontended: %v errors, %v pairs/s", m["errors"], m["pairs_per_s"])
				}
				near(t, m, "rt_per_pair_hook", 2, 0.05)
				if v.name == "raw" {
					near(t, m, "cmds_per_pair", 4, 0.1)
				}
			}
			if slices.Contains(scenarioVariants["cluster-contended"], name) {
				// A fresh Locker's first wait on a Cluster opens a sharded subscription on
				// the slot's primary (a connection and a version probe) before its waiters
				// are woken: under -race on a loaded machine that alone can outlast the
				// 100 ms of tiny, so this cell gets a window that startup cannot fill.
				e.dur.contended = time.Second
				m, _, err := e.contended(v, 4, 0)
				e.dur.contended = tiny.contended
				if err != nil {
					t.Fatal(err)
				}
				if m["violations"] != 0 || m["errors"] != 0 || m["acq_per_s"] <= 0 {
					t.Errorf("contended: %v violations, %v errors, %v acq/s", m["violations"], m["errors"], m["acq_per_s"])
				}
			}
		})
	}
}

// lockCmds counts the commands of d other than those a client sends when it connects
// (HELLO, COMMAND, CLIENT …) or loads the slot map (CLUSTER SLOTS), which go to any node.
func lockCmds(d serverDelta) int64 {
	n := d.cmds
	for k, v := range d.byCmd {
		// Connection set-up, and guard's classic subscription to its force-release channel
		// (a Locker holding leases listens there, on whichever node the channel's slot
		// names): neither is a lock's traffic.
		if k == "hello" || k == "command" || k == "ping" || k == "subscribe" || k == "unsubscribe" ||
			strings.HasPrefix(k, "command|") || strings.HasPrefix(k, "client|") || strings.HasPrefix(k, "cluster|") {
			n -= v
		}
	}
	return n
}

// TestReplicated checks guardkit/sync-replicas: on one server with one replica it locks
// and excludes, and every pair sends one WAIT and makes the replica work; on a server
// without replicas its grant is refused with a *guard.RedisError saying that too few
// replicas acknowledged it, so the variant does wait for replicas.
func TestReplicated(t *testing.T) {
	v := variantByName(t, "guardkit/sync-replicas")
	t.Run("without replica", func(t *testing.T) {
		l := newLib(t, v, libConfig{addr: testAddr, ttl: 10 * time.Second})
		le, err := l.TryLock(context.Background(), "replicated:none")
		var re *guard.RedisError
		if !errors.As(err, &re) || re.Op != "acquire" || !strings.Contains(re.Error(), "replicas acknowledged the grant in time") {
			if le != nil {
				_ = le.Unlock(context.Background())
			}
			t.Fatalf("TryLock without a replica: got %v, want a *guard.RedisError for too few replicas", err)
		}
	})
	t.Run("with replica", func(t *testing.T) {
		e, stop, err := startReplicatedEnv(&env{dur: tiny, ttl: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		// One acknowledged write first, with time to spare: the variant's WAIT allows
		// 100ms, which a replica that has just synced may need for its first reply on a
		// loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pc := e.primaries[0]
		if err := pc.Set(ctx, "replicated:warm", "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := pc.Do(ctx, "WAIT", 1, 5000).Int64(); err != nil || n != 1 {
			t.Fatalf("WAIT 1 for a warm-up write: %d, %v", n, err)
		}
		cfg := libConfig{addr: e.addr, ttl: 10 * time.Second}
		checkLock(t, newLib(t, v, cfg), newLib(t, v, cfg), "replicated:lock")
		m, _, err := e.uncontended(v, 2)
		if err != nil {
			t.Fatal(err)
		}
		if m["errors"] != 0 || m["pairs_per_s"] <= 0 {
			t.Errorf("uncontended: %v errors, %v pairs/s", m["errors"], m["pairs_per_s"])
		}
		near(t, m, "rt_per_pair_hook", 2, 0.05)
		near(t, m, "cmd:wait", 1, 0.001)
		if m["replica_cmds_per_pair"] <= 0 {
			t.Errorf("replica_cmds_per_pair = %v, want > 0: the replica's counters were not read", m["replica_cmds_per_pair"])
		}
	})
}
