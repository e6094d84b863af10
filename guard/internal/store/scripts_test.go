package store

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard/internal/fanout"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/internal/redistest"
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
	q := &Quorum{nodes: make([]*Conn, 3)}
	h := &Hold{Ref: stayRef{}}
	first := &QuorumHold{nonce: "first"}
	a := &quorumAttempt{q: q, h: h, nonce: "first", proposal: 7, top: 7, hold: first}
	a.outcome.Store(attemptWon)
	h.Q = &QuorumHold{nonce: "second"} // a later attempt of the acquisition won
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
		if got := h.Q.carry.Load(); got != 0 {
			t.Fatalf("late grant %v: the second attempt's hold carries servers %b, want none", reply, got)
		}
	}
}

// stayRef is the engine's record of a hold that stays its owner's.
type stayRef struct{}

func (stayRef) Gone() bool          { return false }
func (stayRef) Repaired(string)     {}
func (stayRef) Left() time.Duration { return 0 }

// TestRaiseOfUndoneAttempt: a quorum's write-back of a hold's token (raise.lua) names
// the attempt that made or counted the hold, and does nothing once that attempt was
// undone on the server — for every kind, also when the owner holds the lock there again
// by a later attempt. Without the check, a late write-back of an attempt given back
// (granted too late) lowered the token of the owner's later hold there, and a reentry
// reading it got an older token than the lease's.
func TestRaiseOfUndoneAttempt(t *testing.T) {
	perKind(t, "raise", func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string) {
		h := k.hold("owner-" + name)
		acquire := func(nonce string) script.Granted {
			t.Helper()
			g, err := script.ParseAcquire(k.cn.RunScript(ctx, k.t.Spec.Acquire, k.args.acquire(h, nonce, MannerWait), true).Val())
			if err != nil || !g.Acquired {
				t.Fatalf("acquire %s: %+v, %v", nonce, g, err)
			}
			return g
		}
		raise := func(top int64, nonce string) int64 {
			t.Helper()
			n, err := k.cn.RunScript(ctx, raiseScript, raiseArgs(h, h.Owner(), top, nonce), true).Int64()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		tokenField, confirmed := tokenFields(h, h.Owner())

		acquire("first.1")
		if _, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, k.args.release(h, k.nonce(), "first.1"), true)); err != nil {
			t.Fatalf("undo: %v", err)
		}
		second := acquire("second.1")
		if n := raise(1, "first.1"); n != 0 {
			t.Fatalf("write-back for the undone attempt: %d, want 0 (left alone)", n)
		}
		if got, _ := c.HGet(ctx, k.keys.Lock, tokenField).Int64(); got != second.Token {
			t.Fatalf("the later hold's token after the undone attempt's write-back: %d, want %d", got, second.Token)
		}
		if n := raise(second.Token, "second.1"); n != 1 {
			t.Fatalf("write-back for the hold's own attempt: %d, want 1", n)
		}
		if got, _ := c.HGet(ctx, k.keys.Lock, confirmed).Int64(); got != second.Token {
			t.Fatalf("confirmed token %d, want %d", got, second.Token)
		}
	})
}

