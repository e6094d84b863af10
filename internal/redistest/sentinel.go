package redistest

import (
	"errors"
	"fmt"
	"net"
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

const (
	// masterName is the name the sentinels monitor the primary under.
	masterName = "redistest"
	// sentinelCount and quorum make the smallest group that survives the
	// loss of one sentinel.
	sentinelCount = 3
	quorum        = 2
)

// SentinelOption configures a Sentinel group started by [StartSentinel] or
// [NewSentinel].
type SentinelOption func(*sentinelConfig)

type sentinelConfig struct {
	replicas        int
	downAfter       time.Duration
	failoverTimeout time.Duration
	args            []string
}

// SentinelReplicas sets the number of replicas of the primary. Default: 1.
func SentinelReplicas(n int) SentinelOption {
	return func(c *sentinelConfig) { c.replicas = n }
}

// SentinelDownAfter sets down-after-milliseconds, how long the primary must
// stay unreachable before a sentinel believes it down; a failover follows
// a second or two after. Default: 1s.
func SentinelDownAfter(d time.Duration) SentinelOption {
	return func(c *sentinelConfig) { c.downAfter = d }
}

// SentinelFailoverTimeout sets failover-timeout, which among other things
// makes a sentinel wait twice as long before it retries a failover that
// did not complete. Default: 5s.
func SentinelFailoverTimeout(d time.Duration) SentinelOption {
	return func(c *sentinelConfig) { c.failoverTimeout = d }
}

// SentinelServerArgs appends extra redis-server arguments for the primary
// and the replicas (not the sentinels), as [Args] does for a single server.
// Besides the arguments Args refuses, the harness owns --replicaof and
// --slaveof. Default: none.
func SentinelServerArgs(extra ...string) SentinelOption {
	return func(c *sentinelConfig) { c.args = append(c.args, extra...) }
}

// sentinelOwnedArgs are the arguments of a data server of a Sentinel group
// that only the harness sets.
var sentinelOwnedArgs = slices.Concat(ownedArgs, []string{"--replicaof", "--slaveof"})

// Sentinel is a primary, its replicas and three sentinels (quorum 2) that
// monitor it, all redis-server processes on loopback ports. Every process
// is a [Server], so any of them pauses, resumes, dies and restarts as a
// single server does. A sentinel keeps its configuration (its ID, what it
// knows of the group) across [Server.Restart]; a data server comes back
// empty and as a primary, which the sentinels turn into a replica after
// some seconds, as they would in production ([Sentinel.Reset] does it at
// once).
type Sentinel struct {
	data            []*Server // the primary at formation first, then the replicas
	sentinels       []*Server
	failoverTimeout time.Duration
	dir             string
	ownDir          bool

	mu      sync.Mutex
	primary *Server // as the sentinels last agreed
}

// StartSentinel starts a Sentinel group on free loopback ports, with its
// files under tb.TempDir(), and registers tb.Cleanup to stop it. It returns
// once every sentinel names the same primary, which reports role:master,
// every replica replicates it with its link up, and every sentinel knows
// every replica and the other sentinels. Tests that can share a group use
// [ShareSentinel].
func StartSentinel(tb testing.TB, opts ...SentinelOption) *Sentinel {
	tb.Helper()
	return inTestDir(tb, func(dir string) (*Sentinel, error) { return startSentinel(dir, false, opts) })
}

// NewSentinel starts a Sentinel group as [StartSentinel] does, for code
// that has no testing.TB: a TestMain, an Example function. Its files go to
// a new temporary directory. The caller must call [Sentinel.Stop], which
// also removes that directory.
func NewSentinel(opts ...SentinelOption) (*Sentinel, error) {
	return inOwnDir("redistest-sentinel-", func(dir string) (*Sentinel, error) { return startSentinel(dir, true, opts) })
}

// startSentinel starts the group under dir, which Stop removes when own is
// set. On failure no process is left running.
func startSentinel(dir string, own bool, opts []SentinelOption) (*Sentinel, error) {
	cfg := sentinelConfig{replicas: 1, downAfter: time.Second, failoverTimeout: 5 * time.Second}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	switch {
	case cfg.replicas < 0:
		return nil, fmt.Errorf("redistest: SentinelReplicas(%d): want 0 or more", cfg.replicas)
	case cfg.downAfter < time.Millisecond:
		return nil, fmt.Errorf("redistest: SentinelDownAfter(%v): want at least 1ms", cfg.downAfter)
	case cfg.failoverTimeout < time.Millisecond:
		return nil, fmt.Errorf("redistest: SentinelFailoverTimeout(%v): want at least 1ms", cfg.failoverTimeout)
	}
	if err := checkArgs("SentinelServerArgs", cfg.args, sentinelOwnedArgs); err != nil {
		return nil, err
	}
	g := &Sentinel{failoverTimeout: cfg.failoverTimeout, dir: dir, ownDir: own}
	if err := g.form(cfg); err != nil {
		err = withLogs(fmt.Errorf("redistest: form a Sentinel group with %d replicas: %w", cfg.replicas, err), g.all())
		g.Stop()
		return nil, err
	}
	return g, nil
}

// form starts the data servers, attaches the replicas, then starts the
// sentinels, so that their first look at the primary finds the replicas.
func (g *Sentinel) form(cfg sentinelConfig) error {
	for i := range 1 + cfg.replicas {
		s, err := newServer(filepath.Join(g.dir, "data"+strconv.Itoa(i)), nil)
		if err != nil {
			return err
		}
		// A primary would wait 5 s for more replicas before a full sync.
		s.extra = append([]string{"--repl-diskless-sync-delay", "0"}, cfg.args...)
		g.data = append(g.data, s)
		if err := s.start(); err != nil {
			return err
		}
	}
	primary := g.data[0]
	for _, r := range g.data[1:] {
		if err := replicaOf(r, primary); err != nil {
			return err
		}
	}
	if _, err := poll(formTimeout, func() error { return linked(g.data[1:], primary) }); err != nil {
		return err
	}
	for i := range sentinelCount {
		base := filepath.Join(g.dir, "sentinel"+strconv.Itoa(i))
		if err := os.MkdirAll(base, 0o700); err != nil {
			return fmt.Errorf("create directory: %w", err)
		}
		// The sentinel rewrites this file with what it learns; it lives
		// beside the run directories, so a restarted sentinel keeps it.
		conf := filepath.Join(base, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
			"sentinel down-after-milliseconds %[1]s %[4]d\n"+
			"sentinel failover-timeout %[1]s %[5]d\n",
			masterName, primary.port, quorum, cfg.downAfter.Milliseconds(), cfg.failoverTimeout.Milliseconds())
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", conf, err)
		}
		s, err := newServer(base, nil)
		if err != nil {
			return err
		}
		s.lead = []string{conf, "--sentinel"}
		g.sentinels = append(g.sentinels, s)
		if err := s.start(); err != nil {
			return err
		}
	}
	_, err := g.awaitHealthy(formTimeout)
	return err
}

