package store

import (
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// leftRef is the engine's record of a held hold whose validity has left to run.
type leftRef struct{ left time.Duration }

func (leftRef) Gone() bool            { return false }
func (leftRef) Repaired(string)       {}
func (r leftRef) Left() time.Duration { return r.left }

// TestQuorumReleaseTellsFreshServers: a quorum's release tells the servers that granted
// or renewed the hold in the round its validity counts from that the lease is valid
// (release.lua's ARGV[8]: they need not read their clock, nor touch the hash's TTL), and
// tells the others nothing: a server that missed the last renewal may have let the hold
// expire before the validity runs out. A renewal decided by a majority makes its
// servers the fresh ones; one that fails leaves them as they were. A server that answers
// a round after its majority joins it, unless a later round was decided.
func TestQuorumReleaseTellsFreshServers(t *testing.T) {
	q := &Quorum{nodes: []*Conn{NewConn(nil), NewConn(nil), NewConn(nil)}, need: 2}
	terms := &Terms{Spec: &Spec{Acquire: script.Acquire, Release: script.Release, Renew: script.Renew},
		TTL: 10 * time.Second, Validity: 9 * time.Second, Retention: time.Hour}
	terms.Fill()
	ref := &leftRef{left: 5 * time.Second}
	h := &Hold{Keys: Keys{Lock: "guard:{k}", Queue: "guard:{k}:queue"}, Terms: terms, Ref: ref,
		Q: &QuorumHold{nonce: "won"}}
	h.Box("owner", nil)
	h.Q.carry.Store(0b111)
	flags := func() []any {
		rr := q.releaseLines(h, "rel")
		var got []any
		for i := range q.nodes {
			line := rr.lines[i*rr.width : (i+1)*rr.width]
			if line[len(line)-2] != "won" {
				t.Fatalf("server %d: ARGV[7] %v, want the winning attempt's nonce", i, line[len(line)-2])
			}
			got = append(got, line[len(line)-1])
		}
		return got
	}
	check := func(what string, want ...any) {
		t.Helper()
		got := flags()
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: ARGV[8] per server %q, want %q", what, got, want)
			}
		}
	}
	// Granted on servers 0 and 2 (raise stores the granting servers).
	h.Q.live.servers = 0b101
	check("granted on 0 and 2, retention covered", "2", "", "2")
	ref.left = 0
	check("validity run out", "", "", "")

	// A renewal that servers 0 and 1 confirm before it is decided.
	ref.left = 5 * time.Second
	errs := make([]error, 1)
	qr := newQuorumRenewal(q, []*Hold{h}, []int{0}, errs)
	qr.record(0, 1, 1, nil)
	check("one server renewed, undecided", "2", "", "2")
	h.Q.live.joined(0, 1) // the grant's late server
	check("a late grant", "2", "2", "2")
	h.Q.live.servers = 0b101
	qr.record(0, 0, 1, nil)
	if errs[0] != nil || qr.pending[0] {
		t.Fatalf("renewal by a majority: err %v, pending %v", errs[0], qr.pending[0])
	}
	check("renewed on 0 and 1", "2", "2", "")
	// A grant that answers late joins no more, the renewal's own late servers do.
	h.Q.live.joined(0, 2)
	check("a late grant after the renewal", "2", "2", "")
	h.Q.live.joined(qr.rounds[0], 2)
	check("a late renewal", "2", "2", "2")
	h.Q.live.servers = 0b011

	// A renewal that fails (gone on a majority) leaves the fresh servers alone.
	qr = newQuorumRenewal(q, []*Hold{h}, []int{0}, errs)
	qr.record(0, 2, 1, nil)
	qr.record(0, 0, 0, nil)
	qr.record(0, 1, 0, nil)
	if errs[0] != ErrGone {
		t.Fatalf("renewal gone on a majority: err %v, want ErrGone", errs[0])
	}
	check("after a failed renewal", "2", "2", "")

	// Valid, but the hash's retention not covered by the grant's TTL: "1".
	ref.left = time.Second
	terms.Retention = 20 * time.Second
	terms.Fill()
	check("retention not covered", "1", "1", "")
}
