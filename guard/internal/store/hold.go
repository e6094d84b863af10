package store

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// Keys are the Redis names of one lock.
type Keys struct {
	Lock  string // hash: the holds, their tokens and nonces, the fence record, waiter flags
	Queue string // list of the Lockers waiting for the lock, in the order they found it busy
	Aux   string // a kind's third key, "" for kinds with two
	Aux2  string // a kind's fourth key, "" for kinds with fewer
}

// Channel is the Pub/Sub channel on which the lock's release is announced; release.lua
// derives the same name.
func (k Keys) Channel() string { return k.Lock + ":release" }

// List returns the keys that exist for the lock's kind, in the scripts' KEYS order.
func (k Keys) List() []string {
	switch {
	case k.Aux2 != "":
		return []string{k.Lock, k.Queue, k.Aux, k.Aux2}
	case k.Aux != "":
		return []string{k.Lock, k.Queue, k.Aux}
	}
	return []string{k.Lock, k.Queue}
}

// Spec is what the store needs of a lock kind: its scripts and how its tokens are kept.
// Every kind's scripts take the same arguments and give the same replies.
type Spec struct {
	Acquire, Release, Renew *script.Script
	// PerHolder: each holder has its own token fields (a reader, a permit); Write: the
	// write mode of a read-write lock, whose holder is recorded in field "#W".
	PerHolder, Write bool
	// Fair: strict arrival order, which a quorum cannot serve.
	Fair bool
}

// kinds reports whether s is a kind beyond the exclusive lock, whose scripts take the
// kinds' arguments (a limit and the sharded flag after the Locker ID; see kind.go).
func (s *Spec) kinds() bool { return s.PerHolder || s.Write || s.Fair }

// kinds reports whether h's scripts take the kinds' arguments (Spec.kinds).
func (h *Hold) kinds() bool { return h.Terms.Spec != nil && h.Terms.Spec.kinds() }

// Terms are a call's settings as the store uses them, filled in by the engine when it
// validates its settings (Fill).
type Terms struct {
	Spec         *Spec
	TTL          time.Duration
	Validity     time.Duration // the TTL minus the drift margin: a grant's local validity
	Retention    time.Duration // FenceRetention
	SyncReplicas int
	SyncTimeout  time.Duration
	Permits      int // a semaphore's; 0 for the other kinds

	ttlArg, retentionArg, limitArg any // boxed once for the scripts
}

// Fill boxes the terms' script arguments.
func (t *Terms) Fill() {
	t.ttlArg, t.retentionArg = t.TTL.Milliseconds(), t.Retention.Milliseconds()
	t.limitArg = strconv.Itoa(t.Permits)
}

// Ref is the engine's record of a hold, as the quorum asks about it from its goroutines.
type Ref interface {
	// Gone reports whether the hold is no longer its owner's: its acquisition failed or
	// was given up, or it was released.
	Gone() bool
	// Repaired records that the hold was taken back on server (telemetry).
	Repaired(server string)
	// Left is how long the hold's lease stays valid by the engine's clock (its validity,
	// the TTL less the drift margin from the last grant or renewal; 0 or less once run
	// out): while it is left, the hold has not expired in Redis, whose clock need not be
	// read, and the lock's hash lives that long at least.
	Left() time.Duration
}

// Hold is one hold as the store sees it: plain values, written by the engine only. The
// engine makes it with Box before the first attempt; its owner changes (SetOwner) only
// before the hold is published, and Q and Token are set once, when it is granted.
type Hold struct {
	Keys  Keys
	Terms *Terms
	// Section is the owner the attempts are sent for. The hold's owner is the holder's
	// once the hold reentered through Redis the hold of a section that one is in; an
	// undo is then sent for both.
	Section string
	Ref     Ref
	Q       *QuorumHold // a quorum's record of the hold: Grant.Q of the attempt that won it
	Token   int64       // the hold's fencing token, once granted
	args    holdArgs
	// lines are the storage of the command lines of the hold's first acquire call and
	// its first release call, the two calls every hold makes, so that neither costs an
	// allocation of its own. Each is handed out once (taken, a bit per line, set with
	// an atomic OR: attempts may overlap), never rewritten while a call may read it.
	lines [2][lineCap]any
	taken uint32
}

// lineCap is the longest command line of acquire.lua, release.lua and the kinds' (with a
// label, the quorum's slots and four keys).
const lineCap = 17

// line returns an empty command line with room for lineCap arguments: the hold's own
// storage i (0: acquire, 1: release) the first time it is asked for, a new slice after.
func (h *Hold) line(i int) []any {
	if atomic.OrUint32(&h.taken, 1<<i)&(1<<i) != 0 {
		return make([]any, 0, lineCap)
	}
	return h.lines[i][:0]
}

// holdArgs are the arguments that stay the same for every call about one hold, boxed
// once when the hold is made.
type holdArgs struct {
	lock, queue, aux, aux2, owner, retention, limit any
	label                                           any // nil without a label
}

// Box boxes h's script arguments for owner, with label (nil: none). h.Keys and h.Terms
// are set, and the terms filled (Terms.Fill): terms are shared by every hold of a call's
// settings, and read only once filled.
func (h *Hold) Box(owner string, label any) {
	k := &h.Keys
	h.args = holdArgs{lock: k.Lock, queue: k.Queue, owner: owner, retention: h.Terms.retentionArg, label: label}
	if h.kinds() {
		h.args.limit = h.Terms.limitArg
	}
	if k.Aux != "" {
		h.args.aux = k.Aux
	}
	if k.Aux2 != "" {
		h.args.aux2 = k.Aux2
	}
}

// Owner is the hold's owner.
func (h *Hold) Owner() string { s, _ := h.args.owner.(string); return s }

