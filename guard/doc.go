// Package guard puts a Redis lock around a piece of work: a lease that is exclusive across
// every process sharing the Redis, renewed while the work runs, released when it ends,
// and reentrant along the call chain however deep it goes.
//
// # Usage
//
// Build one Locker per Redis and share it:
//
//	locker, err := guard.New(redisClient, guard.TTL(10*time.Second))
//
// New makes no Redis call: call Locker.Ping after it to fail at start-up when Redis cannot
// be reached; Ping answers a readiness check at any time.
//
// Take a lease, run the work under its context, release it:
//
//	lease, err := locker.Acquire(ctx, "order:42")
//	if err != nil {
//		return err // *LockedError (ErrLocked) when busy; ctx.Err() in the chain when ctx ended the wait
//	}
//	defer lease.Release(ctx)
//	ctx, cancel := lease.Bind(ctx) // cancelled if the lease is lost
//	defer cancel()
//	return pay(ctx, order, lease.Token()) // pass the fencing token to storage
//
// # Decorating functions
//
// Wrap turns a function of the usual service shape func(ctx, req) (resp, error) into one
// that runs under a lock named by a key template over the request:
//
//	transfer := guard.Wrap(svc.Transfer,
//		guard.Key("account:{req.From}"),
//		guard.Retry(guard.MaxWait(2*time.Second, nil)))
//
// The template is parsed when Wrap is called, and a mistake in it (or in any option)
// panics there, as regexp.MustCompile does; WrapE returns the error instead. Each call
// acquires the lock for the owner in ctx, runs the function with a context that carries
// the lease and ends if the lease is lost, and releases the lock when the function
// returns or panics. A call whose lease was lost while the function ran returns an error
// matching ErrLeaseLost, even if the function succeeded. Do does the same for a closure,
// with a fixed key (Key without placeholders) or one computed in code (RawKey).
//
// Underneath all of them, and under the Echo middleware and the gRPC interceptors, is one
// primitive: Locker.Run, which takes the key among its options at each call, runs the
// function under the lock, and reports whether it ran, so that a caller tells "the
// function failed" from "the lock was never taken". Build another adapter (a queue
// consumer, a job runner) on it.
//
// Decorators take their Locker from the Use option, or from SetDefault for programs with
// one Redis. KeyFunc computes a key a template cannot express; SkipIf leaves some
// requests unlocked; MinHold keeps a lock for a minimum time after a quick call.
//
// # Owners and reentrancy
//
// A lock is held by a section of a request. The request's owner is a random ID carried in
// the context (package ctxid; Acquire makes one when there is none); each acquisition of a
// key that the caller's section, or a section it is in, does not hold takes the key as a
// new section directly in the caller's (ctxid.Section), and the lease's Context and Bind
// carry that section on. An acquisition reenters a lock when it runs inside the section
// that holds it — its context descends from the lease's — and waits its turn otherwise,
// even within the same request. A nested reentry in this process returns at once without
// a Redis call and with the section's fencing token; one in another process reached from
// inside the section (ctxid's signed tokens carry the section's path) is counted in Redis,
// whose scripts apply the same rule. The lock is free again when every hold has been
// released.
//
// So goroutines that share only their request's context (the errgroup pattern) take turns
// on a lock, each with its own token, while goroutines started inside a section with its
// context are part of that section: they reenter its locks, and its lease's context bounds
// them. Sections nest ctxid.MaxDepth deep; an acquisition that would need a deeper one
// fails with an error matching ctxid.ErrTooDeep. A read-write lock held for writing by a
// section is also taken for reading by the sections within it (a downgrade), and a
// semaphore's permit is reentered by the sections within its holder without a second
// permit; sibling sections of one request read, write and take permits as separate owners.
//
// The trap: by-hand code that acquires a lock and then, with the same ctx, calls code that
// acquires it again makes the second call a sibling of the first, and it waits for a
// release that never comes (until its budget or ctx ends). Pass the lease's context to
// nested calls instead:
//
//	lease, err := l.Acquire(ctx, "order:42")
//	...
//	defer lease.Release(ctx)
//	err = ship(lease.Context(), order) // ship's own Acquire of "order:42" reenters
//
// A wait that has lasted the deadlock delay (1 s by default) for a lock that another
// section of its own request holds in this process — an owner with the same root, or a
// lease acquired with the same ctx — says so: one WARN on slog's default logger naming
// both sections and the fix, a guard.self_wait event on the acquire span, and a
// *LockedError that reads "held by another section of this request" instead of "held by
// another owner".
//
// # Leases
//
// Every lock has a TTL (default 30s). While a lease is held, a watchdog resets the TTL
// every period of the Renewal option (default TTL/3); all leases due together are renewed
// in one pipelined round trip. A lease is lost when a renewal finds the lock deleted or
// owned by another owner, or when its local validity — TTL minus Renewal's drift margin
// (default TTL/100 + 2ms) from the moment the last successful acquire or renewal was
// sent, on the monotonic clock — runs out. A renewal that fails for a transient reason is
// retried until then. A lost lease's context is
// cancelled with a *LeaseLostError (ErrLeaseLost) as its cause. The lease also reads its
// deadline whenever it is asked — Lease.Err, and Err and Done of the lease's contexts
// (Context, Bind, the context Run, Wrap and Do give the function) — so that a process
// stopped past its deadline hears of the loss at its first check, before any timer has
// run.
//
// Run, Wrap, Do and the adapters report ErrLeaseLost only for a loss while the function
// ran. A release that comes back after the validity ran out (Redis stalled after the
// function returned) or does not reach Redis is a *ReleaseError: the function ran
// protected.
//
// Release drops one hold; the last one deletes the lock in a script that checks the
// owner, even when the caller's context is already cancelled.
//
// # Waiting
//
// A busy attempt learns the holder's remaining TTL in the same round trip. The waiter then
// sleeps until the earliest of: the lock's release being announced (one Pub/Sub
// subscription per Locker, shared by all keys — on a Redis 7 Cluster, sharded Pub/Sub
// with one connection per primary waited on, so a release reaches only its own shard —
// plus a direct wake-up when this process releases), the Retry policy's backoff, the holder's TTL, the policy's or the context's
// deadline. Within one process the goroutines waiting for a key form a queue: only the
// one at its head makes attempts, so Redis sees one waiter per process however many
// goroutines wait, and a newcomer does not barge ahead of the queue (its first attempt
// reenters a hold its owner already has, which only Redis can tell, but leaves a free lock
// to the queue). Across processes, Lockers queue in Redis: a busy attempt of a caller
// that will wait puts its Locker's ID in the lock's wait queue, and a release wakes only
// the first Locker queued, so the round trips per acquisition do not grow with the number
// of processes waiting. A process whose release woke another keeps its own newcomers
// from taking the lock back for a moment (they queue instead), so turns go round; a
// newcomer of a third process that finds the lock free may still take it, and the woken
// Locker then queues again: wake-ups are ordered, grants nearly so. Retry policies are
// immutable values: NoRetry, MaxWait (a negative wait: until the context ends), with
// Fixed backoff or a Backoff of your own.
//
// How long a call waits, by default, follows one rule. The Retry option given to the call
// (or to the decorator, the Echo route, the gRPC rule) wins; else the one given to New.
// Without either, Acquire waits until its context ends — the caller owns that context —
// while the entry points that serve requests (Wrap, WrapE, Do, Locker.Run, the Echo
// middleware and the gRPC interceptors) wait at most 5s and then report the lock busy, so
// that a stuck holder never keeps a server's requests waiting without end, even when the
// client set no deadline. TryAcquire always makes one attempt.
//
// An outage is waited out like a busy lock: an attempt that finds Redis unreachable or
// its primary moving (a refused connection, a timeout, READONLY, LOADING, CLUSTERDOWN,
// too few quorum servers) is followed by another after the policy's backoff
// while the policy and the context allow, so a waiter rides out a failover; then the call
// fails with ErrUnavailable. TryAcquire, NoRetry and WaitOutages(false) fail at once.
//
// A budget (MaxWait, the entry points' default 5s, the Echo and gRPC rules' max wait)
// bounds the whole call, whether Redis answers slowly, not at all (a frozen server
// accepts connections and answers nothing) or refuses connections: every Redis call of
// the acquisition runs under the budget's deadline plus a grace of 250ms for the last
// attempt, whatever the client's own timeouts and retries, on every deployment. A call
// cut there fails with ErrUnavailable and an error that reads "no answer within the
// wait budget" and says what to do; the caller's context did not end, and
// context.DeadlineExceeded is not in the chain.
//
// No hold outlives a caller told that it failed. An attempt whose outcome is unknown (its
// caller gave up before Redis answered) is undone, and the undo leaves a mark that
// refuses the attempt should it reach Redis later. A frozen server runs the bytes in its
// sockets when it wakes, however long after, in any order, so an undo (and, on a quorum,
// a release) that gets no answer is not dropped at its timeout: it is tried again, one
// server's at a time and with a backoff of up to a second, until the server answers or
// the Locker is closed. The attempt is then refused or undone within about a second of
// the server waking.
// On Redis 7 the scripts that write carry a "#!lua" line: a replica that a stale
// connection still reaches (a demoted primary) refuses them with READONLY before they run.
//
// A context that ends while waiting ends the wait at once. Build the client with
// ContextTimeoutEnabled so that it also gives up on a Redis call at the context's
// deadline; with any other client each acquire attempt and each release runs on a helper
// goroutine, so that guard can return at the deadline while the call finishes aside (an
// attempt that turns out to have taken the lock undoes itself).
//
// Calls are batched on the client New is given. On a *redis.Client or a
// *redis.ClusterClient built with ContextTimeoutEnabled, the calls nobody in the process
// waits for (a first attempt, a release no goroutine of this process is queued behind)
// that meet in time share one pipeline per node (on a Cluster, the primary of the key's
// slot): a lone call goes out at once, on its caller's goroutine; calls made while a
// call or a batch of their node is in flight go out together in the node's next batch,
// one batch in flight per node. Under concurrency that saves the server and the client a
// system call per command and lets many locks share one round trip; a lone caller pays
// nothing for it. Each batched call is waited for with its own context and returns at
// its deadline; one whose caller gave up before its batch went out is not sent, and an
// attempt whose caller gave up while its batch was in flight is undone once the batch
// has come back, never before. The steps of a handoff are never batched (below). A quorum
// batches the calls to each of its servers the same way.
//
// go-redis's auto-pipelining client (client.AutoPipeline()) may be passed to New instead:
// the calls nobody waits for — a first attempt, a release that no goroutine of this process is
// queued behind — join its batches, which saves the server and the client a system call
// per command under concurrency; the steps of a handoff (an attempt after a wait, the
// release a local waiter is queued behind, compensating releases) are sent at once, on a
// connection of their own, so that a contended lock never waits for batches. The batched
// calls go through the client's deferred face (AsyncAutoPipeline, which the client owns
// and closes with itself) and are waited for with their context, so they return at its
// deadline without a helper goroutine (the blocking face waits for its batch whatever the
// context); an attempt whose caller gave up while it waited in a batch is undone once it
// has run, never before. The calls sent at once run on a helper goroutine as above. That
// client also hides what it wraps: on a Cluster, give New the
// *redis.ClusterClient itself, or guard falls back to classic Pub/Sub and cannot reload
// the client's slot map after a failover.
//
// # Several keys as one lock
//
// A transfer locks two accounts; a batch locks a set of keys. Locker.AcquireAll (and
// TryAcquireAll), the Keys and RawKeys options of Wrap, Do and Locker.Run, the adapters'
// MoreKeys (Echo, net/http, gRPC rules; more_keys in the proto option) take several keys
// as one lock:
//
//	transfer := guard.Wrap(svc.Transfer, guard.Keys("account:{req.From}", "account:{req.To}"))
//
// Such a lock is:
//
//   - All or nothing: the call returns a Lease that holds every key, or an error and no
//     key held: keys taken before a failure are released before it returns — on a
//     stalled Redis, within the call's deadline, the releases going on aside. Errors are
//     Acquire's; a *LockedError names the key that stayed busy.
//   - One canonical order, whatever order the caller lists the keys in: by the Redis
//     Cluster hash slot of each lock, then by key (Lease.Keys). Two callers that list
//     {a, b} and {b, a} never wait for each other in a cycle, so no deadlock and no
//     ErrDeadlock between them. On one server or a Sentinel group, exclusive keys that
//     are all free are taken in one script call (one round trip, all or none); a key
//     found busy leaves the set to wait for it, holding the keys before it, as
//     canonical-order locking does. On a Cluster each key is its own hash slot (its name
//     is its hash tag), so the keys are taken slot by slot, in order; a quorum takes them
//     key by key, in order, each on a majority.
//   - One lease: one TTL, renewed as one (the keys' renewals share one pipeline per
//     server, one round trip per renewal interval however many keys), lost as one (any
//     key lost ends the lease's Context with the *LeaseLostError that names it), released
//     as one (one script call per server). Each key keeps its own fencing token:
//     Lease.Tokens, in the order of Lease.Keys; Lease.Token is the first key's.
//   - Reentry per key: a call inside the lease for any of its keys reenters at once. A
//     call for a superset takes only the keys it lacks, in canonical order, while holding
//     the others: when a missing key sorts before one already held, that breaks the
//     canonical order — a cycle with another owner is then possible, and deadlock
//     detection ends it as any other. Refusing such a call would make correct code fail
//     by how its keys happen to sort; take the whole set at the outermost call instead.
//   - The kind (Read, Write, Permits, Fair) applies to every key; only exclusive sets
//     take the one-call path. Inspect and the guardkit command show each key held by the
//     set's one section, labelled "set of N keys" after the Label option's text.
//
// # Deadlocks
//
// Reentry along the call chain removes the deadlock of a call waiting for its own
// caller; it does nothing for two requests that each hold a lock the other waits for.
// guard finds those cycles in Redis, across processes, services and Cluster nodes, and
// ends each with one victim. Nothing happens until a wait has lasted the detection delay
// (DeadlockDetection, default 1s; 0 turns it off): until then a wait costs what it
// always did, and a wait directly in a request's root is never watched: a section holds
// only what was taken within it, so a cycle can pass only through a wait nested in a
// section that holds a lock — or through a set's wait for a later key (AcquireAll),
// whose section holds the earlier ones, which is watched. Take a second lock while holding a first with the first
// lease's context (Lease.Context, or the context Wrap and Do hand fn), as nested Wrap and
// Do calls do: l1, _ := Acquire(ctx, "a") followed by Acquire(ctx, "b") makes the second a
// sibling section of the request, which is neither inside "a"'s section nor seen to
// close a cycle with it, and two requests that do that in opposite orders wait out their
// budgets as before (ErrLocked). Then the waiter keeps a record
// of its wait in Redis — "section s waits for key k", with an expiry that a dead waiter
// does not renew — and walks the wait-for graph from k, every quarter of the delay at
// first and every delay after four walks: k's holders, what they (or sections within
// them) wait for, those keys' holders, and so on, 16 edges deep at most, one script call
// per key or request on whichever node holds it. A walk that comes back to a section the
// waiter is in has found a cycle, which the waiter reads again, edge by edge: the same
// holds (by fencing token) and the same waits (by wait ID), so that holders that merely
// changed while the walk read them never look like a cycle. Every member of a cycle
// computes the same victim, the wait of the greatest section ID; that wait fails with a
// *DeadlockError (ErrDeadlock) naming the cycle's keys and its holders' labels (Label),
// its caller's locks are released as its function returns (Wrap, Do, the adapters), and
// the others get their locks. The Echo middleware answers it 409 Conflict without
// Retry-After, the gRPC interceptors codes.Aborted with the reason DEADLOCK.
//
// Exclusive, read-write (a writer waits for the readers; a reader for the writer, and for
// the readers while a writer waits) and fair locks take part. A semaphore's waiters do
// not: they wait for any one permit, and a cycle through one holder is no deadlock while
// another may release. A Locker made by NewQuorum does not detect (each server sees a
// different part of the holds). A section counts as waiting while any section within it
// waits. A cycle through a lock guard does not manage (another library's, a database's),
// or through an owner that waits outside guard, is not seen; docs/RELIABILITY.md says
// what detection promises.
//
// # Retry hints
//
// This is the one place the hint a busy lock comes back with is defined. A wait that
// gives up with the lock still busy returns a *LockedError whose RetryAfter estimates
// how long the lock stays busy: the mean time that holds of the same key lasted in this
// Locker, from acquisition to release (weighted towards the latest holds, for the 1024
// keys seen most recently), else that of holds of locks with the same name (the Name
// option, the key template, the Echo route, the gRPC method; 256 names), bounded by the
// holder's remaining TTL as Redis reported it. Until a hold of the key or the name has
// been seen to end, it is that TTL. A lock whose holds last milliseconds therefore hints
// milliseconds, not its TTL. The Echo middleware sends the hint as Retry-After, in whole
// seconds rounded up and at least 1; the gRPC interceptors as errdetails.RetryInfo, to
// the millisecond. Holds made by other processes are not seen: their locks hint from
// this process's holds, else from the TTL.
//
// # Lock kinds
//
// A lock is exclusive unless an option gives it another kind, at any entry point:
//
//   - Read and Write are the two modes of a key's read-write lock: many readers or one
//     writer. Writers go first (a waiting writer keeps new readers out); a writer may also
//     read (a downgrade); a reader asking to write fails at once with ErrUpgrade.
//   - Permits(n) is a semaphore: at most n owners hold the key at once.
//   - Fair is an exclusive lock granted in strict arrival order: a release grants it, in
//     Redis, to the first owner queued.
//
// Every reader and every permit holder has a lease of its own, renewed by its own
// watchdog, with its own fencing token: one that dies frees its share after its TTL
// while the others keep theirs. Each kind of a key is a lock of its own (an exclusive
// lock and a semaphore on one key do not exclude each other); Lease.Kind reports the
// kind held.
//
// # Fencing
//
// Each first acquisition of a key gets a fencing token greater than every token issued for
// that key before, and reentrant holds share it. Tokens never fall below the Redis
// server's clock in microseconds, so they keep rising after Redis restarts empty; a key's
// fence record only keeps them rising while that clock is behind. It lives in the lock's
// hash, which goes when its last lease would have ended, or FenceRetention (10s) after
// the last release if that is later, so locks on distinct keys leave nothing behind. A lock
// held in Redis cannot by itself stop a paused or partitioned former holder from writing
// after its lease ran out; a storage that rejects writes carrying a token lower than the
// highest it has seen can.
//
// # Independent servers
//
// NewQuorum makes a Locker over several independent Redis servers (an odd number, 3 or
// more) that holds each lock on a majority of them, the Redlock algorithm with this
// package's guarantees: reentrancy, renewal with loss announced through the context,
// wake-ups from any server, and fencing tokens that rise strictly per key however the
// majority changes (a token the attempt proposes and a majority takes, or the highest
// granting server's, written back to the majority before the lease is handed out). A
// server that restarted without its data stays out
// for RestartDelay. It is used like a Locker made by New; the exclusive and read-write
// kinds are served, the semaphore and the fair lock are not. Calls that a majority could
// not confirm fail with a *RedisError (ErrUnavailable) whose Err says what each server
// answered and unwraps to each server's error. See NewQuorum, and
// docs/RELIABILITY.md for the argument.
//
// # Redis data
//
// For key k and prefix p (default "guard:"), the lock is the hash p{k} (its holder, hold
// count, lease deadline in server time, token and nonces, and the fence record: the last
// token and the last final releases), the wait queue (a list of Locker IDs) p{k}:queue
// and the release channel p{k}:release. In k, '%', '{' and '}' are written %25, %7B and
// %7D, so every name of a lock shares one Redis Cluster hash tag whatever bytes the key
// holds. The other kinds add a suffix to the lock's name (":rw", ":sem", ":fair"). A
// read-write lock or a semaphore keeps every hold in its hash, each reader's or permit's
// in a field named after its owner (its hold count, lease deadline and nonces; its token
// and the rarer fields in fields named after it), with a count of the shares recorded; a fair lock keeps the owners queued for it in two more keys
// (internal/script/lua/kinds/lib.lua describes them). Each acquire, release and renewal is
// one script call; an uncontended acquire and release make 8 Redis commands between them
// (a release sent near the end of its lease, or after it, adds a clock read and a TTL).
// A set (AcquireAll) uses the same hashes: one script reads every key of the set,
// then runs the acquire script for each; its release runs the release script for each.
// Scripts carry a nonce so that a call the client retries after a timeout takes effect
// once (a final release appends its nonce to the hash's release record, field #x, which
// keeps the newest few dozen; the fence record, field #f, keeps the last token and the
// attempts undone, so an acquisition reads and writes a token, not the release
// history). An acquire whose outcome is unknown (a network error) is undone in the
// background if it took effect. The hash carries its layout's version (field #v): a
// version of guardkit that keeps its data otherwise fails on it with a *LayoutError, and
// the versions before it refuse its locks (the first layout's sees them held, the later
// ones fail with their own layout error). A hold made with the Label option also keeps
// its label in the hash (field #l; a reader's or a permit's, <owner>#l). A wait that lasted the deadlock detection delay keeps a record in
// p{<request>}:waits, a hash of the request's waiting sections (see scripts/waits.lua),
// removed when the wait ends.
//
// # Operators
//
// Inspect reads what Redis holds for one lock — holders with their hold counts, tokens,
// time left, acquisition times and labels, the waiters, the fence — and List pages
// through the locks whose keys match a pattern, one bounded SCAN per call, on every
// primary of a Cluster; both write nothing. ForceRelease ends a stuck hold (read its
// dangers first) and announces it: a Locker that holds a lease listens for the
// announcements (one Pub/Sub connection per server, opened with its first hold) and
// renews a force-released hold at once, so the holder's lease ends within a round trip. The guardkit command (cmd/guardkit) does the same from a terminal; see
// docs/operators.md.
//
// # Telemetry
//
// Every acquisition is a span, guard.acquire, a child of the caller's span, covering the
// whole wait; its attributes are the lock name (the Name option, else the key template,
// else "unnamed"), the key (unless RedactKeys), the owner, the attempts made, the outcome
// (acquired, busy, deadlock, timeout, canceled, error), reentrancy and the fencing token;
// a deadlock's victim adds the event guard.deadlock (the cycle's length and keys). A lease
// held under a span adds events to it: guard.renewal_failed, guard.lease_lost,
// guard.released_late, and guard.released when the lock is released (its name, fencing
// token and the seconds held). No span covers the held section: the caller's own span
// does; the acquire span's end and the guard.released event bound it. While
// the tracer provider is a no-op (OpenTelemetry's default global one, until the
// application installs a real one), no span is started at all.
//
// Metrics, with the lock name and outcome as their only attributes: the histograms
// guard.lock.wait.duration and guard.lock.hold.duration (seconds), the counters
// guard.lock.acquisitions, guard.lock.lost and guard.lock.renewals, and the up-down
// counters guard.lock.active and guard.lock.waiters. Providers come from the Telemetry
// option, or the OpenTelemetry globals; the library depends on the OpenTelemetry API
// only.
//
// # Errors
//
// Sentinels for errors.Is — ErrLocked, ErrDeadlock, ErrLeaseLost, ErrNotHeld, ErrExpired,
// ErrUpgrade, ErrInvalidConfig, ErrInvalidKey, ErrUnavailable, ErrClosed — and typed errors
// for errors.As: *LockedError, *DeadlockError, *LeaseLostError, *ReleaseError,
// *ConfigError, *RedisError. Bad options fail in New (or in the call that received them)
// with a *ConfigError naming the field. A key is input, not configuration: one that is empty, too long or cannot be
// rendered is ErrInvalidKey wherever it comes from (an argument, RawKey, a template,
// KeyFunc, a route or an RPC), before any Redis call. A grant whose reply came back after
// the lease's validity had run out is undone and counts as an attempt; when it was the
// last one the policy allowed, the call fails with ErrUnavailable (Redis answered too
// slowly to grant a usable lease).
//
// # Concurrency
//
// Locker and Lease are safe for concurrent use. A Locker's background goroutines (the
// watchdog, the Pub/Sub receiver, compensating releases) end with Close; the watchdog also
// ends by itself whenever no lease is held.
package guard
