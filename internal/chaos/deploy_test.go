package chaos_test

// Scenarios on replicated deployments: a Redis Cluster and a Sentinel group whose
// primaries are killed, failed over, or starved of replication while Lockers contend.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/chaos"
	"github.com/guardkit/guardkit/internal/redistest"
)

const (
	// clusterNodeTimeout is the Cluster's cluster-node-timeout: a killed primary's
	// replica takes over one to two of these after the kill.
	clusterNodeTimeout = time.Second
	// sentinelDownAfter is the Sentinel group's down-after-milliseconds: the sentinels
	// fail over a second or two after it.
	sentinelDownAfter = 500 * time.Millisecond
	// sentinelFailoverTimeout is the Sentinel group's failover-timeout in the rows that
	// kill its primary more than once. A sentinel starts no failover of a primary within
	// twice this time of the last one, so those rows space their kills by more.
	sentinelFailoverTimeout = 3 * time.Second
	// deployWait bounds the deployment's own recovery in the harness (a promotion, a node
	// rejoining as a replica): many times what it takes on an idle host.
	deployWait = 30 * time.Second
	// resumeBound bounds the time from the deployment's recovery to the first fresh lock
	// taken on the failed primary's keys: the engine's promise of about a second (a
	// Cluster client reloads its slot map on the first error, a failover client dials the
	// primary the sentinels name), plus the client's dial timeout (1s, clientOpts) for a
	// dial under way when the deployment recovered, plus a second for a loaded host.
	resumeBound = 3 * time.Second
	// resumeTry bounds each attempt of a fresh acquisition while waiting for recovery.
	resumeTry = time.Second
)

// newClusterWorld builds a world whose lock deployment is a Redis Cluster of three
// primaries with a replica each.
func newClusterWorld(t *testing.T, cfg config) *world {
	t.Helper()
	return newWorldOn(t, cfg, func(w *world) {
		w.cluster = redistest.StartCluster(w.tb, redistest.ClusterNodeTimeout(clusterNodeTimeout))
	})
}

// newSentinelWorld builds a world whose lock deployment is a primary with one replica
// watched by three sentinels, with opts after the suite's down-after time.
func newSentinelWorld(t *testing.T, cfg config, opts ...redistest.SentinelOption) *world {
	t.Helper()
	return newWorldOn(t, cfg, func(w *world) {
		w.sentinel = redistest.StartSentinel(w.tb, slices.Concat([]redistest.SentinelOption{redistest.SentinelDownAfter(sentinelDownAfter)}, opts)...)
	})
}

// failoverConfig is the setup of the rows that kill primaries. Its TTL outlasts a
// failover, so that a lease granted just before its primary dies is still valid when a
// replica takes over: only then can a grant the replica never received become a double
// grant. With sync, every grant and renewal waits for one replica (guard.SyncReplicas).
func failoverConfig(sync bool) config {
	cfg := baseConfig()
	cfg.TTL = 5 * time.Second
	if sync {
		cfg.SyncReplicas, cfg.SyncTimeout = 1, 250*time.Millisecond
	}
	return cfg
}

// failoverLoad is the contended workload on keys, with one section in ten holding for up
// to 3s: a section that began before a kill may still run after the promotion.
func failoverLoad(sc scale, keys []string) load {
	ld := contended(sc)
	ld.Keys = keys
	ld.LongShare, ld.LongHold = 0.1, 3*time.Second
	return ld
}

// syncLabel describes cfg's SyncReplicas for a row's faults column.
func syncLabel(cfg config) string {
	if cfg.SyncReplicas == 0 {
		return "no SyncReplicas"
	}
	return fmt.Sprintf("SyncReplicas(%d, %s)", cfg.SyncReplicas, cfg.SyncTimeout)
}

// keysOn returns n keys named prefix-i whose locks live on primary p of the world's
// Cluster.
func (w *world) keysOn(p *redistest.Server, prefix string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprintf("%s-%d", prefix, i); w.cluster.NodeForKey(lockName(k)) == p {
			keys = append(keys, k)
		}
		if i > 100000 {
			w.fatalf(setup, "", 0, "no %d keys with prefix %q on %s", n, prefix, p)
		}
	}
	return keys
}

// spreadKeys returns perPrimary keys on each primary of the world's Cluster.
func (w *world) spreadKeys(perPrimary int) []string {
	var keys []string
	for i, p := range w.cluster.Primaries() {
		keys = append(keys, w.keysOn(p, fmt.Sprintf("k%d", i), perPrimary)...)
	}
	return keys
}

