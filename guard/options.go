package guard

import (
	"fmt"
	"strings"
	"time"
)

// Option configures a Locker (passed to New, where it sets the Locker's defaults) or one
// acquisition (passed to Acquire, TryAcquire and the decorators, where it overrides them).
// Each option's comment says where it applies and what its default is. Options are values:
// build them once and reuse them freely.
type Option struct {
	name  string
	scope scope
	apply func(*settings)
}

// scope says where an option may be used.
type scope uint8

const (
	scopeLocker scope = 1 << iota // New
	scopeCall                     // New (as a default), Acquire, TryAcquire, decorators
)

// settings is the resolved configuration of a Locker or of one call.
type settings struct {
	prefix         string
	ttl            time.Duration
	renewEvery     time.Duration // when renewSet; else ttl/3
	renewSet       bool
	drift          time.Duration // when driftSet; else ttl/100 + 2ms
	driftSet       bool
	maxKeyLen      int
	retry          RetryPolicy
	releaseTimeout time.Duration
	maxHold        time.Duration // 0: no limit
	fenceRetention time.Duration
}

func defaultSettings() settings {
	return settings{
		prefix:         "guard:",
		ttl:            30 * time.Second,
		maxKeyLen:      1024,
		retry:          UntilCanceled(nil),
		releaseTimeout: 5 * time.Second,
		fenceRetention: time.Hour,
	}
}

// renewInterval is the watchdog period in force.
func (s *settings) renewInterval() time.Duration {
	if s.renewSet {
		return s.renewEvery
	}
	return s.ttl / 3
}

// driftMargin is the part of the TTL the local validity clock gives up to cover clock
// drift between this process and Redis and the time a reply spends in flight.
func (s *settings) driftMargin() time.Duration {
	if s.driftSet {
		return s.drift
	}
	return s.ttl/100 + 2*time.Millisecond
}

func (s *settings) validate() error {
	switch {
	case strings.ContainsAny(s.prefix, "{}"):
		return &ConfigError{Field: "Prefix", Reason: fmt.Sprintf("must not contain '{' or '}' (they would break the key's hash tag), got %q", s.prefix)}
	case s.ttl < time.Millisecond:
		return &ConfigError{Field: "TTL", Reason: fmt.Sprintf("must be ≥ 1ms, got %s", s.ttl)}
	case s.renewSet && s.renewEvery <= 0:
		return &ConfigError{Field: "RenewEvery", Reason: fmt.Sprintf("must be > 0, got %s", s.renewEvery)}
	case s.driftSet && (s.drift < 0 || s.drift >= s.ttl):
		return &ConfigError{Field: "DriftMargin", Reason: fmt.Sprintf("must be ≥ 0 and < TTL (%s), got %s", s.ttl, s.drift)}
	case !s.renewSet && !s.driftSet && s.ttl-s.driftMargin() <= s.ttl/3:
		return &ConfigError{Field: "TTL", Reason: fmt.Sprintf("must be > 4ms with the default renewal period and drift margin, got %s", s.ttl)}
	case s.renewInterval() <= 0 || s.renewInterval() >= s.ttl-s.driftMargin():
		return &ConfigError{Field: "RenewEvery", Reason: fmt.Sprintf("must be > 0 and < TTL − drift margin (%s − %s), got %s",
			s.ttl, s.driftMargin(), s.renewInterval())}
	case s.maxKeyLen < 1:
		return &ConfigError{Field: "MaxKeyLen", Reason: fmt.Sprintf("must be ≥ 1, got %d", s.maxKeyLen)}
	case s.releaseTimeout <= 0:
		return &ConfigError{Field: "ReleaseTimeout", Reason: fmt.Sprintf("must be > 0, got %s", s.releaseTimeout)}
	case s.maxHold < 0:
		return &ConfigError{Field: "MaxHold", Reason: fmt.Sprintf("must be ≥ 0 (0 means no limit), got %s", s.maxHold)}
	case s.fenceRetention < time.Second:
		return &ConfigError{Field: "FenceRetention", Reason: fmt.Sprintf("must be ≥ 1s, got %s", s.fenceRetention)}
	}
	return s.retry.validate("Retry")
}

