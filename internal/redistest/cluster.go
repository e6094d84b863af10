package redistest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOption configures a cluster started by [StartCluster] or
// [NewCluster].
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	primaries   int
	replicas    int
	nodeTimeout time.Duration
	args        []string
}

// ClusterPrimaries sets the number of primaries, among which the slots are
// split evenly. Default: 3, the fewest with which a majority of primaries
// survives the loss of one.
func ClusterPrimaries(n int) ClusterOption {
	return func(c *clusterConfig) { c.primaries = n }
}

// ClusterReplicas sets the number of replicas of each primary. Default: 1.
func ClusterReplicas(n int) ClusterOption {
	return func(c *clusterConfig) { c.replicas = n }
}

// ClusterNodeTimeout sets cluster-node-timeout, the time after which an
// unreachable node is suspected to have failed; a failover follows about
// one to two timeouts after a primary's loss. Tests of failover want it
// small, such as one second. Default: 2s.
func ClusterNodeTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) { c.nodeTimeout = d }
}

// ClusterArgs appends extra redis-server arguments for every node, as
// [Args] does for a single server. Besides the arguments Args refuses, the
// harness owns --cluster-enabled, --cluster-config-file, --cluster-port
// and --cluster-node-timeout (set with [ClusterNodeTimeout]). Default:
// none.
func ClusterArgs(extra ...string) ClusterOption {
	return func(c *clusterConfig) { c.args = append(c.args, extra...) }
}

// clusterOwnedArgs are the arguments of a cluster node that only the harness
// sets.
var clusterOwnedArgs = slices.Concat(ownedArgs, []string{"--cluster-enabled", "--cluster-config-file", "--cluster-port", "--cluster-node-timeout"})

// Cluster is a Redis Cluster of redis-server processes on loopback ports.
// Its nodes are [Server] values, so they pause, resume, die and restart as
// single servers do. A node keeps its cluster configuration (its node ID,
// what it knows of the others) across [Server.Restart] and loses its data,
// as a node without persistence does: a restarted primary whose slots have
// moved on rejoins as a replica, a restarted replica resynchronises.
//
// The topology methods (Primaries, Replicas, ReplicasOf, PrimaryOfSlot,
// NodeForKey) answer from the view every live node last agreed on when the
// harness looked: at formation and in Failover, WaitHealthy and Reset. After
// a fault they keep answering with the old view, the one the fault was
// made in, until one of these has seen the cluster recover.
//
// Right after formation no replica has received a replication byte yet
// (offset 0): CLUSTER SLOTS leaves such a replica out and CLUSTER SHARDS
// reports it as loading, until its primary replicates something, such as
// a write or the FLUSHALL of a Reset.
type Cluster struct {
	nodes       []*Server // primaries at formation first, then replicas
	ids         []string  // node ID of each node; stable, as nodes.conf survives restarts
	nodeTimeout time.Duration
	dir         string
	ownDir      bool

	mu   sync.Mutex
	view clusterView
}

// clusterView is a topology every live node agreed on, in indexes of
// Cluster.nodes.
type clusterView struct {
	owner     []int       // slot → primary serving it
	primaries []int       // in the order of their first slot
	replicaOf map[int]int // live replica → its primary
}

// StartCluster starts a Redis Cluster on free loopback ports, with its files
// under tb.TempDir(), and registers tb.Cleanup to stop it. It returns once
// every node reports cluster_state:ok, every node maps every slot to the
// same primary and knows every node in the same role, and every replica's
// link to its primary is up. Forming a cluster takes a few seconds; tests
// that can share one use [ShareCluster].
func StartCluster(tb testing.TB, opts ...ClusterOption) *Cluster {
	tb.Helper()
	return inTestDir(tb, func(dir string) (*Cluster, error) { return startCluster(dir, false, opts) })
}

