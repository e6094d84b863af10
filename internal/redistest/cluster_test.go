package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterNodeTimeout is the node timeout of the package's shared cluster.
const clusterNodeTimeout = time.Second

// clusterRecovery bounds a failover of the shared cluster generously: a
// failure is detected after a node timeout, a replica is elected within a
// second or two more, and a loaded machine may slow all of it down.
const clusterRecovery = 20*time.Second + 10*clusterNodeTimeout

// sharedCluster is formed once for the tests of this package.
var sharedCluster = ShareCluster(ClusterNodeTimeout(clusterNodeTimeout))

func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":     0x31C3, // the check value of CRC16/XMODEM
		"foo":           12182,
		"somekey":       11058,
		"foo{hash_tag}": 2515,
		"hash_tag":      2515,
		"{user1}.a":     Slot("user1"),
		"{a}{b}":        Slot("a"),
		"a{b}c}":        Slot("b"),
		"":              0,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	// Keys with empty or unclosed tags are checked against the server in
	// TestClusterKeyPlacement.
}

func TestClusterForms(t *testing.T) {
	c := sharedCluster.Get(t)
	ctx := context.Background()
	if got := len(c.Addrs()); got != 6 {
		t.Fatalf("%d nodes, want 3 primaries + 3 replicas", got)
	}
	for _, addr := range c.Addrs() {
		if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
			t.Fatalf("node address %q, want 127.0.0.1:port", addr)
		}
	}
	primaries := c.Primaries()
	if len(primaries) != 3 || len(c.Replicas()) != 3 {
		t.Fatalf("primaries %v, replicas %v; want 3 and 3", primaries, c.Replicas())
	}
	for _, p := range primaries {
		if got := c.ReplicasOf(p); len(got) != 1 {
			t.Fatalf("ReplicasOf(%s) = %v, want one replica", p, got)
		}
	}

	// Every node, read by go-redis's own parser, says what the harness says.
	for _, node := range c.Nodes() {
		rdb := node.Client(t)
		info, err := rdb.ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for field, want := range map[string]string{
			"cluster_state": "ok", "cluster_known_nodes": "6", "cluster_size": "3",
			"cluster_slots_assigned": "16384", "cluster_slots_ok": "16384",
		} {
			if got, _ := infoField(info, field); got != want {
				t.Errorf("%s: %s:%s, want %s", node, field, got, want)
			}
		}
		// CLUSTER SHARDS rather than CLUSTER SLOTS: the latter leaves out
		// a replica that has received no replication byte yet (offset 0),
		// as right after formation.
		shards, err := rdb.ClusterShards(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		covered := 0
		for _, shard := range shards {
			var primary string
			var replicas []string
			for _, n := range shard.Nodes {
				addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
				if n.Role == "master" {
					primary = addr
				} else {
					replicas = append(replicas, addr)
				}
			}
			p := c.PrimaryOfSlot(int(shard.Slots[0].Start))
			if primary != p.Addr() {
				t.Errorf("%s: shard with slots %v led by %s, harness says %s", node, shard.Slots, primary, p)
			}
			if want := addrs(c.ReplicasOf(p)); !slices.Equal(replicas, want) {
				t.Errorf("%s: replicas of %s are %v, harness says %v", node, p, replicas, want)
			}
			for _, r := range shard.Slots {
				covered += int(r.End - r.Start + 1)
				if c.PrimaryOfSlot(int(r.End)) != p {
					t.Errorf("%s: slots %d-%d on %s, harness says %s at the end", node, r.Start, r.End, p, c.PrimaryOfSlot(int(r.End)))
				}
			}
		}
		if covered != Slots {
			t.Errorf("%s: CLUSTER SHARDS covers %d slots", node, covered)
		}
		timeout, err := rdb.ConfigGet(ctx, "cluster-node-timeout").Result()
		if err != nil || timeout["cluster-node-timeout"] != "1000" {
			t.Errorf("%s: cluster-node-timeout %v, %v; want 1000", node, timeout, err)
		}
	}
	for _, r := range c.Replicas() {
		info := r.info(t, "replication")
		if port, _ := infoField(info, "master_port"); port != strconv.Itoa(primaryOf(c, r).port) {
			t.Errorf("replica %s replicates port %s, harness says %s", r, port, primaryOf(c, r))
		}
		if link, _ := infoField(info, "master_link_status"); link != "up" {
			t.Errorf("replica %s: master_link_status:%s", r, link)
		}
	}
}

