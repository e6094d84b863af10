package guard_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// oldScript returns the exclusive lock's script of guardkit's first data layout (layout
// 1: a lock hash, a fence string and a queue list per lock), as the old version ran it.
func oldScript(t *testing.T, name string) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("testdata/layout1_" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(b))
}

// TestMixedLayoutsFailLoudly: a fleet that mixes the old version (data layout 1) and
// this one never makes a second lock beside the first. A lock the old version holds
// gives this version's acquire, release, renewal and force release a *LayoutError naming
// both layouts (errors.Is ErrLayout), and leaves the old hold as it is; a lock this
// version wrote is never taken by the old version's script, held or released.
func TestMixedLayoutsFailLoudly(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := context.Background()
	oldAcquire, oldRelease := oldScript(t, "acquire"), oldScript(t, "release")
	oldKeys := func(key string) []string {
		return []string{lockName(key), lockName(key) + ":fence", lockName(key) + ":queue"}
	}
	// The old script's arguments: owner, TTL ms, nonce, retention ms, manner ("2": try),
	// Locker ID.
	oldTake := func(key, owner string) []any {
		t.Helper()
		v, err := oldAcquire.Run(ctx, c, oldKeys(key), owner, 30000, owner+".n", 10000, "2", "old-locker").Result()
		if err != nil {
			t.Fatalf("the old script on %q: %v", key, err)
		}
		if r, ok := v.([]any); ok {
			return r
		}
		return []any{v}
	}
	const oldOwner = "AAAAAAAAAAAAAAAAAAAAAA/old00001"

	// The old version holds "old": this version refuses it with a typed error.
	if r := oldTake("old", oldOwner); len(r) != 1 {
		t.Fatalf("the old script did not take the free lock: %v", r)
	}
	_, err := l.TryAcquire(ctx, "old")
	var le *guard.LayoutError
	if !errors.Is(err, guard.ErrLayout) || !errors.As(err, &le) || le.Found != "1" || le.Want != "2" || le.Key != "old" {
		t.Fatalf("TryAcquire of a lock the old version holds: %v; want a *LayoutError, found 1, want 2", err)
	}
	t.Logf("the new version meets an old hold: %v", err)
	if _, err := l.ForceRelease(ctx, "old"); !errors.Is(err, guard.ErrLayout) {
		t.Fatalf("ForceRelease of a lock the old version holds: %v; want ErrLayout", err)
	}
	if n := c.HGet(ctx, lockName("old"), oldOwner).Val(); n != "1" {
		t.Fatalf("the old hold after the new version's calls: count %q, want it left as it was", n)
	}

	// This version holds "new": the old script never takes it, nor frees it.
	le1, err := l.TryAcquire(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}
	if r := oldTake("new", oldOwner); len(r) < 2 || r[0] != int64(0) {
		t.Fatalf("the old script on a lock the new version holds: %v; want it refused", r)
	}
	if v, err := oldRelease.Run(ctx, c, oldKeys("new"), oldOwner, "r.1", "", 10000, "old-locker", "0").Int64(); err != nil || v >= 0 {
		t.Fatalf("the old release on a lock the new version holds: %v, %v; want it refused", v, err)
	}
	if err := le1.Err(); err != nil {
		t.Fatalf("the new hold after the old version's calls: %v", err)
	}
	mustRelease(t, le1)
	// Released, the lock keeps its fence record: the old script still sees it taken.
	if r := oldTake("new", oldOwner); len(r) < 2 || r[0] != int64(0) {
		t.Fatalf("the old script on a lock the new version released: %v; want it refused", r)
	}
	if c.HExists(ctx, lockName("new"), oldOwner).Val() {
		t.Fatal("the old script took a lock the new version wrote")
	}
	// And the new version takes its own lock again.
	mustRelease(t, mustAcquire(t, l, ctx, "new"))
}
