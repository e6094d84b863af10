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
	limitNone     limitKind = iota // until the context ends; the zero value
	limitAttempts                  // at most attempts attempts
	limitMaxWait                   // at most maxWait after the first attempt
)

// NoRetry makes a single attempt: a busy lock fails at once with ErrLocked.
func NoRetry() RetryPolicy { return RetryPolicy{limit: limitAttempts, attempts: 1} }

// Attempts makes at most n attempts in all (n ≥ 1), sleeping per b between them.
// A nil b means the default, Fixed(100*time.Millisecond, 100*time.Millisecond).
func Attempts(n int, b Backoff) RetryPolicy {
	return RetryPolicy{limit: limitAttempts, attempts: n, backoff: b}
}

// MaxWait keeps trying for at most d (d > 0) after the first attempt, sleeping per b
// between attempts. A nil b means the default.
func MaxWait(d time.Duration, b Backoff) RetryPolicy {
	return RetryPolicy{limit: limitMaxWait, maxWait: d, backoff: b}
}

// UntilCanceled keeps trying until the context ends, sleeping per b between attempts.
// A nil b means the default. It is the Locker's default policy.
func UntilCanceled(b Backoff) RetryPolicy { return RetryPolicy{backoff: b} }

// String describes the policy.
func (p RetryPolicy) String() string {
	switch {
	case p.limit == limitAttempts && p.attempts == 1:
		return "NoRetry"
	case p.limit == limitAttempts:
		return fmt.Sprintf("Attempts(%d, %v)", p.attempts, p.delay())
	case p.limit == limitMaxWait:
		return fmt.Sprintf("MaxWait(%s, %v)", p.maxWait, p.delay())
	default:
		return fmt.Sprintf("UntilCanceled(%v)", p.delay())
	}
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
		return &ConfigError{Field: field, Reason: fmt.Sprintf("max wait must be > 0, got %s", p.maxWait)}
	}
	if v, ok := p.backoff.(interface{ validate() error }); ok {
		if err := v.validate(); err != nil {
			return &ConfigError{Field: field, Reason: err.Error()}
		}
	}
	return nil
}

// Backoff gives the sleep after a failed attempt. Implementations must be safe for
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

func (f fixed) String() string { return fmt.Sprintf("Fixed(%s, %s)", f.delay, f.jitter) }

// Exponential sleeps base·2^(attempt−1), capped at max, with "equal jitter": a uniformly
// random value in the upper half of that delay.
func Exponential(base, max time.Duration) Backoff { return exponential{base: base, max: max} }

type exponential struct{ base, max time.Duration }

func (e exponential) Delay(attempt int) time.Duration {
	d := e.max
	if attempt < 1 {
		attempt = 1
	}
	if attempt <= 62 {
		if step := e.base << (attempt - 1); step > 0 && step < e.max && step>>(attempt-1) == e.base {
			d = step
		}
	}
	half := d / 2
	if half <= 0 {
		return d
	}
	return d - half + rand.N(half+1)
}

func (e exponential) validate() error {
	if e.base <= 0 || e.max < e.base {
		return fmt.Errorf("exponential backoff needs 0 < base ≤ max, got %s and %s", e.base, e.max)
	}
	return nil
}

func (e exponential) String() string { return fmt.Sprintf("Exponential(%s, %s)", e.base, e.max) }