// TestUndoBeforeAttempt: an undo that reaches Redis before its attempt (sent on another
// connection, or queued on a server that was paused, whose backlog runs in any order)
// finds nothing to undo; the attempt must then be refused when it arrives, for every
// kind, whether the lock is free (it would take it for a caller who left) or held by
// the same owner (it would count a hold nobody releases). Without the mark the undo
// leaves in the fence, the late attempt takes the lock or adds a hold. So too for a
// quorum's release that reaches a server before the attempt that won the hold there.
func TestUndoBeforeAttempt(t *testing.T) {
	perKind(t, "undone", func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string) {
		h := k.hold("owner-" + name)
		run := func(sc *script.Script, args []any) any {
			t.Helper()
			v, err := k.cn.RunScript(ctx, sc, args, true).Result()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		holds := func() string { return k.holds(ctx, c, h.Owner()) }

		// Free lock: the undo comes first, then its attempt.
		if code, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, k.args.release(h, k.nonce(), "late.1"), true)); err != nil || code != script.NoUndo {
			t.Fatalf("undo of an attempt not yet run: %v, %v; want nothing to undo", code, err)
		}
		g, err := script.ParseAcquire(run(k.t.Spec.Acquire, k.args.acquire(h, "late.1", MannerWait)))
		if err != nil || g.Acquired || holds() != "" {
			t.Fatalf("late attempt after its undo on a free lock: %+v, %v, holds %q; want it refused", g, err, holds())
		}

		// A quorum's release reaching a server before the winning attempt's copy: the
		// release names the attempt, which is then refused there.
		if _, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, append(k.args.release(h, k.nonce(), ""), "won.1"), true)); err != nil {
			t.Fatal(err)
		}
		g, err = script.ParseAcquire(run(k.t.Spec.Acquire, k.args.acquire(h, "won.1", MannerWait)))
		if err != nil || g.Acquired || holds() != "" {
			t.Fatalf("the won attempt after the hold's release: %+v, %v, holds %q; want it refused", g, err, holds())
		}

		// An attempt undone after it took the free lock, whose copy reaches the server
		// after the undo (resent after a timeout, or slowed on another connection): the
		// copy must be refused, not take the lock for a caller who left.
		if g, err := script.ParseAcquire(run(k.t.Spec.Acquire, k.args.acquire(h, "again.1", MannerWait))); err != nil || !g.Acquired {
			t.Fatalf("acquire: %+v, %v", g, err)
		}
		if code, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, k.args.release(h, k.nonce(), "again.1"), true)); err != nil || code == script.NoUndo || code == script.StillHeld {
			t.Fatalf("undo of an applied attempt: %v, %v; want the hold dropped", code, err)
		}
		g, err = script.ParseAcquire(run(k.t.Spec.Acquire, k.args.acquire(h, "again.1", MannerWait)))
		if err != nil || g.Acquired || holds() != "" {
			t.Fatalf("a copy of the attempt after its undo: %+v, %v, holds %q; want it refused", g, err, holds())
		}

		// Held by the same owner: the late attempt must not count a second hold.
		g, err = script.ParseAcquire(run(k.t.Spec.Acquire, k.args.acquire(h, "live.1", MannerWait)))
		if err != nil || !g.Acquired {
			t.Fatalf("acquire: %+v, %v", g, err)
		}
		if _, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, k.args.release(h, k.nonce(), "late.2"), true)); err != nil {
			t.Fatal(err)
		}
		g, err = script.ParseAcquire(run(k.t.Spec.Acquire, k.args.acquire(h, "late.2", MannerWait)))
		if err != nil || g.Acquired || holds() != "1" {
			t.Fatalf("late attempt after its undo, the owner holding: %+v, %v, holds %q; want it refused, 1 hold", g, err, holds())
		}
		// A fresh attempt of the owner still reenters.
		g, err = script.ParseAcquire(run(k.t.Spec.Acquire, k.args.acquire(h, "live.2", MannerWait)))
		if err != nil || !g.Acquired || holds() != "2" {
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
	perKind(t, "section-undo", func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string) {
		as := func(owner string) *Hold {
			h := k.hold(owner)
			return h
		}
		outer, inner := as("req-"+name+"/s1"), as("req-"+name+"/s1/s2")
		holds := func() string { return k.holds(ctx, c, outer.Owner()) }
		acquire := func(h *Hold, nonce string) script.Granted {
			t.Helper()
			v, err := k.cn.RunScript(ctx, k.t.Spec.Acquire, k.args.acquire(h, nonce, MannerWait), true).Result()
			if err != nil {
				t.Fatal(err)
			}
			g, err := script.ParseAcquire(v)
			if err != nil || !g.Acquired {
				t.Fatalf("acquire as %s: %+v, %v", h.Owner(), g, err)
			}
			return g
		}
		undo := func(h *Hold, nonce string) script.Released {
			t.Helper()
			code, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, k.args.release(h, k.nonce(), nonce), true))
			if err != nil {
				t.Fatal(err)
			}
			return code
		}

		acquire(outer, "outer.1")
		if g := acquire(inner, "inner.1"); g.Holder != outer.Owner() || holds() != "2" {
			t.Fatalf("reentry from within: holder %q, holds %q; want %q's hold counted twice", g.Holder, holds(), outer.Owner())
		}
		if code := undo(inner, "inner.1"); code != script.StillHeld || holds() != "1" {
			t.Fatalf("undo of the reentry sent as the inner section: %v, holds %q; want one hold dropped, 1 left", code, holds())
		}
		// A copy of the undone attempt that reaches the server after the undo (resent
		// after a timeout, or slowed on another connection) must be refused: counted
		// anew, it would leave the holder's count one too high for good.
		v, err := k.cn.RunScript(ctx, k.t.Spec.Acquire, k.args.acquire(inner, "inner.1", MannerWait), true).Result()
		if err != nil {
			t.Fatal(err)
		}
		if g, err := script.ParseAcquire(v); err != nil || g.Acquired || holds() != "1" {
			t.Fatalf("a copy of the reentry after its undo: %+v, %v, holds %q; want it refused, 1 hold", g, err, holds())
		}
		if code := undo(inner, "inner.1"); code != script.NoUndo || holds() != "1" {
			t.Fatalf("the undo again: %v, holds %q; want nothing to undo, 1 hold", code, holds())
		}
		if code, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, k.args.release(outer, k.nonce(), ""), true)); err != nil || code == script.StillHeld {
			t.Fatalf("the holder's release: %v, %v; want the hold ended", code, err)
		}
		// The hash stays, with its fence record, for the retention: no hold is left in it.
		if h := holds(); h != "" {
			t.Fatalf("the holder still holds %q after its only release", h)
		}
		if ttl := c.PTTL(ctx, k.keys.Lock).Val(); ttl <= 0 || ttl > max(k.t.TTL, k.t.Retention)+k.t.Retention/8 {
			t.Fatalf("lock hash TTL %s after the last release, want the record kept within max(TTL, retention) and an eighth of it", ttl)
		}
	})
}

