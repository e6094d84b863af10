// Package chaos is guardkit's fault and abuse suite: it runs the lock engine against
// real redis-server processes (a single server, a Redis Cluster, a Sentinel group) while
// Redis stalls, dies, fails over, loses replies, runs out of memory or refuses writes,
// and checks after every run that the engine kept its promises.
//
// The scenarios live in the package's tests. `make test` runs a smoke subset at small
// sizes; `make chaos` runs all of them at full size (build tag chaos) and prints the
// results table that docs/RELIABILITY.md shows. What the package exports is what the
// tests check with, usable on any history of critical sections:
//
//   - Mono, a reading of the host's monotonic clock that worker processes share;
//   - History, the record of a run: critical sections (enter, exit, validity deadline,
//     fencing token), lease losses, bounded calls and injected faults;
//   - the checks of the invariants below (Overlaps, TokenOrder, LateCalls, ExpiredAtEntry,
//     LateLosses, Unnoticed, History.Check);
//   - Register, a fenced register in Redis that plays the storage a guarded job writes
//     to, and its audit (AuditLog);
//   - Stalls, a probe of how late the scheduler runs each process;
//   - Report (History.Explain), what a failed run prints about each violation;
//   - Row and Markdown, the results table.
//
// # Invariants
//
// I1: no two critical sections on one key overlap while both holders' leases are valid
// (before their local validity deadlines). I2: no release, renewal or decrement ever
// changes another owner's state in Redis. I3: nothing outlives the Lockers: no
// goroutine after Close, and no lock left in Redis a TTL after. I4: no call returns
// more than a slack after its deadline (the context's for Acquire, the release timeout
// for Release), or, when the process saw the deadline late (Call.Fired), after that;
// and no Acquire hands out a lease more than a slack after the lease's validity
// deadline. I5: no hold without a caller that believes it holds it: a few seconds after
// Redis answers again, every hold Redis has carries a token an Acquire returned (checked
// by the rows whose faults freeze Redis past the callers' budgets). M2: a lost lease's context is cancelled no later than its validity deadline
// plus a slack, and a section that runs past that deadline finds its lease lost. M3:
// fencing tokens strictly increase per key in the order
// leases were granted. M4: the fenced register's value equals the number of
// acknowledged writes, and it applies no operation carrying a superseded token.
//
// # Failure reports
//
// A run that breaks an invariant says which one, on which key, with which fencing
// tokens, shows the history's events on that key (who acquired, left, released or lost
// it, when, with which token, and the faults) just before, during and just after the
// breach, and the scheduling lag each process measured meanwhile, next to the whole
// run's. A breach found while every process ran on time is the engine's; a late event
// whose process stalled about as long is the host's, and the report says which.
//
// # Clocks
//
// Sections of several processes are compared on CLOCK_MONOTONIC, which every process of
// a Linux host shares; MonoOf converts a time.Time read in this process (a Lease's
// ValidUntil, say) to it. On other systems Mono is per process.
package chaos