// NewCluster starts a cluster as [StartCluster] does, for code that has no
// testing.TB: a TestMain, an Example function. Its files go to a new
// temporary directory. The caller must call [Cluster.Stop], which also
// removes that directory.
func NewCluster(opts ...ClusterOption) (*Cluster, error) {
	return inOwnDir("redistest-cluster-", func(dir string) (*Cluster, error) { return startCluster(dir, true, opts) })
}

// startCluster starts the nodes under dir, which Stop removes when own is
// set, and forms the cluster. On failure no node is left running.
func startCluster(dir string, own bool, opts []ClusterOption) (*Cluster, error) {
	cfg := clusterConfig{primaries: 3, replicas: 1, nodeTimeout: 2 * time.Second}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	switch {
	case cfg.primaries < 1 || cfg.primaries > Slots:
		return nil, fmt.Errorf("redistest: ClusterPrimaries(%d): want 1 to %d", cfg.primaries, Slots)
	case cfg.replicas < 0:
		return nil, fmt.Errorf("redistest: ClusterReplicas(%d): want 0 or more", cfg.replicas)
	case cfg.nodeTimeout < time.Millisecond:
		return nil, fmt.Errorf("redistest: ClusterNodeTimeout(%v): want at least 1ms", cfg.nodeTimeout)
	}
	if err := checkArgs("ClusterArgs", cfg.args, clusterOwnedArgs); err != nil {
		return nil, err
	}
	c := &Cluster{nodeTimeout: cfg.nodeTimeout, dir: dir, ownDir: own}
	for i := range cfg.primaries * (1 + cfg.replicas) {
		base := filepath.Join(dir, "node"+strconv.Itoa(i))
		s, err := newServer(base, nil)
		if err != nil {
			return nil, err
		}
		// The configuration file lives beside the run directories, so that
		// it survives a restart while the data does not.
		s.extra = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(base, "nodes.conf"),
			"--cluster-node-timeout", strconv.FormatInt(cfg.nodeTimeout.Milliseconds(), 10),
			// A primary would wait 5 s for more replicas before a full
			// sync; here every sync has one replica to serve.
			"--repl-diskless-sync-delay", "0",
		}, cfg.args...)
		s.bus = true
		c.nodes = append(c.nodes, s)
		if err := s.start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.form(cfg.primaries, cfg.replicas); err != nil {
		err = withLogs(fmt.Errorf("redistest: form a cluster of %d primaries with %d replicas each: %w", cfg.primaries, cfg.replicas, err), c.nodes)
		c.Stop()
		return nil, err
	}
	return c, nil
}

// form makes one cluster of the fresh nodes with the server's own commands,
// as `redis-cli --cluster create` would, so that the harness needs nothing
// but redis-server, decides the layout itself (node i of the first
// `primaries` serves the i-th share of the slots, the replicas follow in
// order), and waits on exactly the conditions it states instead of parsing
// a tool's text.
func (c *Cluster) form(primaries, replicas int) error {
	do := func(s *Server, args ...string) (string, error) {
		reply, err := roundTrip(s.Addr(), queryTimeout, args...)
		if err != nil {
			return "", fmt.Errorf("%s on %s: %w", strings.Join(args, " "), s.Addr(), err)
		}
		return reply, nil
	}
	for i, s := range c.nodes {
		id, err := do(s, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		c.ids = append(c.ids, id)
		// Distinct epochs from the start spare the cluster resolving
		// collisions, which would slow the forming and could let a later
		// failover wait on it.
		if _, err := do(s, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	for i := range primaries {
		first, last := i*Slots/primaries, (i+1)*Slots/primaries-1
		if _, err := do(c.nodes[i], "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			return err
		}
	}
	// The bus port is not the default port+10000, so MEET names it.
	first := c.nodes[0]
	for _, s := range c.nodes[1:] {
		if _, err := do(s, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(first.port), strconv.Itoa(first.busPort)); err != nil {
			return err
		}
	}
	for r, s := range c.nodes[primaries:] {
		primaryID := c.ids[r/replicas]
		// A node can replicate only a primary it has heard of.
		if _, err := poll(formTimeout, func() error {
			text, err := do(s, "CLUSTER", "NODES")
			if err != nil {
				return err
			}
			nodes, err := parseClusterNodes(text)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if n.id == primaryID && n.has("master") && !n.has("handshake") {
					return nil
				}
			}
			return fmt.Errorf("%s does not know primary %s yet", s.Addr(), primaryID)
		}); err != nil {
			return err
		}
		if _, err := do(s, "CLUSTER", "REPLICATE", primaryID); err != nil {
			return err
		}
	}
	_, _, err := c.await(formTimeout, true, nil)
	return err
}

// Addrs returns the address of every node, primaries at formation first.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Nodes returns every node, primaries at formation first.
func (c *Cluster) Nodes() []*Server {
	return slices.Clone(c.nodes)
}

// Primaries returns the primaries in the order of the slots they serve.
func (c *Cluster) Primaries() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers(c.view.primaries)
}

// Replicas returns the replicas that were live, in the order of Addrs.
func (c *Cluster) Replicas() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var idx []int
	for i := range c.nodes {
		if _, ok := c.view.replicaOf[i]; ok {
			idx = append(idx, i)
		}
	}
	return c.servers(idx)
}