// resume measures how long after since a fresh lock on the failed primary's keys can be
// taken through l: on a Cluster, a key of the primary that now serves key; on a Sentinel
// group, any key. It tries a new key every 20ms, and past resumeBound records a liveness
// failure and gives up.
func (w *world) resume(l *guard.Locker, key string, since time.Time, cycle int) (time.Duration, bool) {
	var target *redistest.Server
	if w.cluster != nil {
		target = w.cluster.NodeForKey(lockName(key))
	}
	for i := 0; ; i++ {
		fresh := fmt.Sprintf("resume-%d-%d", cycle, i)
		if target != nil && w.cluster.NodeForKey(lockName(fresh)) != target {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), resumeTry)
		le, err := l.TryAcquire(ctx, fresh)
		cancel()
		if err == nil {
			took := time.Since(since)
			if err := le.Release(context.Background()); err != nil && !typed(err) {
				w.failf(typedErrors, fresh, 0, "release of a fresh lock after recovery: %v", err)
			}
			return took, true
		}
		if !errors.Is(err, guard.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			w.failf(typedErrors, fresh, chaos.MonoOf(since), "fresh acquisition on the failed primary's keys after recovery = %v, want a lease or ErrUnavailable", err)
			return 0, false
		}
		if time.Since(since) > resumeBound {
			w.failf(liveness, fresh, chaos.MonoOf(since), "fresh acquisitions on the failed primary's keys still fail %s after the deployment recovered: %v", resumeBound, err)
			return 0, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replicate makes data server s replicate the server at addr, and waits until its link
// is up.
func (w *world) replicate(s *redistest.Server, addr string) {
	w.t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		w.fatalf(setup, "", 0, "replicate %s: %v", addr, err)
	}
	c := s.Client(w.tb)
	defer c.Close()
	ctx := context.Background()
	start := chaos.Now()
	if err := c.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		w.fatalf(setup, "", start, "REPLICAOF %s on %s: %v", addr, s, err)
	}
	deadline := time.Now().Add(deployWait)
	for {
		info, _ := c.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_port:"+port+"\r\n") && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			w.fatalf(setup, "", start, "%s did not link to its primary at %s in %s:\n%s", s, addr, deployWait, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rejoin restarts s, a killed data server of the Sentinel group, and makes it a replica of
// the primary the sentinels name, as the sentinels themselves would some seconds later.
func (w *world) rejoin(s *redistest.Server) {
	w.t.Helper()
	s.Restart(w.tb)
	w.replicate(s, w.sentinel.Primary().Addr())
}

// recovery collects a row's recovery times: how long each failover took in the
// deployment, and how long after it a fresh lock on the failed primary's keys was taken.
type recovery struct {
	failover, resumed []time.Duration
}

// apply puts the recovery times in row: p99 recover becomes the time to the first fresh
// lock on the failed primary's keys, and a note gives both, the failover's as what
// happened after the fault (after).
func (r recovery) apply(row *chaos.Row, what, after string) {
	row.Recover, _ = chaos.Percentile(r.resumed, 99)
	failover, _ := chaos.Percentile(r.failover, 100)
	resumed, _ := chaos.Percentile(r.resumed, 100)
	addNote(row, fmt.Sprintf("%s at most %s after %s; fresh locks on the failed primary's keys at most %s after that (bound %s)",
		what, failover.Round(10*time.Millisecond), after, resumed.Round(time.Millisecond), resumeBound))
}

// i1Note explains a row's I1 count: double grants that asynchronous replication causes
// (or none), or, with SyncReplicas, none at all.
func i1Note(row *chaos.Row, cfg config, window string) {
	i1 := row.Violations[chaos.I1]
	switch {
	case cfg.SyncReplicas > 0:
		// I1 is not expected: a breach fails the scenario with its report.
	case i1 > 0:
		addNote(row, fmt.Sprintf("I1 breaks by design (%d overlaps): locks granted %s never reached the replica that was promoted, which granted them again; the fenced register applied no stale write (M4 = %d)",
			i1, window, row.Violations[chaos.M4]))
	case strings.HasPrefix(window, "during"):
		addNote(row, fmt.Sprintf("no double grant seen: every lease granted %s ended before the promoted replica granted its key again (I1 would count one; SyncReplicas closes that window)", window))
	default:
		addNote(row, "no double grant seen: none of the kills landed between a grant and its replication (I1 would count one; SyncReplicas closes that window)")
	}
}

// clusterKilled kills (SIGKILL) the primary that serves the first of the workers' keys,
// waits until its replica has taken over, restarts the killed node (it rejoins as the
// new primary's replica), and repeats, while two Lockers contend on keys spread over
// every primary. Without SyncReplicas a grant the replica had not received when its
// primary died can be granted again (I1, expected); with it, none can.
func clusterKilled(sync bool) func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		cfg := failoverConfig(sync)
		w := newClusterWorld(t, cfg)
		keys := w.spreadKeys(2)
		w.addNode("a", false)
		w.addNode("b", false)
		rec := w.addIdle("recovery")
		stop := w.run(failoverLoad(sc, keys))
		var r recovery
		restart := func(victim *redistest.Server) {
			victim.Restart(w.tb)
			w.cluster.WaitHealthy(w.tb, deployWait)
		}
		n := w.faultLoop(sc.run, time.Second, func(i int) {
			victim := w.cluster.NodeForKey(lockName(keys[0]))
			w.fault("kill -9 primary", func() {
				// The promoted replica may lack the latest writes: probes of sections
				// begun before the promotion do not expect their locks there.
				w.forget(func() {
					victim.Kill(w.tb)
					r.failover = append(r.failover, w.cluster.WaitHealthy(w.tb, deployWait))
				})
				w.probe.(*redis.ClusterClient).ReloadState(context.Background())
				// With SyncReplicas(1) the promoted primary grants nothing until a replica
				// is back: the deployment has recovered once the killed node rejoined.
				if sync {
					restart(victim)
				}
			})
			if d, ok := w.resume(rec.locker, keys[0], time.Now(), i); ok {
				r.resumed = append(r.resumed, d)
			}
			if !sync {
				restart(victim)
			}
		})
		stop()
		row, vs := w.finish("", fmt.Sprintf("%d× kill -9 of a primary, its replica promoted, the node restarted as a replica (3 primaries + 3 replicas, node timeout %s, TTL %s); %s",
			n, clusterNodeTimeout, cfg.TTL, syncLabel(cfg)), sc.slack)
		what := "replica promoted"
		if sync {
			what = "replica promoted and the killed node back as its replica"
		}
		r.apply(&row, what, "the kill")
		i1Note(&row, cfg, "just before a primary died")
		return row, vs
	}
}