// kindRig is one kind's terms, keys and script arguments on a server (see perKind).
type kindRig struct {
	t    *Terms
	keys Keys
	cn   *Conn
	args callArgs
	seq  int
}

// holds returns owner's hold count in the rig's lock, "" when it holds nothing: the
// exclusive and the fair lock keep their holder in #o and its count in #n, the write
// mode in #W and #Wn, the other kinds a field per holder.
func (k *kindRig) holds(ctx context.Context, c *redis.Client, owner string) string {
	switch {
	case k.t.Spec.Write:
		v := c.HMGet(ctx, k.keys.Lock, "#W", "#Wn").Val()
		if v[0] == owner && v[1] != nil {
			return v[1].(string)
		}
		return ""
	case k.t.Spec.PerHolder:
		n, _, _ := strings.Cut(c.HGet(ctx, k.keys.Lock, owner).Val(), " ") // "<count> <lease> <nonces>"
		return n
	}
	v := c.HMGet(ctx, k.keys.Lock, "#o", "#n").Val()
	if v[0] == owner && v[1] != nil {
		return v[1].(string)
	}
	return ""
}

// hold returns a hold of the rig's lock for owner, its arguments boxed.
func (k *kindRig) hold(owner string) *Hold {
	h := &Hold{Keys: k.keys, Terms: k.t, Section: owner}
	h.Box(owner, nil)
	return h
}

// nonce returns a fresh nonce.
func (k *kindRig) nonce() string {
	k.seq++
	return "rig." + strconv.Itoa(k.seq)
}

// kinds are the kinds' specs and Redis name suffixes, as the engine has them.
var kinds = map[string]struct {
	spec              Spec
	suffix, aux, aux2 string
	permits           int
}{
	"exclusive": {spec: Spec{Acquire: script.Acquire, Release: script.Release, Renew: script.Renew}},
	"read":      {spec: Spec{Acquire: script.ReadAcquire, Release: script.ReadRelease, Renew: script.ReadRenew, PerHolder: true}, suffix: ":rw"},
	"write":     {spec: Spec{Acquire: script.WriteAcquire, Release: script.WriteRelease, Renew: script.WriteRenew, Write: true}, suffix: ":rw"},
	"semaphore": {spec: Spec{Acquire: script.SemAcquire, Release: script.SemRelease, Renew: script.ReadRenew, PerHolder: true}, suffix: ":sem", permits: 2},
	"fair":      {spec: Spec{Acquire: script.FairAcquire, Release: script.FairRelease, Renew: script.Renew, Fair: true}, suffix: ":fair", aux: ":owners", aux2: ":places"},
}

// perKind runs test for every kind on a fresh server, with the kind's terms and the
// Redis keys of key-<kind name>.
func perKind(t *testing.T, key string, test func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string)) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cn := NewConn(c)
	for name, kind := range kinds {
		t.Run(name, func(t *testing.T) {
			spec := kind.spec
			terms := &Terms{Spec: &spec, TTL: 30 * time.Second, Validity: 29 * time.Second, Retention: time.Hour, Permits: kind.permits}
			terms.Fill()
			lock := "guard:{" + key + "-" + name + "}" + kind.suffix
			keys := Keys{Lock: lock, Queue: lock + ":queue"}
			if kind.aux != "" {
				keys.Aux = lock + kind.aux
			}
			if kind.aux2 != "" {
				keys.Aux2 = lock + kind.aux2
			}
			test(t, ctx, &kindRig{t: terms, keys: keys, cn: cn, args: callArgs{id: "locker", conn: cn}}, c, name)
		})
	}
}

// releaseProbe is release.lua's command line for a hold that does not exist.
func releaseProbe() []any {
	return []any{nil, nil, 3, "guard:{probe}", "guard:{probe}:fence", "guard:{probe}:q",
		"owner", "nonce.1", "", int64(60000), "locker", "0"}
}

