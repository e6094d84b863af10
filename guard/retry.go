package guard

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides how long an acquisition waits for a busy lock. A policy is an
// immutable value: one policy can be shared by any number of concurrent calls, each of
// which keeps its own attempt count.
//
// Waiting is driven by release notifications, so a waiter normally retries the moment the
// lock is freed; the policy's Backoff only bounds how long a waiter sleeps when no
// notification comes (a lost message, a holder that crashed and let its TTL run out).
// The sleep never exceeds the holder's remaining TTL, nor the policy's or the context's
// deadline.
type RetryPolicy struct {
	limit    limitKind
	attempts int           // total attempts, for limitAttempts
	maxWait  time.Duration // for limitMaxWait
	backoff  Backoff
}

type limitKind uint8

const (
	limitNone     limitKind = iota // until the context ends (MaxWait(d < 0)); the zero value
	limitAttempts                  // at most attempts attempts (NoRetry: 1)
	limitMaxWait                   // at most maxWait after the first attempt
)

// NoRetry makes a single attempt: a busy lock fails at once with ErrLocked.
func NoRetry() RetryPolicy { return RetryPolicy{limit: limitAttempts, attempts: 1} }

// MaxWait keeps trying for at most d after the first attempt, sleeping per b between
// attempts. A negative d keeps trying until the context ends, which is Acquire's default
// (as a negative MaxWait does in the Echo middleware's LockConfig); d = 0 is refused with
// a *ConfigError, so that a wait left unset in a configuration never means "forever" —
// to make one attempt, use NoRetry. A nil b means the default, Fixed(100*time.Millisecond,
// 100*time.Millisecond).
func MaxWait(d time.Duration, b Backoff) RetryPolicy {
	if d < 0 {
		return RetryPolicy{backoff: b} // the zero limit: until the context ends
	}
	return RetryPolicy{limit: limitMaxWait, maxWait: d, backoff: b}
}

func (p RetryPolicy) delay() Backoff {
	if p.backoff == nil {
		return defaultBackoff
	}
	return p.backoff
}

func (p RetryPolicy) validate(field string) error {
	switch {
	case p.limit == limitAttempts && p.attempts < 1:
		return &ConfigError{Field: field, Reason: fmt.Sprintf("attempts must be ≥ 1, got %d", p.attempts)}
	case p.limit == limitMaxWait && p.maxWait <= 0:
		return &ConfigError{Field: field, Reason: fmt.Sprintf("max wait must be > 0, or negative to wait until the context ends; got %s (for one attempt, use NoRetry)", p.maxWait)}
	}
	if v, ok := p.backoff.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return &ConfigError{Field: field, Reason: err.Error()}
		}
	}
	return nil
}

// Backoff gives the sleep after a failed attempt. Fixed is the package's; another shape
// (exponential, say) is a type with a Delay method. Implementations must be safe for
// concurrent use and keep no per-call state: attempt carries it.
type Backoff interface {
	// Delay returns the sleep after the attempt-th failed attempt (attempt ≥ 1).
	Delay(attempt int) time.Duration
}

var defaultBackoff Backoff = fixed{delay: 100 * time.Millisecond, jitter: 100 * time.Millisecond}

// Fixed sleeps delay plus a uniformly random extra in [0, jitter) after every failed
// attempt: the shape of the classic lock-and-retry loop, with jitter so that waiters do
// not retry in lockstep.
func Fixed(delay, jitter time.Duration) Backoff { return fixed{delay: delay, jitter: jitter} }

type fixed struct{ delay, jitter time.Duration }

func (f fixed) Delay(int) time.Duration {
	d := f.delay
	if f.jitter > 0 {
		d += rand.N(f.jitter)
	}
	return d
}

func (f fixed) validate() error {
	if f.delay < 0 || f.jitter < 0 || f.delay+f.jitter <= 0 {
		return fmt.Errorf("fixed backoff needs delay ≥ 0, jitter ≥ 0 and delay+jitter > 0, got %s and %s", f.delay, f.jitter)
	}
	return nil
}
