package guard

import (
	"strconv"

	"github.com/redis/go-redis/v9"
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

// kindSpec is what the engine needs of a kind: its Redis names and its scripts. Every
// kind's scripts take the same arguments and give the same replies, so the waiting,
// renewal and release code is shared:
//
//   - acquire: KEYS lock, fence, queue[, aux]; ARGV owner, TTL ms, attempt nonce, fence
//     retention ms, manner ("0" wait, "1" polite, "2" try), Locker ID[, limit]. Replies:
//     token (integer) for a fresh hold; {1, "token", holds} for a reentry or a hold the
//     owner already had in Redis; {0, pttl} busy (pttl -1: free but left to others);
//     {2} refused for good (a reader asking to write: ErrUpgrade).
//   - release: KEYS as acquire; ARGV owner, release nonce, undo nonce, fence retention
//     ms, Locker ID, sharded flag. Replies 4, 3, 1 (freed: this Locker next, handed to
//     another Locker, nobody queued), 2 (one hold dropped, still held), 0 (nothing to
//     undo), -1 (not held: expired), -2 (held by another owner). Both scripts make a
//     retried call with the same nonce a no-op.
//   - renew: KEYS lock[, aux]; ARGV owner, TTL ms. Replies 1 (renewed) or 0 (not held).
//
// Kinds with aux set take a fourth key, the lock's name plus aux (the holders of a shared
// lock, the queue of a fair one), and a seventh argument to acquire.lua, limit.
type kindSpec struct {
	kind             Kind
	suffix           string // appended to the lock's Redis name, after the hash tag
	aux              string // suffix of the fourth key; "" for three keys
	acquire, release *script
	renew            *redis.Script
}

var exclusiveSpec = &kindSpec{
	kind:    KindExclusive,
	acquire: acquireScript,
	release: releaseScript,
	renew:   renewScript,
}

// specs are the kinds the engine serves, by Kind.
var specs = [...]*kindSpec{KindExclusive: exclusiveSpec}

// specOf returns the spec of k, nil when k is not a kind.
func specOf(k Kind) *kindSpec {
	if int(k) < len(specs) {
		return specs[k]
	}
	return nil
}