// all returns every process of the group: data servers, then sentinels.
func (g *Sentinel) all() []*Server {
	return slices.Concat(g.data, g.sentinels)
}

// MasterName returns the name the sentinels monitor the primary under, for
// redis.FailoverOptions.MasterName.
func (g *Sentinel) MasterName() string {
	return masterName
}

// Primary returns the current primary as the sentinels report it: the data
// server that a quorum of the sentinels that answer name. While they
// disagree (during a failover) or too few answer, it returns the primary
// they last agreed on when the harness looked.
func (g *Sentinel) Primary() *Server {
	votes := make(map[*Server]int)
	for _, s := range g.sentinels {
		if !s.live() {
			continue
		}
		reply, err := call(s.Addr(), queryTimeout, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterName)
		addr, ok := reply.([]any)
		if err != nil || !ok || len(addr) != 2 {
			continue
		}
		host, _ := addr[0].(string)
		port, _ := addr[1].(string)
		if d := g.dataAt(net.JoinHostPort(host, port)); d != nil {
			votes[d]++
		}
	}
	for d, n := range votes {
		if n >= quorum {
			return d
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.primary
}

// Replicas returns the data servers other than [Sentinel.Primary], live or
// not, in the order they were started.
func (g *Sentinel) Replicas() []*Server {
	p := g.Primary()
	var out []*Server
	for _, s := range g.data {
		if s != p {
			out = append(out, s)
		}
	}
	return out
}

// Sentinels returns the sentinels' addresses, for
// redis.FailoverOptions.SentinelAddrs.
func (g *Sentinel) Sentinels() []string {
	addrs := make([]string, len(g.sentinels))
	for i, s := range g.sentinels {
		addrs[i] = s.Addr()
	}
	return addrs
}

// SentinelServers returns the sentinels themselves, to pause or kill one.
func (g *Sentinel) SentinelServers() []*Server {
	return slices.Clone(g.sentinels)
}

// ClientOptions returns the options of an ordinary failover client for
// this group: the master name, the sentinels' addresses and
// ContextTimeoutEnabled, so that a context deadline bounds each command;
// go-redis's defaults otherwise. [Sentinel.Client] uses them; code without
// a testing.TB can pass them to redis.NewFailoverClient itself.
func (g *Sentinel) ClientOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: masterName, SentinelAddrs: g.Sentinels(), ContextTimeoutEnabled: true}
}