// TestScriptsRefusedOnReplica: on a replica (a demoted primary that a pooled connection
// still reaches after a failover), Redis 7 refuses the scripts with READONLY before they
// run, where their plain form would run and answer from the replica's copy — a release
// that finds nothing there would report the lock expired while it lives on the new
// primary.
func TestScriptsRefusedOnReplica(t *testing.T) {
	primary := redistest.Start(t)
	host, port, _ := net.SplitHostPort(primary.Addr())
	replica := redistest.Start(t, redistest.Args("--replicaof", host, port))
	c := replica.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !strings.Contains(c.Info(ctx, "replication").Val(), "master_link_status:up") {
		if ctx.Err() != nil {
			t.Fatal("the replica did not connect to its primary")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cn := NewConn(c)
	for name, s := range map[string]*script.Script{"acquire": script.Acquire, "release": script.Release} {
		args := releaseProbe()
		if name == "acquire" {
			args = []any{nil, nil, 3, "guard:{probe}", "guard:{probe}:fence", "guard:{probe}:q",
				"owner", int64(30000), "nonce.2", int64(60000), MannerTry, "locker"}
		}
		if err := cn.RunScript(ctx, s, args, true).Err(); !redis.HasErrorPrefix(err, "READONLY") {
			t.Fatalf("%s on a replica: %v, want a READONLY refusal", name, err)
		}
	}
	if cn.legacy.Load() {
		t.Fatal("a Redis 7 replica made the conn fall back to the plain scripts")
	}
	// What the refusal prevents: the plain release runs and reports the lock expired.
	cn.legacy.Store(true)
	code, err := decodeRelease(cn.RunScript(ctx, script.Release, releaseProbe(), true))
	if err != nil || code != script.Expired {
		t.Fatalf("plain release on a replica: %v, %v; want it to run and report expired", code, err)
	}
}

// shareLease returns the lease end (server ms) of owner's share of the read-write lock
// or semaphore lock: its field is "<count> <lease end> <nonces>" (kinds/lib.lua).
func shareLease(ctx context.Context, c *redis.Client, lock, owner string) int64 {
	_, rest, _ := strings.Cut(c.HGet(ctx, lock, owner).Val(), " ")
	e, _, _ := strings.Cut(rest, " ")
	ms, _ := strconv.ParseInt(e, 10, 64)
	return ms
}

// setShareLease makes owner's share of lock end at ms, its count and nonces kept.
func setShareLease(ctx context.Context, t *testing.T, c *redis.Client, lock, owner string, ms int64) {
	t.Helper()
	parts := strings.SplitN(c.HGet(ctx, lock, owner).Val(), " ", 3)
	if len(parts) < 2 {
		t.Fatalf("%s's share field %q, want \"<count> <lease end> <nonces>\"", owner, parts)
	}
	parts[1] = strconv.FormatInt(ms, 10)
	if err := c.HSet(ctx, lock, owner, strings.Join(parts, " ")).Err(); err != nil {
		t.Fatal(err)
	}
}

// decodeRelease reads the reply of a release script call.
func decodeRelease(cmd *redis.Cmd) (script.Released, error) { return script.ParseRelease(cmd.Int64()) }

// TestRetriedAttemptRenewsLease: a retry of an attempt that already took the lock (its
// reply was lost, the client sent it again) counts once and runs the hold's lease from
// the retry: its caller counts the lease's validity from the retry's sending. Without
// that, the lease in Redis ended before the validity the caller computed (the fault
// suite's "latency above read timeout" row caught it: I2).
func TestRetriedAttemptRenewsLease(t *testing.T) {
	perKind(t, "retried", func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string) {
		h := k.hold("owner-" + name)
		lease := "#e" // the hold's lease field (see kinds/lib.lua); a share's is in its own
		if k.t.Spec.Write {
			lease = "#We"
		}
		getLease := func() int64 {
			if k.t.Spec.PerHolder {
				return shareLease(ctx, c, k.keys.Lock, h.Owner())
			}
			ms, _ := c.HGet(ctx, k.keys.Lock, lease).Int64()
			return ms
		}
		attempt := func() script.Granted {
			t.Helper()
			v, err := k.cn.RunScript(ctx, k.t.Spec.Acquire, k.args.acquire(h, "retry.1", MannerWait), true).Result()
			if err != nil {
				t.Fatal(err)
			}
			g, err := script.ParseAcquire(v)
			if err != nil || !g.Acquired {
				t.Fatalf("attempt: %+v, %v", g, err)
			}
			return g
		}
		attempt()
		// The first run's lease, as if it had run long before the retry.
		now := c.Time(ctx).Val().UnixMilli()
		if k.t.Spec.PerHolder {
			setShareLease(ctx, t, c, k.keys.Lock, h.Owner(), now+500)
		} else if err := c.HSet(ctx, k.keys.Lock, lease, now+500).Err(); err != nil {
			t.Fatal(err)
		}
		attempt()
		until := getLease()
		if want := now + k.t.TTL.Milliseconds() - 1000; until < want {
			t.Fatalf("lease after the retry ends at %d, want from the retry on (≥ %d)", until, want)
		}
		if n := k.holds(ctx, c, h.Owner()); n != "1" {
			t.Fatalf("holds after the retry = %q, want 1", n)
		}
	})
}

// TestReleaseHandsToFirstQueued: a release of the exclusive lock that others waited for
// hands it to the first Locker queued — that one alone is told (reply HandedOn), and the
// one behind it stays queued for the next release — and once nobody waits, a release
// touches no queue (reply Freed). Without the pop of the queue every release woke every
// Locker ('*'), and all raced for the lock.
func TestReleaseHandsToFirstQueued(t *testing.T) {
	perKind(t, "handoff", func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string) {
		if name != "exclusive" {
			return
		}
		as := func(locker string) callArgs { return callArgs{id: locker, conn: k.cn} }
		take := func(h *Hold, locker string) script.Granted {
			t.Helper()
			v, err := k.cn.RunScript(ctx, k.t.Spec.Acquire, as(locker).acquire(h, k.nonce(), MannerWait), true).Result()
			if err != nil {
				t.Fatal(err)
			}
			g, err := script.ParseAcquire(v)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		release := func(h *Hold, locker string) script.Released {
			t.Helper()
			code, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, as(locker).release(h, k.nonce(), ""), true))
			if err != nil {
				t.Fatal(err)
			}
			return code
		}
		a, b, cc := k.hold("a/1"), k.hold("b/1"), k.hold("c/1")
		if !take(a, "A").Acquired || take(b, "B").Acquired || take(cc, "C").Acquired {
			t.Fatal("a should hold, b and c wait")
		}
		if code := release(a, "A"); code != script.HandedOn {
			t.Fatalf("a's release: %v, want HandedOn (b told)", code)
		}
		if q := c.LRange(ctx, k.keys.Queue, 0, -1).Val(); len(q) != 1 || q[0] != "C" {
			t.Fatalf("queue after a's release %v, want C alone", q)
		}
		if !take(b, "B").Acquired {
			t.Fatal("b did not take the lock handed to it")
		}
		if code := release(b, "B"); code != script.HandedOn {
			t.Fatalf("b's release: %v, want HandedOn (c told)", code)
		}
		if !take(cc, "C").Acquired {
			t.Fatal("c did not take the lock handed to it")
		}
		if code := release(cc, "C"); code != script.Freed {
			t.Fatalf("c's release: %v, want Freed (nobody waits)", code)
		}
	})
}

