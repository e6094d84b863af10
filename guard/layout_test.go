package guard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestMixedLayoutsFailLoudly: a fleet that mixes the old version (data layout 1) and
// this one never makes a second lock beside the first. A lock the old version holds
// gives this version's acquire, release, renewal and force release a *LayoutError naming
// both layouts (errors.Is ErrLayout), and leaves the old hold as it is; a lock this
// version wrote is never taken by the old version's script, held or released.
func TestMixedLayoutsFailLoudly(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := context.Background()
	oldAcquire, oldRelease := oldScript(t, "1", "acquire"), oldScript(t, "1", "release")
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
	if !errors.Is(err, guard.ErrLayout) || !errors.As(err, &le) || le.Found != "1" || le.Want != "5" || le.Key != "old" {
		t.Fatalf("TryAcquire of a lock the old version holds: %v; want a *LayoutError, found 1, want 5", err)
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
// naming layouts 2 and 5, and stays as it was (its own release still frees it); a lock
// this version wrote, held or released, gives layout 2's scripts their layout error
// ("GUARDKIT_LAYOUT 5 2"), never a grant or a release.
func TestLayout2FailsLoudly(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := context.Background()
	oldAcquire, oldRelease := oldScript(t, "2", "acquire"), oldScript(t, "2", "release")
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
	if !errors.Is(err, guard.ErrLayout) || !errors.As(err, &le) || le.Found != "2" || le.Want != "5" || le.Key != "old" {
		t.Fatalf("TryAcquire of a lock layout 2 holds: %v; want a *LayoutError, found 2, want 5", err)
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
		if v, err := call("new"); err == nil || !strings.Contains(err.Error(), "GUARDKIT_LAYOUT 5 2") {
			t.Fatalf("layout 2's script on a lock this version holds: %v, %v; want its layout error", v, err)
		}
	}
	if err := le1.Err(); err != nil {
		t.Fatalf("this version's hold after layout 2's calls: %v", err)
	}
	mustRelease(t, le1)
	if v, err := oldTake("new"); err == nil || !strings.Contains(err.Error(), "GUARDKIT_LAYOUT 5 2") {
		t.Fatalf("layout 2's acquire on a lock this version released: %v, %v; want its layout error", v, err)
	}
	mustRelease(t, mustAcquire(t, l, ctx, "new"))
}

// TestLayout3And4FailLoudly: the versions before a share of the read-write lock and the
// semaphore packed its count, lease and nonces into one field (data layout 4), and
// before those holds moved into the lock hash (layout 3, which kept their leases in a
// sorted set beside it), never share a lock with this one silently, whatever its kind.
// A read lock and an exclusive lock an old layout holds give this version's acquire and
// force release a *LayoutError naming the old layout and 5, and stay as they were (the
// old layout's own release still frees them). Released, an old lock's hash keeps its
// fence record for the fence retention and this version refuses it until the hash
// expires; then it takes the key with a token above the old record's. A lock this version wrote, held or
// released, gives the old layout's scripts their layout error ("GUARDKIT_LAYOUT 5 4"),
// never a grant or a release. (Layout 4's exclusive lock is layout 3's but for its
// version digit: layout 3's case covers it.)
func TestLayout3And4FailLoudly(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := context.Background()
	const oldOwner = "AAAAAAAAAAAAAAAAAAAAAA/old00003"
	for _, old := range []string{"3", "4"} {
		for _, tc := range []struct {
			kind          string
			suffix, holds string // the lock hash's name after the key, and the field of the old hold
			acquire, free string // the old layout's scripts, in testdata
			keys          func(lock string) []string
			opts          []guard.Option
			acquireTail   []any // the old acquire's arguments after the Locker ID
		}{
			{kind: "exclusive", holds: "#o", acquire: "acquire", free: "release",
				keys: func(lock string) []string { return []string{lock, lock + ":queue"} }},
			{kind: "read", suffix: ":rw", holds: oldOwner, acquire: "read_acquire", free: "read_release",
				keys: func(lock string) []string {
					if old == "3" {
						return []string{lock, lock + ":queue", lock + ":holders"}
					}
					return []string{lock, lock + ":queue"}
				},
				opts:        []guard.Option{guard.Read()},
				acquireTail: []any{"0", "0"}, // limit (none), sharded flag
			},
		} {
			if old == "4" && tc.kind == "exclusive" {
				// Layout 4's exclusive scripts are layout 3's with another version digit
				// (only the kinds' shares changed): layout 3's test them, and testdata keeps
				// no copy.
				continue
			}
			t.Run("layout"+old+"/"+tc.kind, func(t *testing.T) {
				key := "old" + old + "-" + tc.kind
				lock := lockName(key) + tc.suffix
				acquire, release := oldScript(t, old, tc.acquire), oldScript(t, old, tc.free)
				// The old layouts' arguments: owner, TTL ms, nonce, retention ms, manner ("2":
				// try), Locker[, the kinds' limit and sharded flag]; of a release: owner, nonce,
				// undo nonce, retention ms, Locker, sharded.
				oldTake := func(lock string) (any, error) {
					args := append([]any{oldOwner, 30000, oldOwner + ".a", 10000, "2", "old-locker"}, tc.acquireTail...)
					return acquire.Run(ctx, c, tc.keys(lock), args...).Result()
				}
				oldFree := func(lock string) (any, error) {
					return release.Run(ctx, c, tc.keys(lock), oldOwner, oldOwner+".r", "", 10000, "old-locker", "0").Result()
				}
				if v, err := oldTake(lock); err != nil {
					t.Fatalf("layout %s's script did not take the free lock: %v, %v", old, v, err)
				}
				_, err := l.TryAcquire(ctx, key, tc.opts...)
				var le *guard.LayoutError
				if !errors.Is(err, guard.ErrLayout) || !errors.As(err, &le) || le.Found != old || le.Want != "5" {
					t.Fatalf("TryAcquire of a lock layout %s holds: %v; want a *LayoutError, found %s, want 5", old, err, old)
				}
				if _, err := l.ForceRelease(ctx, key, tc.opts...); !errors.Is(err, guard.ErrLayout) {
					t.Fatalf("ForceRelease of a lock layout %s holds: %v; want ErrLayout", old, err)
				}
				if h := c.HGet(ctx, lock, tc.holds).Val(); h == "" {
					t.Fatalf("layout %s's hold after this version's calls: field %s empty, want it as it was", old, tc.holds)
				}
				if v, err := oldFree(lock); err != nil || v != int64(1) {
					t.Fatalf("layout %s's release of its own hold: %v, %v; want 1", old, v, err)
				}
				// Released, the old hash keeps its fence record and version for the fence
				// retention: this version still refuses it (its token is the record's, in
				// the old layout), until the hash expires; then the key is free to it.
				if _, err := l.TryAcquire(ctx, key, tc.opts...); !errors.Is(err, guard.ErrLayout) {
					t.Fatalf("TryAcquire of a lock layout %s released: %v; want ErrLayout until its hash expires", old, err)
				}
				if ttl := c.PTTL(ctx, lock).Val(); ttl <= 0 {
					t.Fatalf("layout %s's released hash lives %s; want the fence retention", old, ttl)
				}
				f := c.HGet(ctx, lock, "#f").Val()
				last, err := strconv.ParseInt(f[:strings.IndexFunc(f+":", func(r rune) bool { return r < '0' || r > '9' })], 10, 64)
				if err != nil {
					t.Fatalf("layout %s's fence record %q: %v", old, f, err)
				}
				c.PExpire(ctx, lock, time.Millisecond) // its fence retention ends
				waitUntil(t, time.Second, "the old hash to expire", func() bool { return c.Exists(ctx, lock).Val() == 0 })
				le0 := mustAcquire(t, l, ctx, key, tc.opts...)
				if le0.Token() <= last {
					t.Fatalf("token after layout %s's hash expired: %d; want above its last, %d (drawn from the server clock)", old, le0.Token(), last)
				}
				mustRelease(t, le0)

				newKey := "new" + old + "-" + tc.kind
				newLock := lockName(newKey) + tc.suffix
				le1 := mustAcquire(t, l, ctx, newKey, tc.opts...)
				refused := "GUARDKIT_LAYOUT 5 " + old
				for _, call := range []func(string) (any, error){oldTake, oldFree} {
					if v, err := call(newLock); err == nil || !strings.Contains(err.Error(), refused) {
						t.Fatalf("layout %s's script on a lock this version holds: %v, %v; want %s", old, v, err, refused)
					}
				}
				if err := le1.Err(); err != nil {
					t.Fatalf("this version's hold after layout %s's calls: %v", old, err)
				}
				mustRelease(t, le1)
				if v, err := oldTake(newLock); err == nil || !strings.Contains(err.Error(), refused) {
					t.Fatalf("layout %s's acquire on a lock this version released: %v, %v; want %s", old, v, err, refused)
				}
				mustRelease(t, mustAcquire(t, l, ctx, newKey, tc.opts...))
			})
		}
	}
}

// oldScript returns the script named name ("acquire", "read_acquire") of data layout
// layout ("1" to "4"), as that version linked and ran it: guard/testdata/layout<N>_<name>.lua.
func oldScript(t *testing.T, layout, name string) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("testdata/layout" + layout + "_" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(b))
}

// TestQuorumLayoutFailsLoudly: a quorum Locker whose servers hold, on a majority, a key
// another layout wrote — what an old version's quorum hold is — fails with a
// *LayoutError naming both layouts, at once, as a Locker on one server does: never a
// wait for a lock no process of this version can take. The grants its attempt made on
// the other servers are given back. (Before, it got a *QuorumError, which a waiting
// Acquire retried until its context ended: the quorum's acquire reply carried the
// script's error inside it, unread.) An old key on a minority of the servers is no hold
// of the old version's; the attempt fails the same way when that server answers before
// a majority granted, else the majority's grant stands (store.quorumAttempt.Take).
func TestQuorumLayoutFailsLoudly(t *testing.T) {
	for old := 2; old <= 3; old++ {
		t.Run(fmt.Sprintf("%d_of_3", old), func(t *testing.T) {
			r := startQuorum(t, 3, false)
			l := r.locker(t, guard.RestartDelay(0))
			ctx := ctxTimeout(t, 20*time.Second)
			for i := range old {
				c := r.servers[i].Client(t)
				until := time.Now().Add(time.Hour).UnixMilli()
				if err := c.HSet(ctx, lockName("mixed"), "#v", "4", "#o", "old", "#e", until, "#n", 1, "#t", 1).Err(); err != nil {
					t.Fatal(err)
				}
			}
			check := func(call string, err error) {
				t.Helper()
				var le *guard.LayoutError
				if !errors.Is(err, guard.ErrLayout) || !errors.As(err, &le) || le.Found != "4" || le.Want != "5" {
					t.Fatalf("%s with %d of 3 servers on layout 4: %v; want a *LayoutError, found 4, want 5", call, old, err)
				}
			}
			_, err := l.TryAcquire(ctx, "mixed")
			check("TryAcquire", err)
			start := time.Now()
			_, err = l.Acquire(ctx, "mixed")
			check("Acquire", err)
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("Acquire took %s to fail: want at once, not a wait", d)
			}
			others := make([]int, 0, 3)
			for i := old; i < 3; i++ {
				others = append(others, i)
			}
			deadline := time.Now().Add(5 * time.Second)
			for r.holdersOn(t, "mixed", others...) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the servers without the old key still hold the lock: the attempt's grants were not given back")
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestInspectOtherLayout: what an operator reads of a lock another data layout wrote.
// Its fields mean what that layout says: read as this one's, a read lock layout 3 or 4
// holds showed free and List passed it over. Inspect and InspectKinds now fail with its
// *LayoutError, held or released (this version refuses the released hash too, for the
// fence retention), and List returns it, held or released, with that error as its Err
// and no holders, beside this layout's locks, which it reads as before.
func TestInspectOtherLayout(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := context.Background()
	const oldOwner = "AAAAAAAAAAAAAAAAAAAAAA/old00003"
	type old struct {
		layout, key string
		opts        []guard.Option
		kind        guard.Kind
		lock        string
		keys        []string
		take, free  *redis.Script
		tail        []any
	}
	var olds []old
	for _, layout := range []string{"3", "4"} {
		key := "old-read-" + layout
		lock := lockName(key) + ":rw"
		keys := []string{lock, lock + ":queue"}
		if layout == "3" {
			keys = append(keys, lock+":holders")
		}
		olds = append(olds, old{layout: layout, key: key, opts: []guard.Option{guard.Read()}, kind: guard.KindRead,
			lock: lock, keys: keys, take: oldScript(t, layout, "read_acquire"), free: oldScript(t, layout, "read_release"),
			tail: []any{"0", "0"}})
	}
	olds = append(olds, old{layout: "3", key: "old-excl-3", kind: guard.KindExclusive, lock: lockName("old-excl-3"),
		keys: []string{lockName("old-excl-3"), lockName("old-excl-3") + ":queue"},
		take: oldScript(t, "3", "acquire"), free: oldScript(t, "3", "release")})
	mine := mustAcquire(t, l, ctx, "this-layout")
	defer mustRelease(t, mine)

	wantLayout := func(what string, err error, o old) {
		t.Helper()
		var le *guard.LayoutError
		if !errors.Is(err, guard.ErrLayout) || !errors.As(err, &le) || le.Found != o.layout || le.Want != "5" || le.Key != o.key {
			t.Fatalf("%s of %q, which layout %s wrote: %v; want a *LayoutError for the key, found %s, want 5", what, o.key, o.layout, err, o.layout)
		}
	}
	for _, held := range []bool{true, false} {
		for _, o := range olds {
			args := []any{oldOwner, 30000, oldOwner + ".a", 10000, "2", "old-locker"}
			if held {
				if v, err := o.take.Run(ctx, c, o.keys, append(args, o.tail...)...).Result(); err != nil {
					t.Fatalf("layout %s's script did not take %q: %v, %v", o.layout, o.key, v, err)
				}
			} else if v, err := o.free.Run(ctx, c, o.keys, oldOwner, oldOwner+".r", "", 10000, "old-locker", "0").Result(); err != nil || v != int64(1) {
				t.Fatalf("layout %s's release of %q: %v, %v", o.layout, o.key, v, err)
			}
			_, err := l.Inspect(ctx, o.key, o.opts...)
			wantLayout(fmt.Sprintf("Inspect (held %v)", held), err, o)
			_, err = l.InspectKinds(ctx, o.key)
			wantLayout(fmt.Sprintf("InspectKinds (held %v)", held), err, o)
		}
		got := listedByKey(t, l, ctx, "")
		for _, o := range olds {
			st := got[o.key]
			if st == nil {
				t.Fatalf("List (held %v) passed over %q, which layout %s wrote", held, o.key, o.layout)
			}
			wantLayout(fmt.Sprintf("List's Err (held %v)", held), st.Err, o)
			if st.Kind != o.kind || len(st.Holders) != 0 {
				t.Fatalf("List (held %v) of %q: kind %s, holders %v; want %s and none read", held, o.key, st.Kind, st.Holders, o.kind)
			}
		}
		if st := got["this-layout"]; st == nil || st.Err != nil || len(st.Holders) != 1 || st.Holders[0].Token != mine.Token() {
			t.Fatalf("List of this layout's held lock beside old ones: %+v", st)
		}
	}
}

// TestQuorumInspectOtherLayout: on a quorum, a lock another layout wrote on a majority of
// the servers fails Inspect with its *LayoutError and List returns it with that Err; on
// one server of three, the majority's view is read from the others and that server's
// view carries the error.
func TestQuorumInspectOtherLayout(t *testing.T) {
	r := startQuorum(t, 3, false)
	l := r.locker(t, guard.RestartDelay(0))
	ctx := ctxTimeout(t, 20*time.Second)
	until := time.Now().Add(time.Hour).UnixMilli()
	for i, s := range r.servers {
		c := s.Client(t)
		if err := c.HSet(ctx, lockName("on-two"), "#v", "4", "#o", "old", "#e", until, "#n", 1, "#t", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := c.HSet(ctx, lockName("on-one"), "#v", "4", "#o", "old", "#e", until, "#n", 1, "#t", 1).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if i == 2 {
			if err := c.Del(ctx, lockName("on-two")).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err := l.Inspect(ctx, "on-two")
	var le *guard.LayoutError
	if !errors.As(err, &le) || le.Found != "4" || le.Key != "on-two" {
		t.Fatalf("Inspect of a lock layout 4 wrote on 2 of 3 servers: %v; want its *LayoutError", err)
	}
	st, err := l.Inspect(ctx, "on-one")
	if err != nil {
		t.Fatalf("Inspect of a lock layout 4 wrote on 1 of 3 servers: %v; want the majority's view", err)
	}
	if len(st.Holders) != 0 || len(st.Servers) != 3 || !errors.As(st.Servers[0].Err, &le) || st.Servers[1].Err != nil || st.Servers[2].Err != nil {
		t.Fatalf("Inspect of a lock layout 4 wrote on server 0 only: holders %v, servers %+v; want free, server 0's view its *LayoutError", st.Holders, st.Servers)
	}
	got := listedByKey(t, l, ctx, "on-*")
	if st := got["on-two"]; st == nil || !errors.As(st.Err, &le) || le.Found != "4" || len(st.Servers) != 3 {
		t.Fatalf("List of a lock layout 4 wrote on 2 of 3 servers: %+v; want it with its *LayoutError and each server's view", st)
	}
	if st := got["on-one"]; st == nil || st.Err != nil || !errors.As(st.Servers[0].Err, &le) {
		t.Fatalf("List of a lock layout 4 wrote on 1 of 3 servers: %+v; want it, the majority's view free, server 0's its *LayoutError", st)
	}
}

// listedByKey returns the locks that List(pattern) returns, through every page (listAll),
// by key.
func listedByKey(t *testing.T, l *guard.Locker, ctx context.Context, pattern string) map[string]*guard.LockState {
	t.Helper()
	got := map[string]*guard.LockState{}
	listAll(t, l, ctx, pattern, func(page []*guard.LockState) {
		for _, st := range page {
			got[st.Key] = st
		}
	})
	return got
}
