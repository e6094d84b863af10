package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/internal/redistest"
)

// The deployments with replicas: a Redis Cluster, and one server with one replica. Their
// scenarios reuse the single-server loops (env.uncontended, env.contended); what differs
// is where the adapters connect, where keys land, and which servers' counters are read.

// Cluster layout of the cluster scenarios.
const (
	clusterPrimaries = 3
	clusterReplicas  = 1 // per primary
)

// syncReplicas is the SyncReplicas setting of the guardkit/sync-replicas variant.
var syncReplicas = struct {
	n       int
	timeout time.Duration
}{1, 100 * time.Millisecond}

// placement maps a key to the index of the primary that serves it.
type placement struct {
	owner     []int // slot → index of its primary in Primaries order
	primaries int
}

func newPlacement(c *redistest.Cluster) placement {
	ps := c.Primaries()
	p := placement{owner: make([]int, redistest.Slots), primaries: len(ps)}
	for slot := range p.owner {
		node := c.PrimaryOfSlot(slot)
		for i, s := range ps {
			if s == node {
				p.owner[slot] = i
			}
		}
	}
	return p
}

func (p placement) primaryOf(key string) int { return p.owner[redistest.Slot(key)] }

// keyFor returns a new key of kind for the i-th goroutine of a run. On a cluster the key
// is chosen so that its slot is served by primary i mod the number of primaries: the
// goroutines of a run spread evenly over all primaries, and a run with one goroutine (or
// one contended key) always uses the first primary, so that the rows of a cell are
// measured on the same server. The cluster variants store a lock under its name (raw,
// redislock) or under a hash tag of it (guardkit: the name escaped only for %, { and },
// which bench keys never hold), so the name's slot is the lock's.
func (e *env) keyFor(kind string, i int) string {
	if e.place == nil {
		return e.key(kind)
	}
	for {
		if k := e.key(kind); e.place.primaryOf(k) == i%e.place.primaries {
			return k
		}
	}
}

// infoClients returns one client per server, for INFO.
func infoClients(servers []*redistest.Server) []*redis.Client {
	cs := make([]*redis.Client, len(servers))
	for i, s := range servers {
		cs[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 1})
	}
	return cs
}

func closeClients(cs []*redis.Client) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// startClusterEnv starts a Redis Cluster of clusterPrimaries primaries with
// clusterReplicas replicas each on loopback ports and returns the env of the cluster
// scenarios, with base's durations and TTL, and the function that stops the cluster.
func startClusterEnv(base *env) (*env, func(), error) {
	c, err := redistest.NewCluster(redistest.ClusterPrimaries(clusterPrimaries), redistest.ClusterReplicas(clusterReplicas))
	if err != nil {
		return nil, nil, fmt.Errorf("bench: start a Redis Cluster: %w", err)
	}
	p := newPlacement(c)
	e := &env{cluster: c.ClientOptions().Addrs, dur: base.dur, ttl: base.ttl, place: &p,
		primaries: infoClients(c.Primaries()), replicas: infoClients(c.Replicas())}
	stop := func() {
		closeClients(e.primaries)
		closeClients(e.replicas)
		c.Stop()
	}
	// A replica that has not received a byte yet is left out of CLUSTER SLOTS: one write
	// per primary ends that before the first measurement.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pc := range e.primaries {
		if err := pc.FlushAll(ctx).Err(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("bench: FLUSHALL on a cluster primary: %w", err)
		}
	}
	if err := waitReplicated(ctx, e.primaries, clusterReplicas); err != nil {
		stop()
		return nil, nil, err
	}
	return e, stop, nil
}

// startReplicatedEnv starts one redis-server and one replica of it and returns the env
// of the replicated scenario and the function that stops both.
func startReplicatedEnv(base *env) (*env, func(), error) {
	// Without the delay the replica's first full sync starts at once instead of after
	// the default 5 s.
	primary, err := startServer("--repl-diskless-sync-delay", "0")
	if err != nil {
		return nil, nil, err
	}
	host, port, _ := net.SplitHostPort(primary.addr)
	replica, err := startServer("--replicaof", host, port)
	if err != nil {
		primary.close()
		return nil, nil, err
	}
	e := &env{addr: primary.addr, dur: base.dur, ttl: base.ttl,
		primaries: []*redis.Client{redis.NewClient(&redis.Options{Addr: primary.addr, PoolSize: 1})},
		replicas:  []*redis.Client{redis.NewClient(&redis.Options{Addr: replica.addr, PoolSize: 1})}}
	stop := func() {
		closeClients(e.primaries)
		closeClients(e.replicas)
		replica.close()
		primary.close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitReplicated(ctx, e.primaries, 1); err != nil {
		stop()
		return nil, nil, err
	}
	return e, stop, nil
}

// waitReplicated waits until every primary has n replicas in sync: online, their
// acknowledged offset at the primary's.
func waitReplicated(ctx context.Context, primaries []*redis.Client, n int) error {
	for _, pc := range primaries {
		for {
			err := inSync(ctx, pc, n)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("bench: replicas of %s not in sync: %w", pc.Options().Addr, errors.Join(err, ctx.Err()))
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// inSync checks INFO replication of a primary: n replicas online at its offset.
func inSync(ctx context.Context, c *redis.Client, n int) error {
	txt, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	var offset string
	var lines []string
	for _, l := range strings.Split(txt, "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "master_repl_offset:"); ok {
			offset = v
		}
		if strings.HasPrefix(l, "slave") && strings.Contains(l, "state=online") {
			lines = append(lines, l)
		}
	}
	if len(lines) < n {
		return fmt.Errorf("%d of %d replicas online", len(lines), n)
	}
	for _, l := range lines {
		if !strings.Contains(l, ",offset="+offset+",") {
			return fmt.Errorf("replica behind the primary's offset %s: %s", offset, l)
		}
	}
	return nil
}

// snapshotAll sums the INFO counters of servers.
func snapshotAll(ctx context.Context, servers []*redis.Client) (serverStats, error) {
	sum := serverStats{calls: make(map[string]int64), usec: make(map[string]int64)}
	for _, c := range servers {
		s, err := snapshot(ctx, c)
		if err != nil {
			return serverStats{}, fmt.Errorf("%s: %w", c.Options().Addr, err)
		}
		sum.reads += s.reads
		sum.infos += s.infos
		sum.cpu += s.cpu
		for k, v := range s.calls {
			sum.calls[k] += v
		}
		for k, v := range s.usec {
			sum.usec[k] += v
		}
	}
	return sum, nil
}

// replicaPerOp adds the replicas' share of a run, per op: what applying the replication
// stream (and, with SyncReplicas, answering the primary's acknowledgement requests) cost
// them.
func replicaPerOp(m map[string]float64, a, b counts, ops int64, suffix string) {
	if a.rep.calls == nil || ops == 0 {
		return
	}
	d := a.rep.to(b.rep)
	n := float64(ops)
	m["replica_reads_"+suffix] = float64(d.reads) / n
	m["replica_cmds_"+suffix] = float64(d.cmds) / n
	m["replica_cpu_us_"+suffix] = us(d.cpu) / n
}