// Client returns a new failover client built from
// [Sentinel.ClientOptions], closed at tb's cleanup. Each opts function is
// applied to the options before the client is built, so it may change any
// field. The client asks the sentinels for the primary and follows their
// announcements of a new one.
func (g *Sentinel) Client(tb testing.TB, opts ...func(*redis.FailoverOptions)) *redis.Client {
	tb.Helper()
	o := g.ClientOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
	rdb := redis.NewFailoverClient(o)
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Failover runs SENTINEL FAILOVER, which promotes a replica without asking
// the other sentinels, and returns the new primary once every live
// sentinel names it and it reports role:master. The former primary stays a
// primary until the sentinels turn it into a replica, some seconds later.
// It fails the test when there is no replica to promote or the failover
// does not complete within a bound derived from the failover timeout.
func (g *Sentinel) Failover(tb testing.TB) *Server {
	tb.Helper()
	p, err := g.failover()
	if err != nil {
		tb.Fatalf("%v", withLogs(fmt.Errorf("redistest: sentinel failover: %w", err), g.all()))
	}
	return p
}

func (g *Sentinel) failover() (*Server, error) {
	old, err := g.agreed()
	if err != nil {
		return nil, err
	}
	timeout := 10*time.Second + 2*g.failoverTimeout
	// A sentinel refuses while it has no replica it trusts yet (NOGOODSLAVE)
	// or a failover runs (INPROG); both pass.
	if _, err := poll(timeout, func() error {
		var last error = errors.New("no sentinel is live")
		for _, s := range g.sentinels {
			if !s.live() {
				continue
			}
			if _, last = roundTrip(s.Addr(), queryTimeout, "SENTINEL", "FAILOVER", masterName); last == nil {
				return nil
			}
		}
		return last
	}); err != nil {
		return nil, err
	}
	p, _, err := g.awaitPrimary(timeout, old)
	return p, err
}

// WaitNewPrimary waits until every live sentinel names a primary other than
// old and that primary reports role:master, and returns it with how long
// that took from the call. Called right after the primary was killed, that
// is the recovery time, which a test logs. It fails the test after
// timeout; the down-after time plus a few seconds, plus some more for a
// loaded machine, is generous.
func (g *Sentinel) WaitNewPrimary(tb testing.TB, old *Server, timeout time.Duration) (*Server, time.Duration) {
	tb.Helper()
	p, d, err := g.awaitPrimary(timeout, old)
	if err != nil {
		tb.Fatalf("%v", withLogs(fmt.Errorf("redistest: wait for a primary other than %s: %w", old, err), g.all()))
	}
	return p, d
}

// awaitPrimary polls until the sentinels agree on a primary other than old.
func (g *Sentinel) awaitPrimary(timeout time.Duration, old *Server) (*Server, time.Duration, error) {
	var p *Server
	d, err := poll(timeout, func() error {
		var err error
		if p, err = g.agreed(); err == nil && p == old {
			err = fmt.Errorf("the sentinels still name %s", old)
		}
		return err
	})
	if err != nil {
		return nil, d, err
	}
	return p, d, nil
}

// Reset brings the group back to health and empties it, so that a test
// finds it as a fresh one: paused processes are resumed, dead ones
// restarted, data servers other than the primary the sentinels name are
// made its replicas, then it waits as [StartSentinel] does, and runs
// FLUSHALL on the primary and SCRIPT FLUSH on every data server and waits
// until the replicas have applied the flush. The primary may differ from
// the first one; [Sentinel.Primary] tells.
func (g *Sentinel) Reset(tb testing.TB) {
	tb.Helper()
	if err := g.reset(); err != nil {
		tb.Fatalf("%v", err)
	}
}

func (g *Sentinel) reset() error {
	fail := func(err error) error {
		return withLogs(fmt.Errorf("redistest: reset Sentinel group: %w", err), g.all())
	}
	if err := revive(g.all()); err != nil {
		return fail(err)
	}
	// A data server that came back is an empty primary; the sentinels would
	// demote it only after some seconds.
	primary, _, err := g.awaitPrimary(formTimeout, nil)
	if err != nil {
		return fail(err)
	}
	for _, s := range g.data {
		if s == primary {
			continue
		}
		info, err := roundTrip(s.Addr(), queryTimeout, "INFO", "replication")
		if err != nil {
			return fail(fmt.Errorf("INFO replication on %s: %w", s, err))
		}
		role, _ := infoField(info, "role")
		host, _ := infoField(info, "master_host")
		port, _ := infoField(info, "master_port")
		if role != "slave" || net.JoinHostPort(host, port) != primary.Addr() {
			if err := replicaOf(s, primary); err != nil {
				return fail(err)
			}
		}
	}
	if _, err := g.awaitHealthy(formTimeout); err != nil {
		return fail(err)
	}
	if _, err := roundTrip(primary.Addr(), queryTimeout, "FLUSHALL"); err != nil {
		return fail(fmt.Errorf("FLUSHALL on %s: %w", primary, err))
	}
	if err := flushScripts(g.data); err != nil {
		return fail(err)
	}
	replicas := make(map[*Server]*Server)
	for _, s := range g.data {
		if s != primary {
			replicas[s] = primary
		}
	}
	if err := replicated(replicas); err != nil {
		return fail(err)
	}
	return nil
}

// Stop kills every process of the group and waits until they are reaped;
// a group made by [NewSentinel] also loses its directory. It is idempotent
// and needs no testing.TB ([StartSentinel] registers it as cleanup). A
// stopped group cannot be used again.
func (g *Sentinel) Stop() {
	for _, s := range g.all() {
		s.Stop()
	}
	if g.ownDir {
		_ = os.RemoveAll(g.dir)
	}
}

// agreed returns the primary every live sentinel names, once it reports
// role:master and no sentinel is in the middle of a failover, and keeps it
// as the agreed primary.
func (g *Sentinel) agreed() (*Server, error) {
	var primary *Server
	for _, s := range g.sentinels {
		if !s.live() {
			continue
		}
		m, err := sentinelMap(s, "SENTINEL", "MASTER", masterName)
		if err != nil {
			return nil, err
		}
		if m["flags"] != "master" {
			return nil, fmt.Errorf("sentinel %s sees the primary %s:%s as %s", s, m["ip"], m["port"], m["flags"])
		}
		addr := net.JoinHostPort(m["ip"], m["port"])
		p := g.dataAt(addr)
		if p == nil {
			return nil, fmt.Errorf("sentinel %s names %s, which is none of ours", s, addr)
		}
		if primary != nil && p != primary {
			return nil, fmt.Errorf("sentinels disagree: %s against %s", primary, p)
		}
		primary = p
	}
	if primary == nil {
		return nil, errors.New("no sentinel is live")
	}
	if !primary.live() {
		return nil, fmt.Errorf("the sentinels name %s, which is down", primary)
	}
	info, err := roundTrip(primary.Addr(), queryTimeout, "INFO", "replication")
	if err != nil {
		return nil, fmt.Errorf("INFO replication on %s: %w", primary, err)
	}
	if role, _ := infoField(info, "role"); role != "master" {
		return nil, fmt.Errorf("the sentinels name %s, which reports role:%s", primary, role)
	}
	g.mu.Lock()
	g.primary = primary
	g.mu.Unlock()
	return primary, nil
}

// awaitHealthy polls until every process is live, the sentinels agree on
// the primary, every other data server replicates it with its link up, and
// every sentinel knows every replica and every other sentinel as up.
func (g *Sentinel) awaitHealthy(timeout time.Duration) (time.Duration, error) {
	return poll(timeout, func() error {
		for _, s := range g.all() {
			if !s.live() {
				return fmt.Errorf("%s is not running", s)
			}
		}
		primary, err := g.agreed()
		if err != nil {
			return err
		}
		var replicas []*Server
		for _, s := range g.data {
			if s != primary {
				replicas = append(replicas, s)
			}
		}
		if err := linked(replicas, primary); err != nil {
			return err
		}
		for _, s := range g.sentinels {
			if err := knows(s, "REPLICAS", replicas); err != nil {
				return err
			}
			var others []*Server
			for _, o := range g.sentinels {
				if o != s {
					others = append(others, o)
				}
			}
			if err := knows(s, "SENTINELS", others); err != nil {
				return err
			}
		}
		return nil
	})
}

// knows checks that sentinel s lists every one of want, under SENTINEL
// REPLICAS or SENTINEL SENTINELS, as reachable.
func knows(s *Server, what string, want []*Server) error {
	reply, err := call(s.Addr(), queryTimeout, "SENTINEL", what, masterName)
	if err != nil {
		return fmt.Errorf("SENTINEL %s on %s: %w", what, s, err)
	}
	list, _ := reply.([]any)
	flags := make(map[string]string)
	for _, item := range list {
		m := fieldMap(item)
		flags[net.JoinHostPort(m["ip"], m["port"])] = m["flags"]
	}
	for _, w := range want {
		f, ok := flags[w.Addr()]
		if !ok {
			return fmt.Errorf("sentinel %s does not list %s under %s yet", s, w, what)
		}
		for _, bad := range []string{"s_down", "o_down", "disconnected"} {
			if slices.Contains(strings.Split(f, ","), bad) {
				return fmt.Errorf("sentinel %s sees %s as %s", s, w, f)
			}
		}
	}
	return nil
}

// sentinelMap runs a SENTINEL command whose reply is a list of field names
// and values.
func sentinelMap(s *Server, args ...string) (map[string]string, error) {
	reply, err := call(s.Addr(), queryTimeout, args...)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", strings.Join(args, " "), s, err)
	}
	return fieldMap(reply), nil
}

