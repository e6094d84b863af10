package guard

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
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
		a.lateGrant(nodeReply{i: 2, v: cmd})
		if got := first.carry.Load(); got != 1<<2 {
			t.Fatalf("late grant %v: the first attempt's hold carries servers %b, want server 2", reply, got)
		}
		if got := h.qh.carry.Load(); got != 0 {
			t.Fatalf("late grant %v: the second attempt's hold carries servers %b, want none", reply, got)
		}
	}
}
