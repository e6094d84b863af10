// Package store is the Redis side of a guard Locker: the only code that runs the lock
// protocol's scripts. It never imports package guard; the engine (package guard) holds
// a Store and talks to Redis through it only.
//
// The seam is made of plain values. The engine describes a hold with a Hold — its
// Redis names (Keys), its call's Terms (the kind's scripts in a Spec, the TTL, the
// validity budget, replicas to wait for), its owner and section, boxed once as script
// arguments (Box) — and gets typed outcomes back: a Grant for an attempt (acquired,
// reentered, busy with the holder's TTL and age, refused, or the call's error), a
// script.Released for a release, ErrGone or a *Shortfall for a renewal. The replies of
// the scripts are decoded once, next to them, in package script. A store never writes
// the engine's record: the engine records the Grant (its token and, on a quorum, the
// QuorumHold that the winning attempt made) in the Hold, and moves a hold to the holder
// a reentry found. The two things a quorum asks of the engine's record from its own
// goroutines — is the hold still its owner's, and telemetry of a repair — go through
// the two-method Ref.
//
// Store is four small interfaces: Protocol (acquire, undo, release, leave, renew),
// Transport (how the clients behave: calls that return at their deadline, batching,
// a Cluster map to reload), Router (the Pub/Sub feeds and the wait queues) and Reader
// (the servers the operators' reads run on). Two stores implement it:
//
//   - Single: one deployment — a server, a Sentinel group, a Cluster or a Ring —
//     through one client. Calls run on the user's client; with SyncReplicas the
//     attempt and its WAIT share a pipeline to the key's primary.
//   - Quorum: independent servers of which a majority must agree (Redlock with the
//     guarantees of one server kept). Its jobs have files of their own: an attempt on
//     every server at once and the late replies (attempt.go), the token's write-back
//     (raise.go), the release and the undos (qrelease.go), the renewal and the repair
//     of a server that lost a hold (qrenew.go), all over package fanout.
//
// Undos that Redis did not answer are not dropped: each server (Conn) has a lane that
// tries them again until the server answers or the Locker closes (undo.go).
package store