// apply applies opts on top of s, refusing options outside allowed.
func (s *settings) apply(opts []Option, allowed scope, where string) error {
	for _, o := range opts {
		if o.apply == nil {
			continue
		}
		if o.scope&allowed == 0 {
			return &ConfigError{Field: o.name, Reason: "cannot be set on " + where + "; set it on New"}
		}
		o.apply(s)
	}
	return s.validate()
}

// Prefix is prepended to every Redis key and channel the Locker uses, so that several
// applications can share one Redis. It must not contain '{' or '}'.
// Applies to New. Default "guard:".
func Prefix(p string) Option {
	return Option{name: "Prefix", scope: scopeLocker, apply: func(s *settings) { s.prefix = p }}
}

// TTL is the lease time: how long Redis keeps a lock whose holder stopped renewing it,
// for example because its process died. It must be ≥ 1ms.
// Applies to New and to each call. Default 30s.
func TTL(d time.Duration) Option {
	return Option{name: "TTL", scope: scopeLocker | scopeCall, apply: func(s *settings) { s.ttl = d }}
}

// RenewEvery is the watchdog period: while a lease is held, its TTL is reset this often.
// It must be shorter than the TTL minus the drift margin.
// Applies to New and to each call. Default TTL/3.
func RenewEvery(d time.Duration) Option {
	return Option{name: "RenewEvery", scope: scopeLocker | scopeCall, apply: func(s *settings) { s.renewEvery, s.renewSet = d, true }}
}

// DriftMargin is subtracted from the TTL to get a lease's local validity: a lease not
// renewed within TTL − DriftMargin of the last successful renewal (measured from before
// the request was sent) is treated as lost. It covers clock-rate drift between this
// process and Redis.
// Applies to New and to each call. Default TTL/100 + 2ms.
func DriftMargin(d time.Duration) Option {
	return Option{name: "DriftMargin", scope: scopeLocker | scopeCall, apply: func(s *settings) { s.drift, s.driftSet = d, true }}
}

// MaxKeyLen caps the length of a lock key in bytes; longer keys fail with ErrInvalidKey
// before any Redis call.
// Applies to New. Default 1024.
func MaxKeyLen(n int) Option {
	return Option{name: "MaxKeyLen", scope: scopeLocker, apply: func(s *settings) { s.maxKeyLen = n }}
}

// Retry sets how Acquire waits for a busy lock. TryAcquire always makes one attempt.
// Applies to New and to each call. Default UntilCanceled(Fixed(100ms, 100ms)).
func Retry(p RetryPolicy) Option {
	return Option{name: "Retry", scope: scopeLocker | scopeCall, apply: func(s *settings) { s.retry = p }}
}

// ReleaseTimeout bounds a release's Redis call. Release ignores the caller's
// cancellation (a cancelled request must still free its lock) but not this timeout.
// Applies to New. Default 5s.
func ReleaseTimeout(d time.Duration) Option {
	return Option{name: "ReleaseTimeout", scope: scopeLocker, apply: func(s *settings) { s.releaseTimeout = d }}
}

// MaxHold caps the total time a lease is held: renewal never extends it past
// acquisition + d, and at that moment the lease is lost (its context is cancelled with
// ErrLeaseLost). Zero means no cap.
// Applies to New and to each call. Default 0.
func MaxHold(d time.Duration) Option {
	return Option{name: "MaxHold", scope: scopeLocker | scopeCall, apply: func(s *settings) { s.maxHold = d }}
}

// FenceRetention is how long a key's fencing counter is kept after its last acquisition
// or release. Tokens keep rising after it expires (they never fall below the Redis
// server's clock in microseconds), so this only trades memory for robustness against a
// server clock that steps backwards. It must be ≥ 1s.
// Applies to New. Default 1h.
func FenceRetention(d time.Duration) Option {
	return Option{name: "FenceRetention", scope: scopeLocker, apply: func(s *settings) { s.fenceRetention = d }}
}
