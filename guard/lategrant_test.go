package guard

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/fanout"
)

// TestLateGrantJoinsItsOwnHold: a grant of a won attempt that comes after the majority's
// joins the hold that attempt won, not the acquisition's current one. The acquisition
// may have given the first hold back (granted too late: Locker.waitAttempt) and won
// another with a later attempt, whose record a late grant of the first must not touch:
// it would count the first attempt's grant, which that attempt's undo drops, as carrying
// the second hold, and it raced with the second attempt's write of the record (the
// fault suite's "quorum of 3: a server paused > TTL" row caught that race).
func TestLateGrantJoinsItsOwnHold(t *testing.T) {
	q := &quorum{nodes: make([]*conn, 3), env: storeEnv{gone: func(*held) bool { return false }}}
	h := &held{}
	first := &quorumHold{nonce: "first"}
	a := &quorumAttempt{q: q, h: h, nonce: "first", proposal: 7, top: 7, hold: first}
	a.outcome.Store(attemptWon)
	h.qh = &quorumHold{nonce: "second"} // a later attempt of the acquisition won
	for _, reply := range [][]any{
		{int64(7)}, // a fresh grant that took the proposal, the hold's token
		{[]any{int64(1), "7", int64(2)}, "7", "7"}, // a reentry whose token is the hold's
	} {
		cmd := redis.NewCmd(context.Background())
		cmd.SetVal(reply)
		a.lateGrant(fanout.Reply{I: 2, V: cmd})
		if got := first.carry.Load(); got != 1<<2 {
			t.Fatalf("late grant %v: the first attempt's hold carries servers %b, want server 2", reply, got)
		}
		if got := h.qh.carry.Load(); got != 0 {
			t.Fatalf("late grant %v: the second attempt's hold carries servers %b, want none", reply, got)
		}
	}
}

// TestRaiseOfUndoneAttempt: a quorum's write-back of a hold's token (raise.lua) names
// the attempt that made or counted the hold, and does nothing once that attempt was
// undone on the server — for every kind, also when the owner holds the lock there again
// by a later attempt. Without the check, a late write-back of an attempt given back
// (granted too late) lowered the token of the owner's later hold there, and a reentry
// reading it got an older token than the lease's.
func TestRaiseOfUndoneAttempt(t *testing.T) {
	perKind(t, "raise", func(t *testing.T, ctx context.Context, l *Locker, c *redis.Client, name string, s *settings, rk redisKeys) {
		h := &held{env: l.env, hk: holdKey{key: "raise-" + name, owner: ctxid.ID("owner-" + name), kind: s.kind}, rk: rk, s: s}
		h.boxArgs(ctx, l.labelArg(ctx, s))
		acquire := func(nonce string) granted {
			t.Helper()
			g, err := parseGranted(l.one().runScript(ctx, s.spec.acquire, h.acquireArgs(nonce, mannerWait), true).Val())
			if err != nil || !g.acquired {
				t.Fatalf("acquire %s: %+v, %v", nonce, g, err)
			}
			return g
		}
		raise := func(top int64, nonce string) int64 {
			t.Helper()
			n, err := l.one().runScript(ctx, raiseScript, raiseArgs(h, top, nonce), true).Int64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		tokenField, confirmed := tokenFields(h)

		acquire("first.1")
		if _, err := decodeRelease(l.one().runScript(ctx, s.spec.release, h.releaseArgs(l.newNonce(), "first.1"), true)); err != nil {
			t.Fatalf("undo: %v", err)
		}
		second := acquire("second.1")
		if n := raise(1, "first.1"); n != 0 {
			t.Fatalf("write-back for the undone attempt: %d, want 0 (left alone)", n)
		}
		if got, _ := c.HGet(ctx, rk.lock, tokenField).Int64(); got != second.token {
			t.Fatalf("the later hold's token after the undone attempt's write-back: %d, want %d", got, second.token)
		}
		if n := raise(second.token, "second.1"); n != 1 {
			t.Fatalf("write-back for the hold's own attempt: %d, want 1", n)
		}
		if got, _ := c.HGet(ctx, rk.lock, confirmed).Int64(); got != second.token {
			t.Fatalf("confirmed token %d, want %d", got, second.token)
		}
	})
}
