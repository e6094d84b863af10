package guard

import (
	"context"
	"testing"
	"time"

	"github.com/guardkit/guardkit/ctxid"
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
			key := "undone-" + name
			rk, err := l.redisKeys(key, s.spec)
			if err != nil {
				t.Fatal(err)
			}
			h := &held{l: l, hk: holdKey{key: key, owner: ctxid.ID("owner-" + name), kind: s.kind}, rk: rk, s: s}
			h.boxArgs(ctx)
			run := func(sc *script, args []any) any {
				t.Helper()
				v, err := l.runScript(ctx, sc, args, true).Result()
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
			if code, err := decodeRelease(l.runScript(ctx, s.spec.release, h.releaseArgs(l.newNonce(), "late.1"), true)); err != nil || code != releaseNoUndo {
				t.Fatalf("undo of an attempt not yet run: %v, %v; want nothing to undo", code, err)
			}
			g, err := parseGranted(run(s.spec.acquire, h.acquireArgs("late.1", mannerWait)))
			if err != nil || g.acquired || holds() != "" {
				t.Fatalf("late attempt after its undo on a free lock: %+v, %v, holds %q; want it refused", g, err, holds())
			}

			// A quorum's release reaching a server before the winning attempt's copy: the
			// release names the attempt, which is then refused there.
			if _, err := decodeRelease(l.runScript(ctx, s.spec.release, append(h.releaseArgs(l.newNonce(), ""), "won.1"), true)); err != nil {
				t.Fatal(err)
			}
			g, err = parseGranted(run(s.spec.acquire, h.acquireArgs("won.1", mannerWait)))
			if err != nil || g.acquired || holds() != "" {
				t.Fatalf("the won attempt after the hold's release: %+v, %v, holds %q; want it refused", g, err, holds())
			}

			// Held by the same owner: the late attempt must not count a second hold.
			g, err = parseGranted(run(s.spec.acquire, h.acquireArgs("live.1", mannerWait)))
			if err != nil || !g.acquired {
				t.Fatalf("acquire: %+v, %v", g, err)
			}
			if _, err := decodeRelease(l.runScript(ctx, s.spec.release, h.releaseArgs(l.newNonce(), "late.2"), true)); err != nil {
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
}
