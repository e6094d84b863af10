package store

import (
	"context"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// TestRaiseLeavesTheHold: a quorum attempt whose grants reenter, on a majority, the hold
// of a section the attempt's section is in returns that holder in the grant and the
// quorum's record of the hold in Grant.Q, and writes nothing of the engine's Hold: the
// engine moves the hold to the holder and records the QuorumHold when it takes the
// grant. Its own later calls (undos, late write-backs) go as the holder.
func TestRaiseLeavesTheHold(t *testing.T) {
	q := &Quorum{nodes: make([]*Conn, 3), need: 2}
	terms := &Terms{Spec: &Spec{Acquire: script.Acquire, Release: script.Release, Renew: script.Renew},
		TTL: 10 * time.Second, Validity: 9 * time.Second, Retention: time.Hour}
	terms.Fill()
	h := &Hold{Keys: Keys{Lock: "guard:{k}", Queue: "guard:{k}:queue"}, Terms: terms,
		Section: "req/s1/s2", Ref: stayRef{}}
	h.Box("req/s1/s2", nil)
	// Both grants carry the hold's confirmed token: no write-back, no server called.
	a := &quorumAttempt{q: q, h: h, owner: h.Owner(), nonce: "n.1", proposal: 5, grants: []quorumGrant{
		{i: 0, token: 7, holds: 2, confirmed: 7, holder: "req/s1"},
		{i: 2, token: 7, holds: 2, confirmed: 7, holder: "req/s1"},
	}}
	g, hold, err := q.raise(context.Background(), a)
	switch {
	case err != nil:
		t.Fatal(err)
	case !g.Acquired || g.Token != 7 || g.Holds != 2 || g.Holder != "req/s1":
		t.Fatalf("grant %+v, want the reentry of req/s1's hold, token 7, 2 holds", g)
	case hold == nil || hold.carry.Load() != 1<<0|1<<2 || hold.nonce != "n.1":
		t.Fatalf("the quorum's record of the hold: %+v, want servers 0 and 2, nonce n.1", hold)
	case h.Owner() != "req/s1/s2" || h.Q != nil || h.Section != "req/s1/s2":
		t.Fatalf("raise wrote the engine's Hold: owner %q, Q %v, section %q", h.Owner(), h.Q, h.Section)
	case a.owner != "req/s1":
		t.Fatalf("the attempt's owner for its own later calls: %q, want the holder req/s1", a.owner)
	}
	// The attempt's undo goes as the holder, and as the section it was sent for.
	lines := q.args(NewConn(nil)).undo(h, a.owner, "n.1", func() string { return "u" })
	if len(lines) != 2 || lines[0][5] != "req/s1" || lines[1][5] != "req/s1/s2" {
		t.Fatalf("undo lines as %v and %v, want req/s1 then req/s1/s2", lines[0][5], lines[len(lines)-1][5])
	}
	// An undo of one's own hold goes once.
	if lines := q.args(NewConn(nil)).undo(h, h.Owner(), "n.2", func() string { return "u" }); len(lines) != 1 {
		t.Fatalf("%d undo lines for the section's own hold, want 1", len(lines))
	}
}

// TestAdmits: a quorum refuses the terms no majority can serve, naming the option; one
// deployment serves every kind.
func TestAdmits(t *testing.T) {
	q := &Quorum{}
	s := &Single{}
	for _, c := range []struct {
		field string
		t     Terms
	}{
		{"Fair", Terms{Spec: &Spec{Fair: true}}},
		{"Permits", Terms{Spec: &Spec{PerHolder: true}, Permits: 3}},
		{"SyncReplicas", Terms{Spec: &Spec{}, SyncReplicas: 1}},
	} {
		err := q.Admits(&c.t)
		r, ok := err.(*Refusal)
		if !ok || r.Field != c.field {
			t.Fatalf("quorum admits %s: %v, want a refusal naming it", c.field, err)
		}
		if err := s.Admits(&c.t); err != nil {
			t.Fatalf("one deployment refused %s: %v", c.field, err)
		}
	}
	if err := q.Admits(&Terms{Spec: &Spec{PerHolder: true}, Permits: 1}); err != nil {
		t.Fatalf("quorum refused a semaphore of one permit: %v", err)
	}
}
