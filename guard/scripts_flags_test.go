package guard

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/internal/redistest"
)

// releaseProbe is release.lua's command line for a hold that does not exist.
func releaseProbe() []any {
	return []any{nil, nil, 3, "guard:{probe}", "guard:{probe}:fence", "guard:{probe}:q",
		"owner", "nonce.1", "", int64(60000), "locker", "0"}
}

// TestScriptsRefusedOnReplica: on a replica (a demoted primary that a pooled connection
// still reaches after a failover), Redis 7 refuses the scripts with READONLY before they
// run, where their plain form would run and answer from the replica's copy — a release
// that finds nothing there would report the lock expired while it lives on the new
// primary.
func TestScriptsRefusedOnReplica(t *testing.T) {
	primary := redistest.Start(t)
	host, port, _ := net.SplitHostPort(primary.Addr())
	replica := redistest.Start(t, redistest.Args("--replicaof", host, port))
	c := replica.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !strings.Contains(c.Info(ctx, "replication").Val(), "master_link_status:up") {
		if ctx.Err() != nil {
			t.Fatal("the replica did not connect to its primary")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var cn conn
	cn.init(c)
	for name, s := range map[string]*script.Script{"acquire": acquireScript, "release": releaseScript} {
		args := releaseProbe()
		if name == "acquire" {
			args = []any{nil, nil, 3, "guard:{probe}", "guard:{probe}:fence", "guard:{probe}:q",
				"owner", int64(30000), "nonce.2", int64(60000), mannerTry, "locker"}
		}
		if err := cn.runScript(ctx, s, args, true).Err(); !redis.HasErrorPrefix(err, "READONLY") {
			t.Fatalf("%s on a replica: %v, want a READONLY refusal", name, err)
		}
	}
	if cn.legacy.Load() {
		t.Fatal("a Redis 7 replica made the conn fall back to the plain scripts")
	}
	// What the refusal prevents: the plain release runs and reports the lock expired.
	cn.legacy.Store(true)
	code, err := decodeRelease(cn.runScript(ctx, releaseScript, releaseProbe(), true))
	if err != nil || code != releaseExpired {
		t.Fatalf("plain release on a replica: %v, %v; want it to run and report expired", code, err)
	}
}

// TestScriptsPlainFallback: a server that cannot parse the "#!lua" line (Redis 6.2; here
// miniredis, which cannot either) gets the plain scripts, for acquisitions, renewals and
// releases alike, and the Locker remembers it.
func TestScriptsPlainFallback(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	l, err := New(c, TTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	le, err := l.Acquire(ctx, "plain")
	if err != nil {
		t.Fatalf("Acquire on a server without script flags: %v", err)
	}
	if !l.one().legacy.Load() {
		t.Fatal("the Locker did not fall back to the plain scripts")
	}
	time.Sleep(500 * time.Millisecond) // renewals, every TTL/3
	if err := le.Err(); err != nil {
		t.Fatalf("lease lost on a server without script flags: %v", err)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release on a server without script flags: %v", err)
	}
}
