package guard_test

import (
	"context"
	"errors"
	"os"
	"strings"
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
	if !errors.Is(err, guard.ErrLayout) || !errors.As(err, &le) || le.Found != "1" || le.Want != "4" || le.Key != "old" {
		t.Fatalf("TryAcquire of a lock the old version holds: %v; want a *LayoutError, found 1, want 4", err)
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

// TestLayout2FailsLoudly: the version before the release record (data layout 2, whose
// fence record held the release nonces) and this one never share a lock silently. A
// lock layout 2 holds gives this version's acquire and force release a *LayoutError
// naming layouts 2 and 4, and stays as it was (its own release still frees it); a lock
// this version wrote, held or released, gives layout 2's scripts their layout error
// ("GUARDKIT_LAYOUT 4 2"), never a grant or a release.
func TestLayout2FailsLoudly(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := context.Background()
	oldAcquire, oldRelease := oldScript2(t, "acquire"), oldScript2(t, "release")
	keys := func(key string) []string { return []string{lockName(key), lockName(key) + ":queue"} }
	const oldOwner = "AAAAAAAAAAAAAAAAAAAAAA/old00002"
	// Layout 2's arguments: owner, TTL ms, nonce, retention ms, manner ("2": try), Locker;
	// of a release: owner, nonce, undo nonce, retention ms, Locker, sharded, quorum attempt,
	// validity.
	oldTake := func(key string) (any, error) {
		return oldAcquire.Run(ctx, c, keys(key), oldOwner, 30000, oldOwner+".a", 10000, "2", "old-locker").Result()
	}
	oldFree := func(key string) (any, error) {
		return oldRelease.Run(ctx, c, keys(key), oldOwner, oldOwner+".r", "", 10000, "old-locker", "0", "", "").Result()
	}

	if v, err := oldTake("old"); err != nil {
		t.Fatalf("layout 2's script did not take the free lock: %v, %v", v, err)
	}
	_, err := l.TryAcquire(ctx, "old")
	var le *guard.LayoutError
	if !errors.Is(err, guard.ErrLayout) || !errors.As(err, &le) || le.Found != "2" || le.Want != "4" || le.Key != "old" {
		t.Fatalf("TryAcquire of a lock layout 2 holds: %v; want a *LayoutError, found 2, want 4", err)
	}
	if _, err := l.ForceRelease(ctx, "old"); !errors.Is(err, guard.ErrLayout) {
		t.Fatalf("ForceRelease of a lock layout 2 holds: %v; want ErrLayout", err)
	}
	if o := c.HGet(ctx, lockName("old"), "#o").Val(); o != oldOwner {
		t.Fatalf("layout 2's hold after this version's calls: holder %q, want %q", o, oldOwner)
	}
	if v, err := oldFree("old"); err != nil || v != int64(1) {
		t.Fatalf("layout 2's release of its own hold: %v, %v; want 1", v, err)
	}

	le1 := mustAcquire(t, l, ctx, "new")
	for _, call := range []func(string) (any, error){oldTake, oldFree} {
		if v, err := call("new"); err == nil || !strings.Contains(err.Error(), "GUARDKIT_LAYOUT 4 2") {
			t.Fatalf("layout 2's script on a lock this version holds: %v, %v; want its layout error", v, err)
		}
	}
	if err := le1.Err(); err != nil {
		t.Fatalf("this version's hold after layout 2's calls: %v", err)
	}
	mustRelease(t, le1)
	if v, err := oldTake("new"); err == nil || !strings.Contains(err.Error(), "GUARDKIT_LAYOUT 4 2") {
		t.Fatalf("layout 2's acquire on a lock this version released: %v, %v; want its layout error", v, err)
	}
	mustRelease(t, mustAcquire(t, l, ctx, "new"))
}

// oldScript2 returns the exclusive lock's script of data layout 2, as that version linked
// and ran it.
func oldScript2(t *testing.T, name string) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("testdata/layout2_" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(b))
}

// TestLayout3FailsLoudly: the version before the read-write lock's and the semaphore's
// holds moved into the lock hash (data layout 3, which kept their leases in a sorted set
// beside it) and this one never share a lock silently, whatever its kind. A read lock
// and an exclusive lock layout 3 holds give this version's acquire and force release a
// *LayoutError naming layouts 3 and 4, and stay as they were (layout 3's own release
// still frees them); a lock this version wrote, held or released, gives layout 3's
// scripts their layout error ("GUARDKIT_LAYOUT 4 3"), never a grant or a release.
func TestLayout3FailsLoudly(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := context.Background()
	const oldOwner = "AAAAAAAAAAAAAAAAAAAAAA/old00003"
	for _, tc := range []struct {
		kind          string
		suffix, holds string // the lock hash's name after the key, and the field of the old hold
		acquire, free string // layout 3's scripts, in testdata
		keys          func(lock string) []string
		opts          []guard.Option
		acquireTail   []any // layout 3's acquire arguments after the Locker ID
		releaseTail   []any // and its release's after the sharded flag
	}{
		{kind: "exclusive", holds: "#o", acquire: "acquire", free: "release",
			keys: func(lock string) []string { return []string{lock, lock + ":queue"} }},
		{kind: "read", suffix: ":rw", holds: oldOwner, acquire: "read_acquire", free: "read_release",
			keys:        func(lock string) []string { return []string{lock, lock + ":queue", lock + ":holders"} },
			opts:        []guard.Option{guard.Read()},
			acquireTail: []any{"0", "0"}, // limit (none), sharded flag
		},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			lock := lockName("old-"+tc.kind) + tc.suffix
			acquire, release := oldScript3(t, tc.acquire), oldScript3(t, tc.free)
			// Layout 3's arguments: owner, TTL ms, nonce, retention ms, manner ("2": try),
			// Locker[, the kinds' limit and sharded flag]; of a release: owner, nonce, undo
			// nonce, retention ms, Locker, sharded.
			oldTake := func(lock string) (any, error) {
				args := append([]any{oldOwner, 30000, oldOwner + ".a", 10000, "2", "old-locker"}, tc.acquireTail...)
				return acquire.Run(ctx, c, tc.keys(lock), args...).Result()
			}
			oldFree := func(lock string) (any, error) {
				return release.Run(ctx, c, tc.keys(lock), oldOwner, oldOwner+".r", "", 10000, "old-locker", "0").Result()
			}
			if v, err := oldTake(lock); err != nil {
				t.Fatalf("layout 3's script did not take the free lock: %v, %v", v, err)
			}
			_, err := l.TryAcquire(ctx, "old-"+tc.kind, tc.opts...)
			var le *guard.LayoutError
			if !errors.Is(err, guard.ErrLayout) || !errors.As(err, &le) || le.Found != "3" || le.Want != "4" {
				t.Fatalf("TryAcquire of a lock layout 3 holds: %v; want a *LayoutError, found 3, want 4", err)
			}
			if _, err := l.ForceRelease(ctx, "old-"+tc.kind, tc.opts...); !errors.Is(err, guard.ErrLayout) {
				t.Fatalf("ForceRelease of a lock layout 3 holds: %v; want ErrLayout", err)
			}
			if h := c.HGet(ctx, lock, tc.holds).Val(); h == "" {
				t.Fatalf("layout 3's hold after this version's calls: field %s empty, want it as it was", tc.holds)
			}
			if v, err := oldFree(lock); err != nil || v != int64(1) {
				t.Fatalf("layout 3's release of its own hold: %v, %v; want 1", v, err)
			}

			newKey := "new-" + tc.kind
			newLock := lockName(newKey) + tc.suffix
			le1 := mustAcquire(t, l, ctx, newKey, tc.opts...)
			for _, call := range []func(string) (any, error){oldTake, oldFree} {
				if v, err := call(newLock); err == nil || !strings.Contains(err.Error(), "GUARDKIT_LAYOUT 4 3") {
					t.Fatalf("layout 3's script on a lock this version holds: %v, %v; want its layout error", v, err)
				}
			}
			if err := le1.Err(); err != nil {
				t.Fatalf("this version's hold after layout 3's calls: %v", err)
			}
			mustRelease(t, le1)
			if v, err := oldTake(newLock); err == nil || !strings.Contains(err.Error(), "GUARDKIT_LAYOUT 4 3") {
				t.Fatalf("layout 3's acquire on a lock this version released: %v, %v; want its layout error", v, err)
			}
			mustRelease(t, mustAcquire(t, l, ctx, newKey, tc.opts...))
		})
	}
}

// oldScript3 returns the script of data layout 3 named name ("acquire", "read_acquire"),
// as that version linked and ran it.
func oldScript3(t *testing.T, name string) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("testdata/layout3_" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(b))
}