// ReplicasOf returns the replicas of primary that were live, in the order
// of Addrs; none when primary is not a primary.
func (c *Cluster) ReplicasOf(primary *Server) []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	var idx []int
	for i := range c.nodes {
		if p, ok := c.view.replicaOf[i]; ok && c.nodes[p] == primary {
			idx = append(idx, i)
		}
	}
	return c.servers(idx)
}

// PrimaryOfSlot returns the primary serving slot, which must be in
// [0, Slots).
func (c *Cluster) PrimaryOfSlot(slot int) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[c.view.owner[slot]]
}

// NodeForKey returns the primary serving key's slot (see [Slot]).
func (c *Cluster) NodeForKey(key string) *Server {
	return c.PrimaryOfSlot(Slot(key))
}

// servers maps indexes to nodes. c.mu must be held.
func (c *Cluster) servers(idx []int) []*Server {
	out := make([]*Server, len(idx))
	for i, j := range idx {
		out[i] = c.nodes[j]
	}
	return out
}

// ClientOptions returns the options of an ordinary cluster client for this
// cluster: every node's address as a seed and ContextTimeoutEnabled, so
// that a context deadline bounds each command; go-redis's defaults
// otherwise. [Cluster.Client] uses them; code without a testing.TB can pass
// them to redis.NewClusterClient itself.
func (c *Cluster) ClientOptions() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}
}