// SetOwner makes the hold owner's (a reentry of a section's hold through Redis).
func (h *Hold) SetOwner(owner string) { h.args.owner = owner }

// Manners of an acquire attempt (acquire.lua's ARGV[5]).
const (
	MannerWait   = "0" // the caller waits when the lock is busy: join the Redis wait queue
	MannerPolite = "1" // reenter only; leave a free lock to the queue
	MannerTry    = "2" // the caller will not wait
	MannerLeave  = "3" // the caller gave up waiting (kinds whose spec leaves)
)

// Arguments of acquire.lua and release.lua, boxed once.
var (
	argNumKeys  any = 2
	argNumKeys3 any = 3
	argNumKeys4 any = 4
	argFlag         = [2]any{"0", "1"}
	argManner       = map[string]any{MannerWait: MannerWait, MannerPolite: MannerPolite, MannerTry: MannerTry, MannerLeave: MannerLeave}
	// argNoLabel is the label slot of an unlabelled hold.
	argNoLabel any = ""
	// argNoWon is release.lua's ARGV[7] of one deployment's release: no quorum attempt.
	argNoWon any = ""
	// argKept is release.lua's ARGV[8] for a hold whose lease is valid and whose hash
	// outlives the fence retention.
	argKept any = "2"
)

func flagArg(on bool) any {
	if on {
		return argFlag[1]
	}
	return argFlag[0]
}

// renewKeys returns the KEYS of the renew script of h's kind.
func (h *Hold) renewKeys() []string {
	if h.Keys.Aux == "" {
		return []string{h.Keys.Lock}
	}
	return h.Keys.List()
}

// keyArgs appends the number of keys and the keys of h's scripts to args.
func (h *Hold) keyArgs(args []any) []any {
	a := &h.args
	switch {
	case a.aux2 != nil:
		return append(args, argNumKeys4, a.lock, a.queue, a.aux, a.aux2)
	case a.aux != nil:
		return append(args, argNumKeys3, a.lock, a.queue, a.aux)
	}
	return append(args, argNumKeys, a.lock, a.queue)
}

// callArgs are what a store adds to a hold's arguments: its Locker's ID and the conn
// whose sharded flag the scripts take.
type callArgs struct {
	id   any
	conn *Conn
}

// acquire returns the command line of acquire.lua for an attempt of h (see its header).
// The label comes last, when the hold has one (a quorum adds the slot when it has none).
func (c callArgs) acquire(h *Hold, nonce, manner string) []any {
	a := &h.args
	args := h.line(0)
	if h.kinds() {
		args = h.keyArgs(append(args, nil, nil))
		args = append(args, a.owner, h.Terms.ttlArg, nonce, a.retention, argManner[manner], c.id, a.limit, c.conn.shardedArg())
		return withLabel(h, args)
	}
	return withLabel(h, append(args, nil, nil, argNumKeys, a.lock, a.queue,
		a.owner, h.Terms.ttlArg, nonce, a.retention, argManner[manner], c.id))
}

// withLabel appends the label argument to args when it is sent (see acquire).
func withLabel(h *Hold, args []any) []any {
	if h.args.label != nil {
		return append(args, h.args.label)
	}
	return args
}

// release returns the command line of release.lua (see its header).
func (c callArgs) release(h *Hold, nonce, undo string) []any {
	return c.releaseAs(h, h.args.owner, nonce, undo)
}

// releaseLive is release, telling the script what the engine's clock says of the hold
// (release.lua's ARGV[8]): "1" its lease is still valid, so the server's clock need not
// be read; "2" besides, the lock's hash lives the fence retention more at least (a grant
// and a renewal make it live max(TTL, retention) and an eighth of the retention more:
// fence.lua's keep_for), so its TTL need not be touched.
func (c callArgs) releaseLive(h *Hold, nonce string) []any {
	args := c.release(h, nonce, "")
	if f := liveFlag(h); f != argNoLabel {
		return append(args, argNoWon, f)
	}
	return args
}

// liveFlag is release.lua's ARGV[8] for h (see releaseLive): "2", "1", or "" when the
// engine's clock says nothing of the hold.
func liveFlag(h *Hold) any {
	if h.Ref == nil {
		return argNoLabel
	}
	left := h.Ref.Left()
	switch {
	case left <= 0:
		return argNoLabel
	case left+max(h.Terms.Retention-h.Terms.TTL, 0)+h.Terms.Retention/8 >= h.Terms.Retention:
		return argKept
	}
	return argFlag[1]
}

// releaseAs is release for owner.
func (c callArgs) releaseAs(h *Hold, owner any, nonce, undo string) []any {
	a := &h.args
	args := h.line(1)
	if h.kinds() {
		args = h.keyArgs(append(args, nil, nil))
		return append(args, owner, nonce, undo, a.retention, c.id, c.conn.shardedArg())
	}
	return append(args, nil, nil, argNumKeys, a.lock, a.queue,
		owner, nonce, undo, a.retention, c.id, c.conn.shardedArg())
}

// undo returns the command lines that undo h's attempt with nonce: one as owner, the
// hold's owner (its holder's, for an attempt that took on the hold of a section the
// attempt's section is in), and a second as that section when it is not owner (an
// attempt may have reentered the holder's hold on one server and taken a fresh hold on
// another). Each finds the attempt by its nonce or does nothing. fresh makes the nonces
// of the undos themselves.
func (c callArgs) undo(h *Hold, owner, nonce string, fresh func() string) [][]any {
	args := [][]any{c.releaseAs(h, owner, fresh(), nonce)}
	if h.Section != "" && h.Section != owner {
		args = append(args, c.releaseAs(h, h.Section, fresh(), nonce))
	}
	return args
}
