package redistest

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelDownAfter and sentinelFailoverTimeout are the defaults the
// package's shared group runs with.
const (
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = 5 * time.Second
)

// sentinelRecovery bounds a failover of the shared group generously: the
// primary is believed down after down-after, the sentinels agree and
// promote within a few seconds more, a split vote costs twice the failover
// timeout, and a loaded machine slows all of it down.
const sentinelRecovery = 20*time.Second + sentinelDownAfter + 2*sentinelFailoverTimeout

// sharedSentinel is formed once for the tests of this package.
var sharedSentinel = ShareSentinel()

func TestSentinelForms(t *testing.T) {
	g := sharedSentinel.Get(t)
	ctx := context.Background()
	primary := g.Primary()
	if primary == nil || len(g.Replicas()) != 1 || slices.Contains(g.Replicas(), primary) {
		t.Fatalf("primary %v, replicas %v; want one of each", primary, g.Replicas())
	}
	if len(g.Sentinels()) != 3 {
		t.Fatalf("Sentinels() = %v, want 3", g.Sentinels())
	}
	for _, addr := range append(g.Sentinels(), primary.Addr(), g.Replicas()[0].Addr()) {
		if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
			t.Fatalf("address %q, want 127.0.0.1:port", addr)
		}
	}
	for _, s := range g.SentinelServers() {
		m, err := sentinelMap(s, "SENTINEL", "MASTER", g.MasterName())
		if err != nil {
			t.Fatal(err)
		}
		for field, want := range map[string]string{
			"ip": "127.0.0.1", "port": strings.TrimPrefix(primary.Addr(), "127.0.0.1:"), "flags": "master",
			"num-slaves": "1", "num-other-sentinels": "2", "quorum": "2",
			"down-after-milliseconds": "1000", "failover-timeout": "5000",
		} {
			if m[field] != want {
				t.Errorf("sentinel %s: %s = %q, want %q", s, field, m[field], want)
			}
		}
	}
	if role, _ := infoField(primary.info(t, "replication"), "role"); role != "master" {
		t.Fatalf("primary %s reports role:%s", primary, role)
	}
	if err := linked(g.Replicas(), primary); err != nil {
		t.Fatal(err)
	}
	rdb := g.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(primary.Addr(), time.Second, "GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET k on the primary = %q, %v; want the client's write", got, err)
	}
}

func TestSentinelFailover(t *testing.T) {
	g := sharedSentinel.Get(t)
	ctx := context.Background()
	rdb := g.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := g.Primary()

	start := time.Now()
	primary := g.Failover(t)
	t.Logf("SENTINEL FAILOVER: %s replaced %s after %v", primary, old, time.Since(start))
	if primary == old || g.Primary() != primary {
		t.Fatalf("Failover returned %s, Primary() = %s; want a new primary in place of %s", primary, g.Primary(), old)
	}
	if role, _ := infoField(primary.info(t, "replication"), "role"); role != "master" {
		t.Fatalf("new primary %s reports role:%s", primary, role)
	}
	start = time.Now()
	v := getEventually(t, ctx, rdb, "k")
	t.Logf("failover client reads from the new primary after %v", time.Since(start))
	if v != "v" {
		t.Fatalf("GET k after a failover = %q, want v", v)
	}
}

func TestSentinelKillPrimary(t *testing.T) {
	g := sharedSentinel.Get(t)
	ctx := context.Background()
	rdb := g.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := g.Primary()
	if err := replicated(map[*Server]*Server{g.Replicas()[0]: old}); err != nil {
		t.Fatal(err)
	}

	old.Kill(t)
	primary, d := g.WaitNewPrimary(t, old, sentinelRecovery)
	t.Logf("primary %s killed: the sentinels agree on %s after %v (down-after %v)", old, primary, d, sentinelDownAfter)
	if primary == old || g.Primary() != primary {
		t.Fatalf("WaitNewPrimary returned %s, Primary() = %s; want a new primary in place of %s", primary, g.Primary(), old)
	}
	start := time.Now()
	v := getEventually(t, ctx, rdb, "k")
	t.Logf("failover client reads from the new primary after %v more", time.Since(start))
	if v != "v" {
		t.Fatalf("GET k after the failover = %q, want the replicated v", v)
	}

	// Reset brings the killed server back as a replica of the new primary.
	g.Reset(t)
	if g.Primary() != primary {
		t.Fatalf("Primary() after Reset = %s, want %s", g.Primary(), primary)
	}
	if err := linked([]*Server{old}, primary); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
	if got, err := roundTrip(primary.Addr(), time.Second, "DBSIZE"); err != nil || got != "0" {
		t.Fatalf("DBSIZE after Reset = %s, %v; want 0", got, err)
	}
}

