package guard

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// Sentinel errors, for errors.Is. Every error the package returns matches at most one of
// ErrLocked, ErrDeadlock, ErrLeaseLost, ErrNotHeld, ErrExpired, ErrUpgrade,
// ErrInvalidConfig, ErrInvalidKey, ErrUnavailable and ErrClosed; a context error that ended a call stays in the chain.
var (
	// ErrLocked reports that another owner holds the lock. The error is a *LockedError
	// carrying the key and when to retry.
	ErrLocked = errors.New("guard: lock is held by another owner")

	// ErrDeadlock reports that the wait was one of a cycle of owners, each holding a lock
	// the next one waits for, so that none of them would ever be granted (see
	// DeadlockDetection), and that this call was the one chosen to fail: waiting again
	// will not help, giving back what the caller holds will. The others of the cycle get
	// their locks once the caller's locks are released, as Wrap, Do and the adapters do
	// when the function returns. The error is a *DeadlockError naming the cycle.
	//
	// Detection covers exclusive, read-write and fair locks. A semaphore's waiter takes
	// no part: it waits for any one of the permits, and a cycle through one permit holder
	// is no deadlock while another holder may still release.
	ErrDeadlock = errors.New("guard: deadlock")

	// ErrLeaseLost reports that a lease ended before it was released: the lock was deleted,
	// taken by another owner, or not renewed before its local validity ran out. It is the
	// context.Cause of a lost lease's context. The error is a *LeaseLostError.
	ErrLeaseLost = errors.New("guard: lease lost")

	// ErrNotHeld reports a release of a lock that another owner holds now.
	ErrNotHeld = errors.New("guard: lock is held by another owner, not released")

	// ErrExpired reports a release of a lock that had already expired in Redis.
	ErrExpired = errors.New("guard: lock had expired before release")

	// ErrUpgrade reports an acquisition for writing (Write) by an owner that holds the
	// same read-write lock for reading. Upgrading in place would deadlock two readers that
	// both try it; release the read lock, then acquire for writing (the data read may
	// have changed in between). The opposite, a writer taking the read lock, is allowed.
	ErrUpgrade = errors.New("guard: the owner holds this lock for reading and cannot upgrade to writing; release the read lock first")

	// ErrInvalidConfig reports a bad option: a TTL, Retry, Renewal or other setting out
	// of range, a key template that does not parse or names a field the request does not
	// have, an option used where it does not apply, a missing Locker or key option. It is
	// returned by New, by WrapE (Wrap panics with it), by the Echo and gRPC constructors,
	// and by a call whose per-call options are bad (Acquire, TryAcquire, Do, Run). The
	// error is a *ConfigError naming the field. It never reports a key: see ErrInvalidKey.
	ErrInvalidConfig = errors.New("guard: invalid configuration")

	// ErrInvalidKey reports a key that cannot name a lock: empty, longer than MaxKeyLen,
	// or not renderable from the request (a template placeholder whose value is missing
	// or empty, a KeyFunc that failed). It is the same error wherever the key came from —
	// Acquire's or TryAcquire's argument, a RawKey (WrapE and Do report an empty one at
	// once), a rendered Key template, a KeyFunc, an Echo route or a gRPC rule — and is
	// returned before any Redis call. Its message names the key (its first 64 bytes), the
	// key's length and what is wrong with it, or it wraps the template's or the KeyFunc's
	// error.
	ErrInvalidKey = errors.New("guard: invalid lock key")

	// ErrUnavailable reports that Redis could not be reached or refused the command, or that
	// too few replicas acknowledged a grant (SyncReplicas). The error is a *RedisError.
	ErrUnavailable = errors.New("guard: redis unavailable")

	// ErrClosed reports a call on a closed Locker.
	ErrClosed = errors.New("guard: locker closed")

	// ErrLayout is wrapped by the error of a call that met a lock written by another
	// version of guardkit, which keeps its data in Redis in another layout (a
	// *LayoutError): a fleet that mixes versions, or an old lock's hash that outlives
	// its release by the fence retention. Stop every process of the old version before
	// starting the new one, and in between delete the old locks' keys, or wait out the
	// retention (docs/operators.md, "Upgrading across a data layout").
	ErrLayout = errors.New("guard: lock written by another version of guardkit")
)