// clusterFailover runs CLUSTER FAILOVER over and over, on the primaries in turn, while two
// Lockers contend on keys spread over every primary. A coordinated failover loses no
// write: every invariant holds, without SyncReplicas.
func clusterFailover(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	w := newClusterWorld(t, cfg)
	keys := w.spreadKeys(2)
	w.addNode("a", false)
	w.addNode("b", false)
	rec := w.addIdle("recovery")
	ld := contended(sc)
	ld.Keys = keys
	stop := w.run(ld)
	var r recovery
	n := w.faultLoop(sc.run, 500*time.Millisecond, func(i int) {
		key := keys[2*i%len(keys)]
		p := w.cluster.NodeForKey(lockName(key))
		replicas := w.cluster.ReplicasOf(p)
		if len(replicas) == 0 {
			w.fatalf(setup, key, 0, "primary %s has no replica to fail over to", p)
		}
		w.fault("CLUSTER FAILOVER", func() {
			r.failover = append(r.failover, w.cluster.Failover(w.tb, replicas[0]))
		})
		if d, ok := w.resume(rec.locker, key, time.Now(), i); ok {
			r.resumed = append(r.resumed, d)
		}
	})
	stop()
	row, vs := w.finish("", fmt.Sprintf("%d× CLUSTER FAILOVER, on each primary in turn (3 primaries + 3 replicas, TTL %s)", n, cfg.TTL), sc.slack)
	r.apply(&row, "failover agreed by every node", "CLUSTER FAILOVER")
	return row, vs
}

