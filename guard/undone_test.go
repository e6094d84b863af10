package guard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestUndoBeforeAttempt: an undo that reaches Redis before its attempt (sent on another
// connection, or queued on a server that was paused, whose backlog runs in any order)
// finds nothing to undo; the attempt must then be refused when it arrives, for every
// kind, whether the lock is free (it would take it for a caller who left) or held by
// the same owner (it would count a hold nobody releases). Without the mark the undo
// leaves in the fence, the late attempt takes the lock or adds a hold. So too for a
// quorum's release that reaches a server before the attempt that won the hold there.
func TestUndoBeforeAttempt(t *testing.T) {
	perKind(t, "undone", func(t *testing.T, ctx context.Context, l *Locker, c *redis.Client, name string, s *settings, rk redisKeys) {
		key := "undone-" + name
		h := &held{env: l.env, hk: holdKey{key: key, owner: ctxid.ID("owner-" + name), kind: s.kind}, rk: rk, s: s}
		h.boxArgs(ctx, l.labelArg(ctx, s))
		run := func(sc *script.Script, args []any) any {
			t.Helper()
			v, err := l.one().runScript(ctx, sc, args, true).Result()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		holds := func() string {
			field := string(h.hk.owner)
			if name == "write" {
				field = "#Wn"
			}
			return c.HGet(ctx, rk.lock, field).Val()
		}

		// Free lock: the undo comes first, then its attempt.
		if code, err := decodeRelease(l.one().runScript(ctx, s.spec.release, h.releaseArgs(l.newNonce(), "late.1"), true)); err != nil || code != releaseNoUndo {
			t.Fatalf("undo of an attempt not yet run: %v, %v; want nothing to undo", code, err)
		}
		g, err := parseGranted(run(s.spec.acquire, h.acquireArgs("late.1", mannerWait)))
		if err != nil || g.acquired || holds() != "" {
			t.Fatalf("late attempt after its undo on a free lock: %+v, %v, holds %q; want it refused", g, err, holds())
		}

		// A quorum's release reaching a server before the winning attempt's copy: the
		// release names the attempt, which is then refused there.
		if _, err := decodeRelease(l.one().runScript(ctx, s.spec.release, append(h.releaseArgs(l.newNonce(), ""), "won.1"), true)); err != nil {
			t.Fatal(err)
		}
		g, err = parseGranted(run(s.spec.acquire, h.acquireArgs("won.1", mannerWait)))
		if err != nil || g.acquired || holds() != "" {
			t.Fatalf("the won attempt after the hold's release: %+v, %v, holds %q; want it refused", g, err, holds())
		}

		// An attempt undone after it took the free lock, whose copy reaches the server
		// after the undo (resent after a timeout, or slowed on another connection): the
		// copy must be refused, not take the lock for a caller who left.
		if g, err := parseGranted(run(s.spec.acquire, h.acquireArgs("again.1", mannerWait))); err != nil || !g.acquired {
			t.Fatalf("acquire: %+v, %v", g, err)
		}
		if code, err := decodeRelease(l.one().runScript(ctx, s.spec.release, h.releaseArgs(l.newNonce(), "again.1"), true)); err != nil || code == releaseNoUndo || code == releaseStillHeld {
			t.Fatalf("undo of an applied attempt: %v, %v; want the hold dropped", code, err)
		}
		g, err = parseGranted(run(s.spec.acquire, h.acquireArgs("again.1", mannerWait)))
		if err != nil || g.acquired || holds() != "" {
			t.Fatalf("a copy of the attempt after its undo: %+v, %v, holds %q; want it refused", g, err, holds())
		}

		// Held by the same owner: the late attempt must not count a second hold.
		g, err = parseGranted(run(s.spec.acquire, h.acquireArgs("live.1", mannerWait)))
		if err != nil || !g.acquired {
			t.Fatalf("acquire: %+v, %v", g, err)
		}
		if _, err := decodeRelease(l.one().runScript(ctx, s.spec.release, h.releaseArgs(l.newNonce(), "late.2"), true)); err != nil {
			t.Fatal(err)
		}
		g, err = parseGranted(run(s.spec.acquire, h.acquireArgs("late.2", mannerWait)))
		if err != nil || g.acquired || holds() != "1" {
			t.Fatalf("late attempt after its undo, the owner holding: %+v, %v, holds %q; want it refused, 1 hold", g, err, holds())
		}
		// A fresh attempt of the owner still reenters.
		g, err = parseGranted(run(s.spec.acquire, h.acquireArgs("live.2", mannerWait)))
		if err != nil || !g.acquired || holds() != "2" {
			t.Fatalf("reentry: %+v, %v, holds %q; want 2 holds", g, err, holds())
		}
	})
}

// TestUndoOfSectionReentry: an attempt made in a section within the holder's reenters
// the holder's hold through Redis, counted in the holder's fields. When its reply is
// lost, the caller undoes it as its own section, not knowing the holder: the undo must
// find the holder along the section's chain and drop that count, once however often it
// is sent. Without it the holder's count stays one too high, and its last release leaves
// the lock held until the TTL runs out.
func TestUndoOfSectionReentry(t *testing.T) {
	perKind(t, "section-undo", func(t *testing.T, ctx context.Context, l *Locker, c *redis.Client, name string, s *settings, rk redisKeys) {
		key := "section-undo-" + name
		as := func(owner string) *held {
			h := &held{env: l.env, hk: holdKey{key: key, owner: ctxid.ID(owner), kind: s.kind}, rk: rk, s: s}
			h.boxArgs(ctx, l.labelArg(ctx, s))
			return h
		}
		outer, inner := as("req-"+name+"/s1"), as("req-"+name+"/s1/s2")
		holds := func() string {
			field := string(outer.hk.owner)
			if name == "write" {
				field = "#Wn"
			}
			return c.HGet(ctx, rk.lock, field).Val()
		}
		acquire := func(h *held, nonce string) granted {
			t.Helper()
			v, err := l.one().runScript(ctx, s.spec.acquire, h.acquireArgs(nonce, mannerWait), true).Result()
			if err != nil {
				t.Fatal(err)
			}
			g, err := parseGranted(v)
			if err != nil || !g.acquired {
				t.Fatalf("acquire as %s: %+v, %v", h.hk.owner, g, err)
			}
			return g
		}
		undo := func(h *held, nonce string) releaseReply {
			t.Helper()
			code, err := decodeRelease(l.one().runScript(ctx, s.spec.release, h.releaseArgs(l.newNonce(), nonce), true))
			if err != nil {
				t.Fatal(err)
			}
			return code
		}

		acquire(outer, "outer.1")
		if g := acquire(inner, "inner.1"); g.holder != outer.hk.owner || holds() != "2" {
			t.Fatalf("reentry from within: holder %q, holds %q; want %q's hold counted twice", g.holder, holds(), outer.hk.owner)
		}
		if code := undo(inner, "inner.1"); code != releaseStillHeld || holds() != "1" {
			t.Fatalf("undo of the reentry sent as the inner section: %v, holds %q; want one hold dropped, 1 left", code, holds())
		}
		// A copy of the undone attempt that reaches the server after the undo (resent
		// after a timeout, or slowed on another connection) must be refused: counted
		// anew, it would leave the holder's count one too high for good.
		v, err := l.one().runScript(ctx, s.spec.acquire, inner.acquireArgs("inner.1", mannerWait), true).Result()
		if err != nil {
			t.Fatal(err)
		}
		if g, err := parseGranted(v); err != nil || g.acquired || holds() != "1" {
			t.Fatalf("a copy of the reentry after its undo: %+v, %v, holds %q; want it refused, 1 hold", g, err, holds())
		}
		if code := undo(inner, "inner.1"); code != releaseNoUndo || holds() != "1" {
			t.Fatalf("the undo again: %v, holds %q; want nothing to undo, 1 hold", code, holds())
		}
		if code, err := decodeRelease(l.one().runScript(ctx, s.spec.release, outer.releaseArgs(l.newNonce(), ""), true)); err != nil || code == releaseStillHeld {
			t.Fatalf("the holder's release: %v, %v; want the hold ended", code, err)
		}
		if n := c.Exists(ctx, rk.lock).Val(); n != 0 && name != "fair" {
			t.Fatalf("lock hash still present after the holder's only release (holds %q)", holds())
		}
	})
}

// perKind runs test for every kind on a Locker of its own on a fresh server, with the
// kind's settings and the Redis keys of key-<kind name>.
func perKind(t *testing.T, key string, test func(t *testing.T, ctx context.Context, l *Locker, c *redis.Client, name string, s *settings, rk redisKeys)) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kinds := map[string][]Option{
		"exclusive": nil, "read": {Read()}, "write": {Write()}, "semaphore": {Permits(2)}, "fair": {Fair()},
	}
	for name, opts := range kinds {
		t.Run(name, func(t *testing.T) {
			s, err := l.callSettings(opts, "test")
			if err != nil {
				t.Fatal(err)
			}
			rk, err := l.redisKeys(key+"-"+name, s.spec)
			if err != nil {
				t.Fatal(err)
			}
			test(t, ctx, l, c, name, s, rk)
		})
	}
}