// TestDeadWriterFieldsIgnored: once a read-write lock's writer's lease ran out (its
// writer died), the writer's fields that the hash keeps — the fence record makes the
// hash outlive every lease — neither keep another writer out nor are reentered. Without
// it the lock stayed busy until the hash expired (the fault suite's smoke row
// "read-write: redis paused > TTL" found the hash left after its TTL: I3).
func TestDeadWriterFieldsIgnored(t *testing.T) {
	perKind(t, "dead-writer", func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string) {
		if !k.t.Spec.Write {
			return
		}
		take := func(h *Hold) script.Granted {
			t.Helper()
			v, err := k.cn.RunScript(ctx, k.t.Spec.Acquire, k.args.acquire(h, k.nonce(), MannerTry), true).Result()
			if err != nil {
				t.Fatal(err)
			}
			g, err := script.ParseAcquire(v)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		if g := take(k.hold("dead/1")); !g.Acquired {
			t.Fatalf("the first writer: %+v", g)
		}
		// Its lease runs out; the hash stays.
		if err := c.HSet(ctx, k.keys.Lock, "#We", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if g := take(k.hold("next/1")); !g.Acquired {
			t.Fatalf("another writer after the first one's lease ran out: %+v; want the lock", g)
		}
		if w := c.HGet(ctx, k.keys.Lock, "#W").Val(); w != "next/1" {
			t.Fatalf("writer field %q, want next/1", w)
		}
	})
}

// TestStaleQuorumTokensIgnored: a new hold does not clear the quorum's token fields of
// the hold before it (#tq, the token a quorum confirmed; #tp, the proposal a grant took:
// layout 3 writes a grant's 7 fields and no more), so quorum.lua counts each only while
// it equals the hold's token (#t). A reentry through Redis of a hold whose fields are an
// earlier hold's gets neither; of a hold whose quorum confirmed its token, that token.
func TestStaleQuorumTokensIgnored(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	q := &Quorum{scripts: map[*script.Script]*script.Script{}}
	quorumAcquire := redis.NewScript(q.wrap(script.Acquire).Body())
	acquire, release := redis.NewScript(script.Acquire.Body()), redis.NewScript(script.Release.Body())
	keys := []string{"guard:{stale}", "guard:{stale}:queue"}
	const owner = "req/s1"
	// acquire.lua's ARGV: owner, TTL, nonce, retention, manner, Locker, label, proposal.
	args := func(owner, nonce, proposal string) []any {
		return []any{owner, "10000", nonce, "60000", MannerTry, "L", "", proposal}
	}

	// The first hold takes the quorum's proposal (#tp), and its quorum confirms it (#tq).
	p := strconv.FormatInt(time.Now().UnixMicro(), 10)
	if v, err := quorumAcquire.Run(ctx, c, keys, args(owner, "n.1", p)...).Slice(); err != nil || len(v) != 1 {
		t.Fatalf("first hold: %v, %v", v, err)
	}
	c.HSet(ctx, keys[0], "#tq", p)
	if n, err := release.Run(ctx, c, keys, owner, "r.1", "", "60000", "L", "0").Int64(); err != nil || n != 1 {
		t.Fatalf("release: %d, %v", n, err)
	}
	// The second hold takes no proposal: #tq and #tp still name the first hold's token.
	second, err := acquire.Run(ctx, c, keys, args(owner, "n.2", "")...).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if f := c.HMGet(ctx, keys[0], "#tq", "#tp").Val(); f[0] != p || f[1] != p {
		t.Fatalf("the first hold's #tq and #tp = %v, want them left (%s)", f, p)
	}
	reenter := func(nonce string) []any {
		t.Helper()
		v, err := quorumAcquire.Run(ctx, c, keys, args(owner+"/x", nonce, "")...).Slice()
		if err != nil || len(v) != 3 {
			t.Fatalf("reentry: %v, %v; want {reply, confirmed, proposed}", v, err)
		}
		return v
	}
	if v := reenter("n.3"); v[1] != nil || v[2] != nil {
		t.Fatalf("reentry of a hold with token %d: confirmed %v, proposed %v; want neither (the first hold's)", second, v[1], v[2])
	}
	// Once the quorum confirms the second hold's token (raise.lua writes #t and #tq), a
	// reentry reads it.
	tok := strconv.FormatInt(second, 10)
	c.HSet(ctx, keys[0], "#t", tok, "#tq", tok)
	if v := reenter("n.4"); v[1] != tok || v[2] != nil {
		t.Fatalf("reentry after the write-back: confirmed %v, proposed %v; want %s and none", v[1], v[2], tok)
	}
}

// TestSharesKeptInTheHash: layout 4 keeps the read-write lock's and the semaphore's
// holds in the lock hash. A share's lease is its owner's field <owner>#e; the hash
// counts the shares it records (#c), which tells an uncontended release that nobody
// else shares; the share's release deletes every field of it, so that owners that come
// and go leave nothing behind; and a release that cannot vouch for the lease (no
// release.lua ARGV[8]) of a share whose lease ran out reports it expired and drops it,
// as the exclusive lock's does. Each part fails with its command cut: without the HDEL
// the owner's fields stay; without the #c write the count does not follow; without the
// clock read the expired share is reported released.
func TestSharesKeptInTheHash(t *testing.T) {
	perKind(t, "shares", func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string) {
		if !k.t.Spec.PerHolder {
			return
		}
		take := func(h *Hold) {
			t.Helper()
			v, err := k.cn.RunScript(ctx, k.t.Spec.Acquire, k.args.acquire(h, k.nonce(), MannerTry), true).Result()
			if err != nil {
				t.Fatal(err)
			}
			if g, err := script.ParseAcquire(v); err != nil || !g.Acquired {
				t.Fatalf("acquire for %s: %+v, %v", h.Owner(), g, err)
			}
		}
		release := func(h *Hold, live bool) script.Released {
			t.Helper()
			args := k.args.release(h, k.nonce(), "")
			if live {
				args = append(args, argNoWon, argKept)
			}
			code, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, args, true))
			if err != nil {
				t.Fatal(err)
			}
			return code
		}
		count := func() string { return c.HGet(ctx, k.keys.Lock, "#c").Val() }
		fieldsOf := func(owner string) []string {
			var out []string
			for f := range c.HGetAll(ctx, k.keys.Lock).Val() {
				if f == owner || strings.HasPrefix(f, owner+"#") {
					out = append(out, f)
				}
			}
			return out
		}
		a, b := k.hold("a/1"), k.hold("b/1")
		take(a)
		now := c.Time(ctx).Val().UnixMilli()
		if e := shareLease(ctx, c, k.keys.Lock, "a/1"); e < now+k.t.TTL.Milliseconds()-1000 || e > now+k.t.TTL.Milliseconds()+1000 {
			t.Fatalf("a's lease field %d, want about the server's time %d and the TTL %s", e, now, k.t.TTL)
		}
		take(b)
		if n := count(); n != "2" {
			t.Fatalf("#c = %q with two shares, want 2", n)
		}
		if code := release(a, true); code != script.Freed {
			t.Fatalf("a's release: %v, want Freed", code)
		}
		if f := fieldsOf("a/1"); len(f) != 0 {
			t.Fatalf("a's fields after its release: %v, want none", f)
		}
		if n := count(); n != "1" {
			t.Fatalf("#c = %q after a left, want 1", n)
		}
		// b's lease runs out; a release that cannot vouch for it finds so.
		setShareLease(ctx, t, c, k.keys.Lock, "b/1", now-1)
		if code := release(b, false); code != script.Expired {
			t.Fatalf("release of a share whose lease ran out: %v, want Expired", code)
		}
		if f := fieldsOf("b/1"); len(f) != 0 {
			t.Fatalf("b's fields after its expired release: %v, want none", f)
		}
		if n := count(); n != "0" {
			t.Fatalf("#c = %q with no share left, want 0", n)
		}
	})
}