// sentinelKilled kills (SIGKILL) the primary of a Sentinel group, waits until the
// sentinels agree on its promoted replica, restarts the killed server as a replica of the
// new primary, and repeats, while two Lockers contend.
func sentinelKilled(sync bool) func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		cfg := failoverConfig(sync)
		w := newSentinelWorld(t, cfg, redistest.SentinelFailoverTimeout(sentinelFailoverTimeout))
		keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
		w.addNode("a", false)
		w.addNode("b", false)
		rec := w.addIdle("recovery")
		stop := w.run(failoverLoad(sc, keys))
		var r recovery
		var last time.Time
		n := w.faultLoop(sc.run, time.Second, func(i int) {
			// The sentinels would not fail over again so soon after the last failover.
			time.Sleep(time.Until(last.Add(2*sentinelFailoverTimeout + 2*time.Second)))
			old := w.sentinel.Primary()
			last = time.Now()
			w.fault("kill -9 primary", func() {
				w.forget(func() {
					old.Kill(w.tb)
					_, d := w.sentinel.WaitNewPrimary(w.tb, old, deployWait)
					r.failover = append(r.failover, d)
				})
				if sync {
					w.rejoin(old)
				}
			})
			if d, ok := w.resume(rec.locker, keys[0], time.Now(), i); ok {
				r.resumed = append(r.resumed, d)
			}
			if !sync {
				w.rejoin(old)
			}
		})
		stop()
		row, vs := w.finish("", fmt.Sprintf("%d× kill -9 of the primary, its replica promoted, the server restarted as a replica (3 sentinels, down-after %s, TTL %s); %s",
			n, sentinelDownAfter, cfg.TTL, syncLabel(cfg)), sc.slack)
		what := "new primary agreed by the sentinels"
		if sync {
			what = "new primary agreed and the killed server back as its replica"
		}
		r.apply(&row, what, "the kill")
		i1Note(&row, cfg, "just before the primary died")
		return row, vs
	}
}

// The replica-lag rows: the replica replicates through a proxy that black-holes for
// lagFor while Lockers keep acquiring, then the primary is killed and the sentinels
// promote the lagging replica. The holds (2–4s) and the TTL (5s, renewed every 1.7s)
// outlast the failover (about 2.5s from the kill): a lease granted during the lag is
// still held, and valid on its holder's clock, when the promoted replica, which never
// received it, grants the lock again. Many workers on more keys than workers make
// grants frequent despite the long holds, and leave most keys free in the replica's
// copy, so that the promoted replica can grant them at once.
const (
	lagFor     = 1500 * time.Millisecond
	lagLead    = 2 * time.Second // workers run before the lag begins
	lagTail    = 6 * time.Second // and after the promotion: beyond the TTL of every stale lease
	lagWorkers = 3               // times the scale's workers per Locker
)

// sentinelLag is the replica-lag row, without or with SyncReplicas.
func sentinelLag(sync bool) func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		cfg := failoverConfig(sync)
		// A long failover timeout keeps the sentinels from pointing the replica back at
		// the primary's own address during the row; it allows one failover per row.
		w := newSentinelWorld(t, cfg, redistest.SentinelFailoverTimeout(time.Minute))
		primary, replica := w.sentinel.Primary(), w.sentinel.Replicas()[0]
		link := redistest.NewProxy(w.tb, primary.Addr())
		w.replicate(replica, link.Addr())
		keys := make([]string, 4*lagWorkers*sc.workers)
		for i := range keys {
			keys[i] = fmt.Sprintf("lag%d", i)
		}
		w.addNode("a", false)
		w.addNode("b", false)
		rec := w.addIdle("recovery")
		stop := w.run(load{Keys: keys, Workers: lagWorkers * sc.workers, AcquireMin: time.Second, AcquireMax: 3 * time.Second,
			HoldMin: 2 * time.Second, HoldMax: 4 * time.Second, Nested: true})
		time.Sleep(lagLead)
		var r recovery
		var lagging, killed chaos.Mono
		w.fault("replication black hole, then kill -9 primary", func() {
			link.Blackhole(true)
			lagging = chaos.Now()
			if sync {
				w.checkUnacknowledged(rec.locker, "lag-unacknowledged")
			}
			time.Sleep(lagFor)
			w.forget(func() {
				killed = chaos.Now()
				primary.Kill(w.tb)
				_, d := w.sentinel.WaitNewPrimary(w.tb, primary, deployWait)
				r.failover = append(r.failover, d)
			})
			link.Blackhole(false)
			if sync {
				w.rejoin(primary)
			}
		})
		if d, ok := w.resume(rec.locker, keys[0], time.Now(), 0); ok {
			r.resumed = append(r.resumed, d)
		}
		if !sync {
			w.rejoin(primary)
		}
		time.Sleep(lagTail)
		stop()
		link.Close() // before finish looks for goroutines left behind
		return w.finishLag(sc, r, lagging, killed, fmt.Sprintf("3 sentinels, down-after %s, TTL %s, holds 2–4 s", sentinelDownAfter, cfg.TTL), "server")
	}
}