func TestSentinelResetRevives(t *testing.T) {
	g := sharedSentinel.Get(t)
	sentinel := g.SentinelServers()[0]
	id, err := roundTrip(sentinel.Addr(), time.Second, "SENTINEL", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	primary, replica := g.Primary(), g.Replicas()[0]
	sentinel.Kill(t)
	replica.Pause(t)
	// Two sentinels of three are a quorum.
	if got := g.Primary(); got != primary {
		t.Fatalf("Primary() with a sentinel down = %v, want %s", got, primary)
	}

	g.Reset(t)
	if !sentinel.live() || !replica.live() {
		t.Fatalf("after Reset: sentinel live %v, replica live %v; want both", sentinel.live(), replica.live())
	}
	// The restarted sentinel kept its configuration file, so its identity.
	if got, err := roundTrip(sentinel.Addr(), time.Second, "SENTINEL", "MYID"); err != nil || got != id {
		t.Fatalf("SENTINEL MYID after a restart = %q, %v; want %q", got, err, id)
	}
}

func TestSentinelOptions(t *testing.T) {
	g := StartSentinel(t, SentinelReplicas(2), SentinelDownAfter(3*time.Second), SentinelFailoverTimeout(7*time.Second),
		SentinelServerArgs("--maxmemory", "10mb"))
	if len(g.Replicas()) != 2 {
		t.Fatalf("Replicas() = %v, want 2", g.Replicas())
	}
	for _, s := range g.SentinelServers() {
		m, err := sentinelMap(s, "SENTINEL", "MASTER", g.MasterName())
		if err != nil {
			t.Fatal(err)
		}
		if m["num-slaves"] != "2" || m["down-after-milliseconds"] != "3000" || m["failover-timeout"] != "7000" {
			t.Errorf("sentinel %s: num-slaves %s, down-after-milliseconds %s, failover-timeout %s; want 2, 3000, 7000",
				s, m["num-slaves"], m["down-after-milliseconds"], m["failover-timeout"])
		}
	}
	for _, s := range append(g.Replicas(), g.Primary()) {
		got, err := s.Client(t).ConfigGet(context.Background(), "maxmemory").Result()
		if err != nil || got["maxmemory"] != "10485760" {
			t.Errorf("%s: maxmemory %v, %v; want 10485760", s, got, err)
		}
	}

	for _, bad := range []struct {
		opt  SentinelOption
		want string
	}{
		{SentinelServerArgs("--replicaof", "127.0.0.1 1"), "--replicaof"},
		{SentinelServerArgs("--bind", "0.0.0.0"), "--bind"},
		{SentinelReplicas(-1), "SentinelReplicas(-1)"},
		{SentinelDownAfter(0), "SentinelDownAfter(0s)"},
		{SentinelFailoverTimeout(0), "SentinelFailoverTimeout(0s)"},
	} {
		msg := expectFatal(t, func(tb testing.TB) { StartSentinel(tb, bad.opt) })
		if !strings.Contains(msg, bad.want) {
			t.Errorf("message %q does not name %s", msg, bad.want)
		}
	}
}

// getEventually reads key through rdb until it answers, within
// sentinelRecovery: the client learns of the new primary from the
// sentinels' announcement or when it asks them again.
func getEventually(t *testing.T, ctx context.Context, rdb *redis.Client, key string) string {
	t.Helper()
	var v string
	if _, err := poll(sentinelRecovery, func() error {
		try, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		var err error
		v, err = rdb.Get(try, key).Result()
		return err
	}); err != nil {
		t.Fatalf("GET %s through the sentinels: %v", key, err)
	}
	return v
}