// TestExpiredSharesPruned: shares whose leases ran out stay counted (#c) until a script
// that must know who holds drops them: a writer's attempt, a semaphore found full. Then
// they no longer keep anyone out, and their fields go.
func TestExpiredSharesPruned(t *testing.T) {
	perKind(t, "pruned", func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string) {
		if !k.t.Spec.PerHolder {
			return
		}
		try := func(spec *Spec, h *Hold) script.Granted {
			t.Helper()
			v, err := k.cn.RunScript(ctx, spec.Acquire, k.args.acquire(h, k.nonce(), MannerTry), true).Result()
			if err != nil {
				t.Fatal(err)
			}
			g, err := script.ParseAcquire(v)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		dead := []*Hold{k.hold("dead/1"), k.hold("dead/2")} // the semaphore's two permits
		for _, h := range dead {
			if !try(k.t.Spec, h).Acquired {
				t.Fatalf("%s did not take a share", h.Owner())
			}
			setShareLease(ctx, t, c, k.keys.Lock, h.Owner(), 1)
		}
		// Who asks: a writer of the read-write lock, a third permit of the semaphore.
		spec, next := k.t.Spec, k.hold("next/1")
		if name == "read" {
			w := kinds["write"].spec
			spec = &w
			wt := *k.t
			wt.Spec = spec
			next = &Hold{Keys: k.keys, Terms: &wt, Section: "next/1"}
			next.Box("next/1", nil)
		}
		if g := try(spec, next); !g.Acquired {
			t.Fatalf("%s with every share's lease run out: %+v; want it granted", next.Owner(), g)
		}
		for _, h := range dead {
			if c.HExists(ctx, k.keys.Lock, h.Owner()).Val() {
				t.Fatalf("%s's fields outlived its lease after the prune", h.Owner())
			}
		}
		want := "0"
		if name == "semaphore" {
			want = "1" // the new permit
		}
		if n := c.HGet(ctx, k.keys.Lock, "#c").Val(); n != want {
			t.Fatalf("#c = %q after the prune, want %s", n, want)
		}
	})
}