func TestClusterKeyPlacement(t *testing.T) {
	c := sharedCluster.Get(t)
	ctx := context.Background()
	keys := []string{"a", "foo", "{user1}.a", "{user1}.b", "x{}{y}", "{}", "{a}{b}", "a{b",
		"snow ☃ man", "bin\x00\xff", strings.Repeat("long", 300)}
	for i := range 100 {
		keys = append(keys, "key:"+strconv.Itoa(i))
	}
	rdb := c.Client(t)
	hits := make(map[*Server]int)
	for _, key := range keys {
		slot, err := roundTrip(c.Addrs()[0], time.Second, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatal(err)
		}
		if slot != strconv.Itoa(Slot(key)) {
			t.Errorf("Slot(%q) = %d, the server says %s", key, Slot(key), slot)
		}
		if err := rdb.Set(ctx, key, "v:"+key, 0).Err(); err != nil {
			t.Fatalf("SET %q: %v", key, err)
		}
		owner := c.NodeForKey(key)
		hits[owner]++
		if got, err := roundTrip(owner.Addr(), time.Second, "GET", key); err != nil || got != "v:"+key {
			t.Errorf("GET %q on NodeForKey %s = %q, %v", key, owner, got, err)
		}
		for _, p := range c.Primaries() {
			if p == owner {
				continue
			}
			_, err := roundTrip(p.Addr(), time.Second, "GET", key)
			if want := fmt.Sprintf("MOVED %d %s", Slot(key), owner.Addr()); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("GET %q on %s: err = %v, want %s", key, p, err, want)
			}
		}
	}
	for _, p := range c.Primaries() {
		if hits[p] == 0 {
			t.Errorf("no key landed on primary %s", p)
		}
	}
}

func TestClusterKillPrimary(t *testing.T) {
	c := sharedCluster.Get(t)
	ctx := context.Background()
	const key = "{kill}k"
	rdb := c.Client(t)
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	primary := c.NodeForKey(key)
	replica := c.ReplicasOf(primary)[0]
	if err := replicated(map[*Server]*Server{replica: primary}); err != nil {
		t.Fatal(err)
	}

	primary.Kill(t)
	d := c.WaitHealthy(t, clusterRecovery)
	t.Logf("primary %s killed: replica %s serves slot %d after %v (cluster-node-timeout %v)", primary, replica, Slot(key), d, clusterNodeTimeout)
	if got := c.NodeForKey(key); got != replica {
		t.Fatalf("NodeForKey after the failover = %s, want the replica %s", got, replica)
	}
	if role, _ := infoField(replica.info(t, "replication"), "role"); role != "master" {
		t.Fatalf("promoted replica reports role:%s", role)
	}
	if slices.Contains(c.Primaries(), primary) || slices.Contains(c.Replicas(), primary) {
		t.Fatalf("the killed node is still listed: primaries %v, replicas %v", c.Primaries(), c.Replicas())
	}

	// The client still maps the slot to the dead node; nothing tells it
	// otherwise until a MOVED reply or its periodic refresh.
	stale, cancel := context.WithTimeout(ctx, 3*time.Second)
	start := time.Now()
	v, err := rdb.Get(stale, key).Result()
	cancel()
	t.Logf("GET with the slot map from before the failover: %q, %v after %v", v, err, time.Since(start))

	rdb.ReloadState(ctx)
	start = time.Now()
	attempts := 0
	if _, err := poll(clusterRecovery, func() error {
		attempts++
		try, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		v, err = rdb.Get(try, key).Result()
		return err
	}); err != nil {
		t.Fatalf("GET after ReloadState: %v", err)
	}
	t.Logf("GET after ReloadState: %q after %v, %d attempts", v, time.Since(start), attempts)
	if v != "v" {
		t.Fatalf("GET %s after the failover = %q, want the replicated v", key, v)
	}
	if err := rdb.Set(ctx, key, "w", 0).Err(); err != nil {
		t.Fatalf("SET after the failover: %v", err)
	}
	if got, err := c.Client(t).Get(ctx, key).Result(); err != nil || got != "w" {
		t.Fatalf("GET with a new client = %q, %v; want w", got, err)
	}

	// Reset brings the killed node back as a replica of the new primary and
	// leaves nothing behind.
	c.Reset(t)
	if primary.PID() == 0 {
		t.Fatal("the killed node is not running after Reset")
	}
	if !slices.Contains(c.ReplicasOf(replica), primary) {
		t.Fatalf("after Reset, replicas of %s are %v; want the former primary %s", replica, c.ReplicasOf(replica), primary)
	}
	for _, n := range c.Nodes() {
		if got, err := roundTrip(n.Addr(), time.Second, "DBSIZE"); err != nil || got != "0" {
			t.Errorf("DBSIZE on %s after Reset = %s, %v; want 0", n, got, err)
		}
	}
}