// fieldMap turns a reply of alternating names and values into a map.
func fieldMap(reply any) map[string]string {
	list, _ := reply.([]any)
	m := make(map[string]string, len(list)/2)
	for i := 0; i+1 < len(list); i += 2 {
		k, _ := list[i].(string)
		v, _ := list[i+1].(string)
		m[k] = v
	}
	return m
}

// dataAt returns the data server listening on addr, or nil.
func (g *Sentinel) dataAt(addr string) *Server {
	for _, s := range g.data {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// replicaOf makes s a replica of primary.
func replicaOf(s, primary *Server) error {
	if _, err := roundTrip(s.Addr(), queryTimeout, "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.port)); err != nil {
		return fmt.Errorf("REPLICAOF on %s: %w", s, err)
	}
	return nil
}

// linked checks that every one of replicas replicates primary with its
// link up.
func linked(replicas []*Server, primary *Server) error {
	for _, s := range replicas {
		info, err := roundTrip(s.Addr(), queryTimeout, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", s, err)
		}
		host, _ := infoField(info, "master_host")
		port, _ := infoField(info, "master_port")
		if addr := net.JoinHostPort(host, port); addr != primary.Addr() {
			return fmt.Errorf("%s replicates %q, not %s", s, addr, primary)
		}
		if link, _ := infoField(info, "master_link_status"); link != "up" {
			return fmt.Errorf("%s reports master_link_status:%s", s, link)
		}
	}
	return nil
}