// TestSharesCommonCaseOnlyWhenItIs: a share's acquire and release do their common case
// with few functions made (kinds/lib.lua's take_fast and release_fast) and leave every
// other case to the general path. Each case here fails when the common case's check for
// it is cut: a reentry counted (not a second share over the first), a release that
// leaves a hold (not the share freed), the retry of that release (counted once, by its
// nonce in #r), a release someone waited for (the queue popped), a reader refused while
// a writer holds or waits, and a writer's own read share released without cutting the
// hash's TTL below the write lease (the fence retention shorter than the TTL here).
func TestSharesCommonCaseOnlyWhenItIs(t *testing.T) {
	perKind(t, "common", func(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client, name string) {
		if !k.t.Spec.PerHolder {
			return
		}
		attempt := func(spec *Spec, h *Hold, nonce string) script.Granted {
			t.Helper()
			v, err := k.cn.RunScript(ctx, spec.Acquire, k.args.acquire(h, nonce, MannerTry), true).Result()
			if err != nil {
				t.Fatal(err)
			}
			g, err := script.ParseAcquire(v)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		release := func(spec *Spec, h *Hold, nonce string) script.Released {
			t.Helper()
			args := append(k.args.release(h, nonce, ""), argNoWon, "1") // valid, the hash's TTL not vouched for
			code, err := decodeRelease(k.cn.RunScript(ctx, spec.Release, args, true))
			if err != nil {
				t.Fatal(err)
			}
			return code
		}
		h := k.hold("solo")
		if g := attempt(k.t.Spec, h, "n.1"); !g.Acquired || g.Holds != 1 {
			t.Fatalf("first attempt: %+v", g)
		}
		if g := attempt(k.t.Spec, h, "n.2"); !g.Acquired || g.Holds != 2 || k.holds(ctx, c, "solo") != "2" {
			t.Fatalf("the owner's second attempt: %+v, holds %q; want its share reentered, 2 holds", g, k.holds(ctx, c, "solo"))
		}
		if code := release(k.t.Spec, h, "r.1"); code != script.StillHeld || k.holds(ctx, c, "solo") != "1" {
			t.Fatalf("first of two releases: %v, holds %q; want StillHeld, 1 hold", code, k.holds(ctx, c, "solo"))
		}
		if code := release(k.t.Spec, h, "r.1"); code != script.StillHeld || k.holds(ctx, c, "solo") != "1" {
			t.Fatalf("that release retried: %v, holds %q; want StillHeld, the hold kept", code, k.holds(ctx, c, "solo"))
		}
		if code := release(k.t.Spec, h, "r.2"); code != script.Freed {
			t.Fatalf("the last release: %v, want Freed", code)
		}
		if name == "read" {
			readerAndWriter(t, ctx, k, c, attempt, release)
		}
		// Someone waited: the last release of a share taken once pops the queue.
		once := k.hold("once")
		if g := attempt(k.t.Spec, once, "o.1"); !g.Acquired {
			t.Fatalf("attempt: %+v", g)
		}
		if err := c.HSet(ctx, k.keys.Lock, "#w", "1").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.RPush(ctx, k.keys.Queue, "other-locker").Err(); err != nil {
			t.Fatal(err)
		}
		if code := release(k.t.Spec, once, "o.r"); code != script.HandedOn || c.LLen(ctx, k.keys.Queue).Val() != 0 {
			t.Fatalf("the last release, a Locker queued: %v, queue %d long; want HandedOn, the queue popped", code, c.LLen(ctx, k.keys.Queue).Val())
		}
	})
}

// readerAndWriter is TestSharesCommonCaseOnlyWhenItIs's part for the read-write lock: a
// reader refused while a writer holds or waits, and the writer's own read share.
func readerAndWriter(t *testing.T, ctx context.Context, k *kindRig, c *redis.Client,
	attempt func(*Spec, *Hold, string) script.Granted, release func(*Spec, *Hold, string) script.Released) {
	t.Helper()
	w := kinds["write"].spec
	writer := k.hold("writer")
	if g := attempt(&w, writer, "w.1"); !g.Acquired {
		t.Fatalf("the writer's attempt on a free lock: %+v", g)
	}
	if g := attempt(k.t.Spec, k.hold("reader"), "n.3"); g.Acquired {
		t.Fatalf("a reader while the writer holds: %+v; want it refused", g)
	}
	// The writer also reads; its read share's release leaves the hash to the write
	// lease, which runs longer than the fence retention. (The refused reader set #w, as
	// a busy attempt does; without it the release is the common case but for the
	// writer.)
	if err := c.HDel(ctx, k.keys.Lock, "#w").Err(); err != nil {
		t.Fatal(err)
	}
	if g := attempt(k.t.Spec, writer, "w.2"); !g.Acquired {
		t.Fatalf("the writer's read: %+v", g)
	}
	st := *k.t
	st.Retention = time.Second
	st.Fill()
	shortly := &Hold{Keys: k.keys, Terms: &st, Section: "writer"} // the writer, with that retention
	shortly.Box("writer", nil)
	args := append(k.args.release(shortly, "w.r", ""), argNoWon, "1")
	if code, err := decodeRelease(k.cn.RunScript(ctx, k.t.Spec.Release, args, true)); err != nil || code != script.Freed {
		t.Fatalf("the writer's read release: %v, %v", code, err)
	}
	if pttl := c.PTTL(ctx, k.keys.Lock).Val(); pttl < 20*time.Second {
		t.Fatalf("the hash's TTL after the writer's read share left: %s, want the write lease's (30s) at least", pttl)
	}
	if code := release(&w, writer, "w.r2"); code != script.Freed {
		t.Fatalf("the writer's release: %v", code)
	}
	// A writer waiting (its mark, the hash kept as long) keeps new readers out; a reader
	// that entered before leaves the hash to the mark, not to the retention alone.
	early := &Hold{Keys: k.keys, Terms: shortly.Terms, Section: "early"}
	early.Box("early", nil)
	if g := attempt(k.t.Spec, early, "e.1"); !g.Acquired {
		t.Fatalf("a reader on a free lock: %+v", g)
	}
	if err := c.HSet(ctx, k.keys.Lock, "#ww", c.Time(ctx).Val().UnixMilli()+10000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PExpire(ctx, k.keys.Lock, 10500*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if g := attempt(k.t.Spec, k.hold("late-reader"), "n.4"); g.Acquired {
		t.Fatalf("a reader while a writer waits: %+v; want it refused", g)
	}
	if err := c.HDel(ctx, k.keys.Lock, "#w").Err(); err != nil { // set by the refusal
		t.Fatal(err)
	}
	if code := release(k.t.Spec, early, "e.r"); code != script.Freed {
		t.Fatalf("the early reader's release: %v", code)
	}
	if pttl := c.PTTL(ctx, k.keys.Lock).Val(); pttl < 5*time.Second {
		t.Fatalf("the hash's TTL after the early reader left: %s, want the waiting writer's mark's (10s)", pttl)
	}
	if err := c.HDel(ctx, k.keys.Lock, "#ww").Err(); err != nil {
		t.Fatal(err)
	}
}