func TestClusterFailover(t *testing.T) {
	c := sharedCluster.Get(t)
	ctx := context.Background()
	const key = "{failover}k"
	rdb := c.Client(t)
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	primary := c.NodeForKey(key)
	replica := c.ReplicasOf(primary)[0]

	d := c.Failover(t, replica)
	t.Logf("CLUSTER FAILOVER to %s: done after %v", replica, d)
	if got := c.NodeForKey(key); got != replica {
		t.Fatalf("NodeForKey after the failover = %s, want %s", got, replica)
	}
	if got := c.ReplicasOf(replica); !slices.Equal(got, []*Server{primary}) {
		t.Fatalf("ReplicasOf(new primary) = %v, want the former primary %s", got, primary)
	}
	for node, want := range map[*Server]string{replica: "master", primary: "slave"} {
		if role, _ := infoField(node.info(t, "replication"), "role"); role != want {
			t.Errorf("%s reports role:%s, want %s", node, role, want)
		}
	}
	// The client's map is stale, but the former primary answers MOVED.
	start := time.Now()
	v, err := rdb.Get(ctx, key).Result()
	t.Logf("GET with the slot map from before the failover: %q, %v after %v", v, err, time.Since(start))
	if err != nil || v != "v" {
		t.Fatalf("GET after a coordinated failover = %q, %v; want v", v, err)
	}

	msg := expectFatal(t, func(tb testing.TB) { c.Failover(tb, replica) })
	if !strings.Contains(msg, "not a replica") {
		t.Fatalf("Failover to a primary: message %q", msg)
	}
}

func TestClusterWaitHealthyLeavesPausedOut(t *testing.T) {
	c := sharedCluster.Get(t)
	replica := c.Replicas()[0]
	replica.Pause(t)
	// A paused replica is left out, not waited for: WaitHealthy returns
	// although the replica cannot answer.
	c.WaitHealthy(t, clusterRecovery)
	if slices.Contains(c.Replicas(), replica) {
		t.Fatalf("Replicas() = %v lists the paused %s", c.Replicas(), replica)
	}
	c.Reset(t)
	if !replica.live() || !slices.Contains(c.Replicas(), replica) {
		t.Fatalf("after Reset: replica %s live %v, Replicas() = %v; want it resumed and listed", replica, replica.live(), c.Replicas())
	}
}

func TestClusterOptions(t *testing.T) {
	c := StartCluster(t, ClusterPrimaries(2), ClusterReplicas(0), ClusterNodeTimeout(500*time.Millisecond),
		ClusterArgs("--maxmemory", "10mb"))
	if len(c.Primaries()) != 2 || len(c.Replicas()) != 0 {
		t.Fatalf("primaries %v, replicas %v; want 2 and none", c.Primaries(), c.Replicas())
	}
	if c.PrimaryOfSlot(Slots/2-1) == c.PrimaryOfSlot(Slots/2) {
		t.Fatalf("slots %d and %d on the same primary, want the halves split", Slots/2-1, Slots/2)
	}
	for _, n := range c.Nodes() {
		got, err := n.Client(t).ConfigGet(context.Background(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if got["maxmemory"] != "10485760" || got["cluster-node-timeout"] != "500" {
			t.Errorf("%s: maxmemory %s, cluster-node-timeout %s; want 10485760 and 500", n, got["maxmemory"], got["cluster-node-timeout"])
		}
	}

	for _, bad := range []struct {
		opt  ClusterOption
		want string
	}{
		{ClusterArgs("--cluster-config-file", "x"), "--cluster-config-file"},
		{ClusterArgs("--port", "1"), "--port"},
		{ClusterPrimaries(0), "ClusterPrimaries(0)"},
		{ClusterReplicas(-1), "ClusterReplicas(-1)"},
		{ClusterNodeTimeout(0), "ClusterNodeTimeout(0s)"},
	} {
		msg := expectFatal(t, func(tb testing.TB) { StartCluster(tb, bad.opt) })
		if !strings.Contains(msg, bad.want) {
			t.Errorf("message %q does not name %s", msg, bad.want)
		}
	}
}

func TestSharedStopAndRestart(t *testing.T) {
	shared := ShareCluster(ClusterPrimaries(1), ClusterReplicas(0))
	c := shared.Get(t)
	pid, dir := c.Nodes()[0].PID(), c.dir
	shared.Stop()
	if alive(pid) {
		t.Fatalf("node pid %d still exists after Stop", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory %s after Stop: %v, want it removed", dir, err)
	}
	// The next Get starts a new cluster.
	again := shared.Get(t)
	defer shared.Stop()
	if again == c || again.Nodes()[0].PID() == 0 {
		t.Fatal("Get after Stop did not start a new cluster")
	}
	if err := again.Client(t).Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestShareReportsStartFailure(t *testing.T) {
	shared := ShareCluster(ClusterPrimaries(0))
	for range 2 {
		msg := expectFatal(t, func(tb testing.TB) { shared.Get(tb) })
		if !strings.Contains(msg, "ClusterPrimaries(0)") {
			t.Fatalf("message %q does not name the option", msg)
		}
	}
}

// primaryOf returns the primary the harness says r replicates.
func primaryOf(c *Cluster, r *Server) *Server {
	for _, p := range c.Primaries() {
		if slices.Contains(c.ReplicasOf(p), r) {
			return p
		}
	}
	return nil
}

func addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}