// LockedError reports that a lock was busy when the acquisition gave up.
type LockedError struct {
	// Key is the lock key as the caller gave it.
	Key string
	// RetryAfter estimates how long the lock stays busy: the mean time that holds of
	// this key (else of locks with this name) lasted in this Locker, bounded by the
	// holder's remaining TTL as Redis last reported it; that TTL itself until a hold has
	// been seen to end. See "Retry hints" in the package documentation. It is a hint, not
	// a promise: a release can come sooner and a renewal later.
	RetryAfter time.Duration
	// Attempts is the number of acquisition round trips that were made.
	Attempts int
	// Err is the context error when the context ended the wait, nil when the retry
	// policy gave up.
	Err error

	// section is the holder when it is another section of the caller's own request in
	// this process (a self-wait: see selfwait.go).
	section ctxid.ID
}

// Error names the key, the attempts and when to retry — and, when the holder is another
// section of the caller's own request in this process, says so and how to nest instead.
func (e *LockedError) Error() string {
	holder := "another owner"
	if e.section != "" {
		holder = fmt.Sprintf("another section of this request (%s; a nested call passes that lease's Context())", e.section)
	}
	msg := fmt.Sprintf("guard: lock %s is held by %s (%d attempts, retry after %s)",
		quoteKey(e.Key), holder, e.Attempts, e.RetryAfter)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrLocked and the context error that ended the wait, if any, for
// errors.Is.
func (e *LockedError) Unwrap() []error { return chain(ErrLocked, e.Err) }

// DeadlockError reports a deadlock that this call was chosen to end by failing: the
// cycle of waits it was part of, starting with its own.
type DeadlockError struct {
	// Key is the lock key this call waited for.
	Key string
	// Cycle lists the waits of the cycle in order: Cycle[0] is this call's, and the
	// holder of each edge's key is a section of (or is) the waiter of the next edge, the
	// last one's of the first one's.
	Cycle []DeadlockEdge

	waited time.Duration // how long the call waited
	walks  int           // walks of the graph its detection made
	calls  int           // Redis calls of those walks and of the confirmation
	took   time.Duration // how long the walk that found the cycle and its confirmation took
}

// DeadlockEdge is one wait of a deadlock's cycle: Waiter waits for Key, held by Holder.
type DeadlockEdge struct {
	// Waiter is the section that waits.
	Waiter ctxid.ID
	// Key is the lock key it waits for, and Kind that lock's kind.
	Key  string
	Kind Kind
	// Holder is the section holding Key that keeps Waiter out.
	Holder ctxid.ID
	// Label is the text of the holder's label (option Label), "" when it has none.
	Label string
}

// Error names the keys of the cycle, with the holders' labels where known (their section
// IDs otherwise): guard: deadlock: "b" is held by p2, which waits for "a", held by p1,
// which waits for "b"; this call was chosen to fail.
func (e *DeadlockError) Error() string {
	var b strings.Builder
	b.WriteString("guard: deadlock: ")
	for i, c := range e.Cycle {
		if i > 0 {
			b.WriteString(", which waits for ")
			b.WriteString(quoteKey(c.Key))
			b.WriteString(", held by ")
		} else {
			b.WriteString(quoteKey(c.Key))
			b.WriteString(" is held by ")
		}
		if c.Label != "" {
			b.WriteString(c.Label)
		} else {
			b.WriteString(string(c.Holder))
		}
	}
	b.WriteString(", which waits for ")
	b.WriteString(quoteKey(e.Key))
	b.WriteString("; this call was chosen to fail")
	return b.String()
}

// Unwrap returns ErrDeadlock, for errors.Is.
func (e *DeadlockError) Unwrap() []error { return chain(ErrDeadlock, nil) }

// LeaseLostError says why a lease was lost.
type LeaseLostError struct {
	// Key is the lock key.
	Key string
	// Reason is a short description: "lock deleted or taken by another owner",
	// "validity expired without renewal", "hold time limit reached" or "locker closed".
	Reason string
	// Err is the last renewal error, when renewals failed before validity ran out.
	Err error
}

// Error names the key and why the lease was lost.
func (e *LeaseLostError) Error() string {
	msg := "guard: lease lost on " + quoteKey(e.Key) + ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrLeaseLost and the last renewal error, if any, for errors.Is.
func (e *LeaseLostError) Unwrap() []error { return chain(ErrLeaseLost, e.Err) }

// ReleaseError reports, from Locker.Run and what is built on it (Wrap, WrapE, Do, the
// adapters), that the guarded work ran to its end under a valid lease but its release did
// not complete: Redis could not be reached (ErrUnavailable; the lock frees itself after
// its TTL), or the release's reply came after the lease's validity had run out
// (ErrExpired, or ErrNotHeld when another owner has taken the lock since) — Redis was
// paused or slow after the work ended. Exclusivity held while the work ran: it never matches
// ErrLeaseLost, and the work must not be redone for it.
type ReleaseError struct {
	// Key is the lock key.
	Key string
	// Err is the release's error.
	Err error
}

// Error names the key and the release's error.
func (e *ReleaseError) Error() string {
	return "guard: the work under " + quoteKey(e.Key) + " ended under a valid lease, but its release failed: " + e.Err.Error()
}

// Unwrap returns the release's error.
func (e *ReleaseError) Unwrap() error { return e.Err }

// ConfigError reports an invalid option, naming the field.
type ConfigError struct {
	// Field is the option's name, such as "TTL" or "Renewal".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, when there is one: a key template's *keyfunc.SyntaxError
	// or *keyfunc.BindError.
	Err error
}

// Error names the field and what is wrong with it.
func (e *ConfigError) Error() string {
	return "guard: invalid configuration: " + e.Field + ": " + e.Reason
}

// Unwrap returns ErrInvalidConfig and the underlying error, if any, for errors.Is and
// errors.As.
func (e *ConfigError) Unwrap() []error { return chain(ErrInvalidConfig, e.Err) }

// LayoutError reports a lock whose data in Redis another version of guardkit wrote, in a
// layout this version does not read (see the CHANGELOG): a fleet that mixes versions.
// Nothing was written to the lock; the other version's hold, if any, is left as it is.
// Stop every process of the old version before starting the new one; a lock it released
// keeps its hash, which this version refuses, for the fence retention (see ErrLayout).
// It is the Err of a *RedisError, and unwraps to ErrLayout.
type LayoutError struct {
	Key   string // the lock key
	Found string // the layout found: "1" for the data of the versions before the lean layout
	Want  string // the layout this version reads and writes
	Err   error  // the server's reply; nil when Inspect or List read the layout in the lock's data
}

// Error names the key and both layouts.
func (e *LayoutError) Error() string {
	return "guard: lock " + quoteKey(e.Key) + " was written by guardkit data layout " + e.Found +
		"; this version uses layout " + e.Want + ": stop every process of the old version before starting the new one" +
		" (its released locks are refused for their fence retention unless their keys are deleted: docs/operators.md, upgrading)"
}

// Unwrap returns ErrLayout and the server's reply, for errors.Is and errors.As.
func (e *LayoutError) Unwrap() []error { return chain(ErrLayout, e.Err) }

// redisError returns the *RedisError of op on key that failed with err; a reply that the
// lock's data is another layout's becomes a *LayoutError.
func redisError(op, key string, err error) *RedisError {
	if found, want, ok := store.LayoutOf(err); ok {
		err = &LayoutError{Key: key, Found: found, Want: want, Err: err}
	}
	return &RedisError{Op: op, Key: key, Err: err}
}

// otherLayout returns the *LayoutError of a lock hash another data layout wrote, as the
// scripts tell it (acquire.lua): a version field other than this layout's, or none on a
// hash that has a token or a fence record (the first layout had no version field); nil
// for this layout's hash or none.
func otherLayout(key string, fields map[string]string) error {
	found, ok := fields["#v"]
	switch {
	case found == store.Layout:
		return nil
	case !ok && fields["#t"] == "" && fields["#f"] == "":
		return nil
	case !ok:
		found = "1"
	}
	return &LayoutError{Key: key, Found: found, Want: store.Layout}
}

// RedisError reports a failed Redis call, or a write that too few replicas acknowledged
// in time (SyncReplicas).
type RedisError struct {
	// Op is the operation: "acquire", "release", "renew", "inspect", "force release",
	// "list" or "ping" (Locker.Ping).
	Op string
	// Key is the lock key; empty for "ping" and for the scan of a "list".
	Key string
	// Err is the client's error. On a quorum Locker (NewQuorum) whose call too few
	// servers confirmed, it says what each server answered and unwraps to each server's
	// error, prefixed with the server's address. When too few replicas acknowledged a
	// grant or a renewal in time (SyncReplicas; Op "acquire" or "renew"), it names the
	// replicas wanted and reached and unwraps to the WAIT command's error, if that
	// failed. The grant was undone: the lock is not held. The renewal took effect on the
	// primary, but the lease keeps the validity of its last acknowledged renewal, and is
	// lost with this error as the cause if no later renewal is acknowledged before that
	// runs out.
	Err error
}

// Error names the operation, the key and the client's error. For too few replica
// acknowledgements it is Err's message, which names them: guard: acquire "k": 0 of 1
// replicas acknowledged the grant in time; it was undone.
func (e *RedisError) Error() string {
	switch e.Err.(type) {
	case *replicaError, *LayoutError:
		return e.Err.Error()
	}
	if e.Key == "" && e.Op == "ping" {
		return "guard: ping: redis: " + e.Err.Error()
	}
	return "guard: " + e.Op + " " + quoteKey(e.Key) + ": redis: " + e.Err.Error()
}

// Unwrap returns ErrUnavailable and the client's error, for errors.Is and errors.As.
func (e *RedisError) Unwrap() []error { return chain(ErrUnavailable, e.Err) }

// replicaError reports a grant or a renewal that too few replicas acknowledged in time
// (SyncReplicas). It is the Err of a *RedisError (Op "acquire" or "renew"), whose message
// is its own. A grant is undone: the lock is not held. A renewal took effect on the
// primary, but the lease keeps the validity of its last acknowledged renewal; the error is
// the cause of its loss when no later renewal is acknowledged before that runs out.
type replicaError struct {
	key     string // the lock key
	want    int    // the replicas SyncReplicas asked for
	acked   int    // the replicas that acknowledged the write within the timeout
	err     error  // the WAIT command's error, when it failed
	renewal bool   // the write was a renewal of a held lease, not a grant
}

// replicaShortfall returns the *RedisError of a write of key that acked of want replicas
// acknowledged in time, waitErr being the WAIT command's error.
func replicaShortfall(key string, want, acked int, waitErr error, renewal bool) *RedisError {
	op := "acquire"
	if renewal {
		op = "renew"
	}
	return &RedisError{Op: op, Key: key, Err: &replicaError{key: key, want: want, acked: acked, err: waitErr, renewal: renewal}}
}

// Error names the key and the replicas wanted and reached.
func (e *replicaError) Error() string {
	msg := fmt.Sprintf("guard: acquire %s: %d of %d replicas acknowledged the grant in time; it was undone",
		quoteKey(e.key), e.acked, e.want)
	if e.renewal {
		msg = fmt.Sprintf("guard: renew %s: %d of %d replicas acknowledged the renewal in time; the lease keeps its earlier validity",
			quoteKey(e.key), e.acked, e.want)
	}
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

// Unwrap returns the WAIT command's error, if any.
func (e *replicaError) Unwrap() error { return e.err }

// errReleased is the context.Cause of a lease's context after a normal release: it
// matches none of the sentinels, ErrLeaseLost in particular.
var errReleased = errors.New("guard: lease released")

// chain is what a typed error unwraps to: the sentinel it matches, then its cause when
// it has one.
func chain(sentinel, cause error) []error {
	if cause == nil {
		return []error{sentinel}
	}
	return []error{sentinel, cause}
}

// quoteKey quotes a key for messages, cutting very long ones.
func quoteKey(k string) string {
	const max = 64
	if len(k) > max {
		return fmt.Sprintf("%q…", k[:max])
	}
	return fmt.Sprintf("%q", k)
}

// keyError reports a key that cannot name a lock (ErrInvalidKey).
type keyError struct {
	key    string // the key, cut to its first 64 bytes when longer
	len    int    // the key's full length in bytes
	reason string // what is wrong with it
}

// invalidKey builds a *keyError without keeping a huge key alive.
func invalidKey(k, reason string) error {
	e := &keyError{key: k, len: len(k), reason: reason}
	if len(k) > 64 {
		e.key = strings.Clone(k[:64])
	}
	return e
}

// Error names the key, its length and what is wrong with it.
func (e *keyError) Error() string {
	return fmt.Sprintf("guard: invalid lock key %s (%d bytes): %s", quoteKey(e.key), e.len, e.reason)
}

// Unwrap returns ErrInvalidKey, for errors.Is.
func (e *keyError) Unwrap() error { return ErrInvalidKey }
