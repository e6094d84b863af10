package semconv

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the OpenTelemetry instrumentation scope of guard's spans and metrics.
const ScopeName = "github.com/guardkit/guardkit/guard"

// Version is the instrumentation scope version of guard's spans and metrics: the version
// of the guardkit code it is in.
const Version = "0.1.0"

// Attribute keys of guard's spans, events and metrics.
const (
	AttrLockName    = attribute.Key("guard.lock.name")     // the lock name: guard.Name option, else the key template
	AttrLockKind    = attribute.Key("guard.lock.kind")     // the lock's guard.Kind: exclusive, read, write, semaphore, fair
	AttrLockKey     = attribute.Key("guard.lock.key")      // the rendered key (spans only; see guard.RedactKeys)
	AttrOwner       = attribute.Key("guard.owner")         // the owner ID: the caller's, then the holding section's (spans only)
	AttrOutcome     = attribute.Key("guard.outcome")       // acquired, busy, deadlock, timeout, canceled, error; ok, failed, lost for renewals
	AttrAttempts    = attribute.Key("guard.attempts")      // acquire round trips made
	AttrReentrant   = attribute.Key("guard.reentrant")     // the owner already held the lock
	AttrToken       = attribute.Key("guard.fencing_token") // the lease's fencing token
	AttrWaitSeconds = attribute.Key("guard.wait.seconds")  // time spent acquiring
	AttrHoldSeconds = attribute.Key("guard.hold.seconds")  // time held, on the guard.released event
)

// AttrCycleKeys lists the keys of a deadlock's cycle on the guard.deadlock event (unless
// guard.RedactKeys); AttrCycleLen counts its waits.
const (
	AttrCycleKeys = attribute.Key("guard.deadlock.keys")
	AttrCycleLen  = attribute.Key("guard.deadlock.length")
)

// Outcomes of an acquisition, as recorded in AttrOutcome.
const (
	OutcomeAcquired = "acquired" // the lease was granted
	OutcomeBusy     = "busy"     // the retry policy gave up on a held lock
	OutcomeDeadlock = "deadlock" // the wait was chosen to end a deadlock (guard.ErrDeadlock)
	OutcomeTimeout  = "timeout"  // a deadline (the policy's MaxWait or the context's) ended the wait
	OutcomeCanceled = "canceled" // the context was cancelled
	OutcomeError    = "error"    // Redis failed, or the key or configuration was invalid
)