// checkUnacknowledged checks that, while the replica receives nothing, a grant with
// SyncReplicas fails with a typed *RedisError (ErrUnavailable) saying that 0 of 1 replicas
// acknowledged it, and leaves the lock free.
func (w *world) checkUnacknowledged(l *guard.Locker, key string) {
	w.t.Helper()
	ctx := context.Background()
	trying := chaos.Now()
	_, err := l.TryAcquire(ctx, key)
	if want, acked, renewal, ok := replicaShortfall(err); !errors.Is(err, guard.ErrUnavailable) || !ok || renewal || want != 1 || acked != 0 {
		w.failf(typedErrors, key, trying, "acquire while the replica lags = %v, want a *RedisError (ErrUnavailable), 0 of 1 replicas", err)
		return
	}
	switch h, err := redistest.ReadHolder(ctx, w.probe, lockName(key)); {
	case err != nil:
		w.failf(noPartialState, key, trying, "reading the lock after an acquisition no replica acknowledged: %v", err)
	case h != "":
		w.failf(noPartialState, key, trying, "an acquisition no replica acknowledged left its lock behind (held by %s)", h)
	}
}

// sentinelFailover runs SENTINEL FAILOVER over and over while two Lockers contend. Unlike
// CLUSTER FAILOVER it is not coordinated with the primary: the old primary keeps taking
// writes until its clients follow the sentinels' switch, and what it took meanwhile is
// lost when it becomes the new primary's replica. Without SyncReplicas a grant made there
// can be granted again (I1, expected); with it, the old primary has no replica left to
// acknowledge such a grant, which is undone.
func sentinelFailover(sync bool) func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		cfg := failoverConfig(sync)
		w := newSentinelWorld(t, cfg, redistest.SentinelFailoverTimeout(sentinelFailoverTimeout))
		keys := []string{"k0", "k1", "k2", "k3", "k4", "k5"}
		w.addNode("a", false)
		w.addNode("b", false)
		rec := w.addIdle("recovery")
		stop := w.run(failoverLoad(sc, keys))
		var r recovery
		var last time.Time
		n := w.faultLoop(sc.run, time.Second, func(i int) {
			// The sentinels would not fail over again so soon after the last failover.
			time.Sleep(time.Until(last.Add(2*sentinelFailoverTimeout + 2*time.Second)))
			old := w.sentinel.Primary()
			last = time.Now()
			w.fault("SENTINEL FAILOVER", func() {
				w.forget(func() {
					start := time.Now()
					p := w.sentinel.Failover(w.tb)
					r.failover = append(r.failover, time.Since(start))
					// The sentinels would make the old primary a replica some seconds
					// later; do it now, so that the next failover has a replica.
					w.replicate(old, p.Addr())
				})
			})
			if d, ok := w.resume(rec.locker, keys[0], time.Now(), i); ok {
				r.resumed = append(r.resumed, d)
			}
		})
		stop()
		row, vs := w.finish("", fmt.Sprintf("%d× SENTINEL FAILOVER, the old primary made a replica at once (3 sentinels, TTL %s); %s",
			n, cfg.TTL, syncLabel(cfg)), sc.slack)
		r.apply(&row, "new primary agreed by the sentinels", "SENTINEL FAILOVER")
		i1Note(&row, cfg, "on the old primary after the switch")
		return row, vs
	}
}

