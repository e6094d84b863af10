package main

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestScriptCommandsReplayTheScripts: the scripts/commands row calls, per pair, exactly
// the commands guardkit's scripts call on the scenario's path (counted by the server, by
// command), and writes a release record of a size the scripts' takes. A recording that
// missed a call, or replayed one twice, would fail here. It runs on a server of its own:
// the counts must be the pair's alone.
func TestScriptCommandsReplayTheScripts(t *testing.T) {
	srv, err := startServer()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := libConfig{addr: srv.addr, ttl: 10 * time.Second}
	real, err := newScriptsLib(nil)(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	replayed, err := newScriptsCommands(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer replayed.Close()
	c := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer c.Close()

	// counts runs n pairs of l on key after as many to warm it, and returns the commands
	// the server ran for them, by command, the scripts themselves left out.
	counts := func(l Lib, key string, n int) map[string]int64 {
		t.Helper()
		pair := func() {
			le, err := l.TryLock(ctx, key)
			if err == nil {
				err = le.Unlock(ctx)
			}
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
		}
		for range recordPairs {
			pair()
		}
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for range n {
			pair()
		}
		s, err := snapshot(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for name, calls := range s.calls {
			if name != "evalsha" && name != "eval" && name != "config|resetstat" && name != "info" && name != "script|load" {
				out[name] = calls
			}
		}
		return out
	}
	want, got := counts(real, "cmds:real", 10), counts(replayed, "cmds:replayed", 10)
	if len(want) == 0 || !maps.Equal(got, want) {
		t.Fatalf("the replay ran %v per 10 pairs, the scripts %v", got, want)
	}
	if want["hmget"] != 20 || want["hset"] != 20 {
		t.Fatalf("the scripts ran %v per 10 pairs, want an HMGET and an HSET each way: the scenario's path changed", want)
	}
	x1, err := c.HGet(ctx, "cmds:real", "#x").Result()
	if err != nil {
		t.Fatal(err)
	}
	x2, err := c.HGet(ctx, "cmds:replayed", "#x").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The scripts' record grows to 800 bytes, is cut to the newest 400 and grows again
	// (fence.lua's noted): the replay's is one of those sizes, recorded after 40 pairs.
	for _, x := range []string{x1, x2} {
		if len(x) < 300 || len(x) > 840 || !strings.HasPrefix(x, ":") {
			t.Fatalf("release records: the scripts' %d bytes, the replay's %d (%.20q…), want 300 to 840", len(x1), len(x2), x2)
		}
	}
}