// Client returns a new cluster client built from [Cluster.ClientOptions],
// closed at tb's cleanup. Each opts function is applied to the options
// before the client is built, so it may change any field.
//
// A cluster client reloads its slot map on a MOVED or ASK reply and, on the
// next command, once ClusterStateReloadInterval (60 s by default) has
// passed; a failed dial does not trigger a reload. So after a killed
// primary's slots went to its replica, commands for them keep going to the
// dead address until the client is told: call ReloadState on it (it
// reloads in the background; the next commands may still fail once).
// After a coordinated [Cluster.Failover] the former primary answers MOVED
// and the client follows by itself.
func (c *Cluster) Client(tb testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	tb.Helper()
	o := c.ClientOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	rdb := redis.NewClusterClient(o)
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Failover runs CLUSTER FAILOVER on replica, a coordinated failover in
// which its primary stops taking writes until the replica has caught up
// and taken over. It returns how long it took until every live node agreed
// that replica serves the slots and its former primary, when live,
// replicates from it with its link up. It fails the test when replica is
// not a replica or the failover does not complete within a bound derived
// from the node timeout.
func (c *Cluster) Failover(tb testing.TB, replica *Server) time.Duration {
	tb.Helper()
	d, err := c.failover(replica)
	if err != nil {
		tb.Fatalf("%v", withLogs(fmt.Errorf("redistest: cluster failover to %s: %w", replica.Addr(), err), c.nodes))
	}
	return d
}

func (c *Cluster) failover(replica *Server) (time.Duration, error) {
	i := slices.Index(c.nodes, replica)
	if i < 0 {
		return 0, errors.New("not a node of this cluster")
	}
	c.mu.Lock()
	_, isReplica := c.view.replicaOf[i]
	c.mu.Unlock()
	if !isReplica {
		return 0, errors.New("not a replica")
	}
	start := time.Now()
	if _, err := roundTrip(replica.Addr(), queryTimeout, "CLUSTER", "FAILOVER"); err != nil {
		return 0, err
	}
	// A manual failover gives up after 5 s without the primary's offset
	// (CLUSTER_MF_TIMEOUT); what follows is gossip.
	_, _, err := c.await(10*time.Second+5*c.nodeTimeout, false, func(v clusterView) error {
		if p, ok := v.replicaOf[i]; ok {
			return fmt.Errorf("%s still replicates %s", replica.Addr(), c.nodes[p].Addr())
		}
		if !slices.Contains(v.primaries, i) {
			return fmt.Errorf("%s serves no slot", replica.Addr())
		}
		return nil
	})
	return time.Since(start), err
}

// WaitHealthy waits until the cluster has recovered from a fault among the
// nodes that are live (running and not paused): each reports
// cluster_state:ok, maps every slot to the same live primary and knows
// every live node in the same role, and each live replica's link to its
// primary is up. Nodes that are killed or paused are left out. Called
// right after a primary was killed, it returns once a replica has taken
// over, and how long that took from the call: the recovery time, which a
// test logs. It fails the test after timeout; a timeout of a few node
// timeouts plus some seconds for a loaded machine is generous.
func (c *Cluster) WaitHealthy(tb testing.TB, timeout time.Duration) time.Duration {
	tb.Helper()
	_, d, err := c.await(timeout, false, nil)
	if err != nil {
		tb.Fatalf("%v", withLogs(fmt.Errorf("redistest: cluster not healthy: %w", err), c.nodes))
	}
	return d
}

// Reset brings the cluster back to health and empties it, so that a test
// finds it as a fresh one: paused nodes are resumed, dead ones restarted
// (they rejoin, a former primary as a replica), then it waits as
// [StartCluster] does, and runs FLUSHALL on every primary and SCRIPT FLUSH
// on every node and waits until the replicas have applied the flush. The
// roles may differ from the first ones; Primaries and the other topology
// methods tell the current ones.
func (c *Cluster) Reset(tb testing.TB) {
	tb.Helper()
	if err := c.reset(); err != nil {
		tb.Fatalf("%v", err)
	}
}

func (c *Cluster) reset() error {
	if err := revive(c.nodes); err != nil {
		return fmt.Errorf("redistest: reset cluster: %w", err)
	}
	view, _, err := c.await(formTimeout, true, nil)
	if err != nil {
		return withLogs(fmt.Errorf("redistest: reset cluster: %w", err), c.nodes)
	}
	for _, p := range view.primaries {
		if _, err := roundTrip(c.nodes[p].Addr(), queryTimeout, "FLUSHALL"); err != nil {
			return fmt.Errorf("redistest: reset cluster: FLUSHALL on %s: %w", c.nodes[p].Addr(), err)
		}
	}
	replicaOf := make(map[*Server]*Server)
	for r, p := range view.replicaOf {
		replicaOf[c.nodes[r]] = c.nodes[p]
	}
	if err := flushScripts(c.nodes); err != nil {
		return fmt.Errorf("redistest: reset cluster: %w", err)
	}
	if err := replicated(replicaOf); err != nil {
		return withLogs(fmt.Errorf("redistest: reset cluster: %w", err), c.nodes)
	}
	return nil
}

// revive resumes the paused servers and restarts the dead ones.
func revive(servers []*Server) error {
	for _, s := range servers {
		s.mu.Lock()
		var err error
		switch {
		case s.proc == nil:
			err = s.restart()
		case s.paused:
			err = s.resume()
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// flushScripts empties the script cache of every server, so that a test
// that counts EVALSHA misses does not depend on the tests before it.
func flushScripts(servers []*Server) error {
	for _, s := range servers {
		if _, err := roundTrip(s.Addr(), queryTimeout, "SCRIPT", "FLUSH"); err != nil {
			return fmt.Errorf("SCRIPT FLUSH on %s: %w", s.Addr(), err)
		}
	}
	return nil
}

// Stop kills every node and waits until the processes are reaped; a
// cluster made by [NewCluster] also loses its directory. It is idempotent
// and needs no testing.TB ([StartCluster] registers it as cleanup). A
// stopped cluster cannot be used again.
func (c *Cluster) Stop() {
	for _, s := range c.nodes {
		s.Stop()
	}
	if c.ownDir {
		_ = os.RemoveAll(c.dir)
	}
}

// await polls until every live node agrees (every node must be live when
// all is set) and extra, when not nil, accepts the agreed view; it keeps
// that view and reports how long the wait took.
func (c *Cluster) await(timeout time.Duration, all bool, extra func(clusterView) error) (clusterView, time.Duration, error) {
	var view clusterView
	d, err := poll(timeout, func() error {
		v, err := c.observe(all)
		if err == nil && extra != nil {
			err = extra(v)
		}
		view = v
		return err
	})
	if err != nil {
		return clusterView{}, d, err
	}
	c.mu.Lock()
	c.view = view
	c.mu.Unlock()
	return view, d, nil
}

// observe asks every live node for its view of the cluster and returns it
// when they all agree and are healthy, or the first reason they are not.
func (c *Cluster) observe(all bool) (clusterView, error) {
	live := make([]bool, len(c.nodes))
	for i, s := range c.nodes {
		live[i] = s.live()
		if all && !live[i] {
			return clusterView{}, fmt.Errorf("node %s is not running", s.Addr())
		}
	}
	index := make(map[string]int, len(c.ids))
	for i, id := range c.ids {
		index[id] = i
	}
	var first []int      // owner of each slot in the first live node's view
	var firstRoles []int // role of each live node there: -1 primary, else its primary
	var firstAddr string // the first live node
	for i, s := range c.nodes {
		if !live[i] {
			continue
		}
		info, err := roundTrip(s.Addr(), queryTimeout, "CLUSTER", "INFO")
		if err != nil {
			return clusterView{}, fmt.Errorf("CLUSTER INFO on %s: %w", s.Addr(), err)
		}
		if state, _ := infoField(info, "cluster_state"); state != "ok" {
			return clusterView{}, fmt.Errorf("%s reports cluster_state:%s", s.Addr(), state)
		}
		text, err := roundTrip(s.Addr(), queryTimeout, "CLUSTER", "NODES")
		if err != nil {
			return clusterView{}, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr(), err)
		}
		entries, err := parseClusterNodes(text)
		if err != nil {
			return clusterView{}, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr(), err)
		}
		owner := slices.Repeat([]int{-1}, Slots)
		roles := slices.Repeat([]int{-2}, len(c.nodes))
		for _, e := range entries {
			j, ok := index[e.id]
			if !ok {
				return clusterView{}, fmt.Errorf("%s knows a node %s (%s) that is not one of ours yet", s.Addr(), e.id, e.flags)
			}
			for _, r := range e.slots {
				for slot := r[0]; slot <= r[1]; slot++ {
					owner[slot] = j
				}
			}
			if !live[j] {
				continue
			}
			for _, bad := range []string{"fail", "fail?", "handshake", "noaddr"} {
				if e.has(bad) {
					return clusterView{}, fmt.Errorf("%s sees %s as %s", s.Addr(), c.nodes[j].Addr(), e.flags)
				}
			}
			switch {
			case e.has("master"):
				roles[j] = -1
			case e.has("slave"):
				p, ok := index[e.primary]
				if !ok {
					return clusterView{}, fmt.Errorf("%s sees %s replicate an unknown node %s", s.Addr(), c.nodes[j].Addr(), e.primary)
				}
				roles[j] = p
			}
		}
		for j := range c.nodes {
			if live[j] && roles[j] == -2 {
				return clusterView{}, fmt.Errorf("%s does not know %s as a primary or a replica", s.Addr(), c.nodes[j].Addr())
			}
		}
		for slot, j := range owner {
			if j < 0 {
				return clusterView{}, fmt.Errorf("%s sees slot %d unassigned", s.Addr(), slot)
			}
			if !live[j] {
				return clusterView{}, fmt.Errorf("%s sees slot %d served by %s, which is down", s.Addr(), slot, c.nodes[j].Addr())
			}
		}
		if first == nil {
			first, firstRoles, firstAddr = owner, roles, s.Addr()
			continue
		}
		if slot := mismatch(first, owner); slot >= 0 {
			return clusterView{}, fmt.Errorf("%s and %s disagree on slot %d: %s against %s", firstAddr, s.Addr(), slot, c.nodes[first[slot]].Addr(), c.nodes[owner[slot]].Addr())
		}
		if j := mismatch(firstRoles, roles); j >= 0 {
			return clusterView{}, fmt.Errorf("%s and %s disagree on the role of %s", firstAddr, s.Addr(), c.nodes[j].Addr())
		}
	}
	if first == nil {
		return clusterView{}, errors.New("no node is live")
	}
	view := clusterView{owner: first, replicaOf: make(map[int]int)}
	for slot, j := range first {
		if slot == 0 || first[slot-1] != j {
			if !slices.Contains(view.primaries, j) {
				view.primaries = append(view.primaries, j)
			}
		}
	}
	for j, p := range firstRoles {
		if p < 0 {
			continue
		}
		if !live[p] || firstRoles[p] != -1 {
			return clusterView{}, fmt.Errorf("%s replicates %s, which is not a live primary", c.nodes[j].Addr(), c.nodes[p].Addr())
		}
		info, err := roundTrip(c.nodes[j].Addr(), queryTimeout, "INFO", "replication")
		if err != nil {
			return clusterView{}, fmt.Errorf("INFO replication on %s: %w", c.nodes[j].Addr(), err)
		}
		if link, _ := infoField(info, "master_link_status"); link != "up" {
			return clusterView{}, fmt.Errorf("%s reports master_link_status:%s", c.nodes[j].Addr(), link)
		}
		view.replicaOf[j] = p
	}
	return view, nil
}

// mismatch returns the first index at which a and b differ, or -1.
func mismatch(a, b []int) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id      string
	flags   string   // comma-separated: myself, master, slave, fail?, fail, handshake, noaddr, …
	primary string   // the ID of the primary of a replica, "-" for a primary
	slots   [][2]int // inclusive ranges
}

func (n clusterNode) has(flag string) bool {
	return slices.Contains(strings.Split(n.flags, ","), flag)
}

// parseClusterNodes parses the reply of CLUSTER NODES: per node, its ID,
// address, flags, primary, ping and pong times, config epoch, link state
// and the slots it serves, single or as ranges. Entries in brackets are
// slots being migrated; the slot still belongs to the node.
func parseClusterNodes(text string) ([]clusterNode, error) {
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		n := clusterNode{id: f[0], flags: f[2], primary: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b < a || b >= Slots {
				return nil, fmt.Errorf("malformed slots %q in line %q", s, line)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}