// clusterLag is the replica-lag row on a Cluster: the primary that serves the workers'
// keys announces a proxy's address, so that its replica (which follows the announced
// address) replicates through the proxy while the Lockers' clients dial the primary
// directly; the proxy black-holes for lagFor, then the primary is killed and its lagging
// replica promoted. See the Sentinel row for why the holds and the TTL are long.
func clusterLag(sync bool) func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		cfg := failoverConfig(sync)
		var primary, replica *redistest.Server
		var link *redistest.Proxy
		w := newWorldOn(t, cfg, func(w *world) {
			w.cluster = redistest.StartCluster(w.tb, redistest.ClusterNodeTimeout(clusterNodeTimeout))
			primary = w.cluster.Primaries()[0]
			replica = w.cluster.ReplicasOf(primary)[0]
			link = redistest.NewProxy(w.tb, primary.Addr())
			proxied, direct := link.Addr(), primary.Addr()
			w.dialTo = func(addr string) string {
				if addr == proxied {
					return direct
				}
				return addr
			}
			w.announce(primary, replica, link)
		})
		keys := w.keysOn(primary, "lag", 4*lagWorkers*sc.workers)
		w.addNode("a", false)
		w.addNode("b", false)
		rec := w.addIdle("recovery")
		// A Cluster promotes a second later than the sentinels do: longer holds keep
		// leases granted during the lag running past the promotion.
		stop := w.run(load{Keys: keys, Workers: lagWorkers * sc.workers, AcquireMin: time.Second, AcquireMax: 3 * time.Second,
			HoldMin: 3 * time.Second, HoldMax: 6 * time.Second, Nested: true})
		time.Sleep(lagLead)
		var r recovery
		var lagging, killed chaos.Mono
		w.fault("replication black hole, then kill -9 primary", func() {
			link.Blackhole(true)
			lagging = chaos.Now()
			if sync {
				w.checkUnacknowledged(rec.locker, w.keysOn(primary, "lag-unacknowledged", 1)[0])
			}
			time.Sleep(lagFor)
			w.forget(func() {
				killed = chaos.Now()
				primary.Kill(w.tb)
				r.failover = append(r.failover, w.cluster.WaitHealthy(w.tb, deployWait))
			})
			link.Blackhole(false)
			w.probe.(*redis.ClusterClient).ReloadState(context.Background())
			if sync {
				primary.Restart(w.tb)
				w.cluster.WaitHealthy(w.tb, deployWait)
			}
		})
		if d, ok := w.resume(rec.locker, keys[0], time.Now(), 0); ok {
			r.resumed = append(r.resumed, d)
		}
		if !sync {
			primary.Restart(w.tb)
			w.cluster.WaitHealthy(w.tb, deployWait)
		}
		time.Sleep(lagTail)
		stop()
		link.Close() // before finish looks for goroutines left behind
		return w.finishLag(sc, r, lagging, killed, fmt.Sprintf("3 primaries + 3 replicas, node timeout %s, TTL %s, holds 3–6 s", clusterNodeTimeout, cfg.TTL), "node")
	}
}

// announce makes primary announce link's port as its own (its cluster bus keeps its
// port), and waits until replica replicates through link: a replica follows its
// primary's announced address.
func (w *world) announce(primary, replica *redistest.Server, link *redistest.Proxy) {
	w.t.Helper()
	_, port, _ := net.SplitHostPort(link.Addr())
	ctx := context.Background()
	pc := primary.Client(w.tb)
	defer pc.Close()
	start := chaos.Now()
	if err := pc.ConfigSet(ctx, "cluster-announce-port", port).Err(); err != nil {
		w.fatalf(setup, "", start, "CONFIG SET cluster-announce-port on %s: %v", primary, err)
	}
	rc := replica.Client(w.tb)
	defer rc.Close()
	deadline := time.Now().Add(deployWait)
	for {
		info, _ := rc.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_port:"+port+"\r\n") && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			w.fatalf(setup, "", start, "%s did not replicate through %s in %s:\n%s", replica, link.Addr(), deployWait, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// finishLag ends a replica-lag row: it counts the sections entered between lagging and
// killed (without SyncReplicas a row in which none was has proved nothing), and returns
// the row with setup described in its faults column and its notes. server names the
// killed process in the notes ("server", "node").
func (w *world) finishLag(sc scale, r recovery, lagging, killed chaos.Mono, setup, server string) (chaos.Row, []chaos.Report) {
	sync := w.cfg.SyncReplicas > 0
	granted := 0
	for _, s := range w.hist.Sections() {
		if s.Enter >= lagging && s.Enter < killed {
			granted++
		}
	}
	if !sync && granted == 0 {
		w.failf(liveness, "", lagging, "no lock was granted during the replication lag: the row proved nothing")
	}
	row, vs := w.finish("", fmt.Sprintf("replication black-holed for %s, then kill -9 of the primary, the lagging replica promoted (%s); %s",
		lagFor, setup, syncLabel(w.cfg)), sc.slack)
	what := "lagging replica promoted"
	if sync {
		what = "lagging replica promoted and the killed " + server + " back as its replica"
	}
	r.apply(&row, what, "the kill")
	i1Note(&row, w.cfg, "during the lag")
	addNote(&row, fmt.Sprintf("%d sections entered during the lag", granted))
	return row, vs
}
