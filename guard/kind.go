package guard

import (
	"strconv"

	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// Kind is what a lock's holders may share. Each kind of one key is a lock of its own in
// Redis: an exclusive lock on "x", the read-write lock on "x" and the semaphore on "x"
// do not exclude one another. Use one kind per key (Read and Write name the two modes of
// the same read-write lock).
type Kind uint8

const (
	// KindExclusive is the default: one owner holds the lock at a time.
	KindExclusive Kind = iota
	// KindRead is the shared mode of a read-write lock (option Read).
	KindRead
	// KindWrite is the exclusive mode of a read-write lock (option Write).
	KindWrite
	// KindSemaphore lets up to N owners hold the lock at once (option Permits).
	KindSemaphore
	// KindFair is an exclusive lock granted in strict arrival order (option Fair).
	KindFair
)

var kindNames = [...]string{"exclusive", "read", "write", "semaphore", "fair"}

// String returns the kind's name as telemetry reports it: "exclusive", "read", "write",
// "semaphore" or "fair".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// kindSpec is what the engine needs of a kind: its Redis names, its scripts and how its
// waiters wait. Every kind's scripts take the same arguments and give the same replies,
// so the waiting, renewal and release code is shared:
//
//   - acquire: KEYS lock, queue[, aux[, aux2]]; ARGV owner, TTL ms, attempt nonce,
//     fence retention ms, manner ("0" wait, "1" polite, "2" try, "3" leave: a waiter that
//     gave up), Locker ID[, limit, sharded flag]. Replies: token (integer) for a fresh
//     hold; {1, "token", holds} for a reentry or a hold the owner already had in Redis,
//     {1, "token", holds, holder} for a reentry of a hold of a section the owner is in
//     (internal/script/lua/chain.lua, a fragment of every kind's scripts);
//     {0, pttl} busy (pttl -1: free but left to others); {2} refused for good (a reader
//     asking to write: ErrUpgrade).
//   - release: KEYS as acquire; ARGV owner, release nonce, undo nonce, fence retention
//     ms, Locker ID, sharded flag[, the quorum's winning attempt, "1"/"2" the lease
//     valid by the engine's clock (release.lua)]. Replies 4, 3, 1 (freed: this Locker next, handed to
//     another Locker, nobody queued), 2 (one hold dropped, still held), 0 (nothing to
//     undo), -1 (not held: expired), -2 (held by another owner). Both scripts make a
//     retried call with the same nonce a no-op.
//   - renew: KEYS lock (kinds without aux: all but the fair lock) or as acquire; ARGV owner, TTL ms, fence
//     retention ms. Replies 1 (renewed) or 0 (not held).
//
// The read-write lock and the semaphore keep every hold in the lock's hash (data layout
// 4), the fair lock its owner queue in two more keys: their scripts
// (internal/script/lua/kinds) share the functions of kinds/lib.lua, which also describes
// their data, besides those every script shares (internal/script's doc).
type kindSpec struct {
	kind      Kind
	suffix    string     // appended to the lock's Redis name, after the hash tag
	aux, aux2 string     // suffixes of the fourth and fifth keys; "" for fewer keys
	ops       store.Spec // its scripts, and how its tokens are kept
	wait      waitStyle
	leaves    bool // a waiter that gives up tells Redis (acquire manner "3")
}

// waitStyle is how the goroutines of one process wait for a busy lock of a kind.
type waitStyle uint8

const (
	// waitGated: one goroutine per key and process makes attempts (the key's gate); the
	// next one attempts when it takes the gate only if the one before gave up.
	waitGated waitStyle = iota
	// waitShared: gated too, but the next goroutine attempts at once when it takes the
	// gate: holders share the lock, so the one before getting in says nothing against it.
	waitShared
	// waitOwn: every goroutine attempts for itself and every release notification wakes
	// all of them: a fair lock is granted to one owner, which only its goroutine can
	// claim; the two modes of a read-write lock share its notifications, and a reader at
	// the gate, kept out by a writer's mark, would keep that writer behind it.
	waitOwn
)

var (
	exclusiveSpec = &kindSpec{
		kind: KindExclusive,
		ops:  store.Spec{Acquire: acquireScript, Release: releaseScript, Renew: renewScript},
	}
	readSpec = &kindSpec{
		kind:   KindRead,
		suffix: ":rw",
		ops:    store.Spec{Acquire: script.ReadAcquire, Release: script.ReadRelease, Renew: script.ReadRenew, PerHolder: true},
		wait:   waitOwn,
	}
	writeSpec = &kindSpec{
		kind:   KindWrite,
		suffix: ":rw",
		ops:    store.Spec{Acquire: script.WriteAcquire, Release: script.WriteRelease, Renew: script.WriteRenew, Write: true},
		wait:   waitOwn,
		leaves: true,
	}
	semaphoreSpec = &kindSpec{
		kind:   KindSemaphore,
		suffix: ":sem",
		ops:    store.Spec{Acquire: script.SemAcquire, Release: script.SemRelease, Renew: script.ReadRenew, PerHolder: true},
		wait:   waitShared,
	}
	fairSpec = &kindSpec{
		kind:   KindFair,
		suffix: ":fair",
		aux:    ":owners",
		aux2:   ":places",
		ops:    store.Spec{Acquire: script.FairAcquire, Release: script.FairRelease, Renew: renewScript, Fair: true},
		wait:   waitOwn,
		leaves: true,
	}
)

// specs are the kinds the engine serves, by Kind.
var specs = [...]*kindSpec{
	KindExclusive: exclusiveSpec,
	KindRead:      readSpec,
	KindWrite:     writeSpec,
	KindSemaphore: semaphoreSpec,
	KindFair:      fairSpec,
}

// specOf returns the spec of k, nil when k is not a kind.
func specOf(k Kind) *kindSpec {
	if int(k) < len(specs) {
		return specs[k]
	}
	return nil
}
