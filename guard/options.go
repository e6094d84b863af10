package guard

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/guardkit/guardkit/guard/internal/store"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures a Locker (passed to New, where it sets the Locker's defaults), one
// acquisition (passed to Acquire, TryAcquire, Run and the decorators, where it overrides
// them) or a guarded call (Wrap, WrapE, Do and Run only: the key, the Locker, the
// conditions). Each
// option's comment says where it applies and what its default is. Options are values:
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
	scopeCall                     // New (as a default), Acquire, TryAcquire, Run, decorators
	scopeWrap                     // guarded calls only: Wrap, WrapE, Do, Run
)

// settings is the resolved configuration of a Locker or of one call.
type settings struct {
	inSet           bool // a set's keys (AcquireAll): their section holds the others as it waits
	prefix          string
	ttl             time.Duration
	renewEvery      time.Duration // Renewal's every, when renewSet; else ttl/3
	renewSet        bool
	drift           time.Duration // Renewal's margin, when driftSet; else ttl/100 + 2ms
	driftSet        bool
	maxKeyLen       int
	retry           RetryPolicy
	retrySet        bool // Retry was given: on New, or on the call
	releaseTimeout  time.Duration
	maxHold         time.Duration // 0: no limit
	fenceRetention  time.Duration
	name            string // lock name for telemetry; "" → the key template, else "unnamed"
	tracerProvider  trace.TracerProvider
	meterProvider   metric.MeterProvider
	redactKeys      bool
	syncReplicas    int           // replicas that must acknowledge a grant; 0: none
	syncTimeout     time.Duration // how long to wait for them
	kind            Kind          // the lock's kind (Read, Write, Permits, Fair)
	permits         int           // holders a semaphore admits (Permits)
	restartDelay    time.Duration // RestartDelay, when restartDelaySet
	restartDelaySet bool
	replyBudget     time.Duration // ReplyBudget, when replyBudgetSet; else derived (quorum.budget)
	replyBudgetSet  bool
	outageFails     bool          // WaitOutages(false)
	label           string        // Label's text; "" for none
	deadlockDelay   time.Duration // DeadlockDetection, when deadlockSet; else 1s (0 for a quorum)
	deadlockSet     bool

	spec *kindSpec   // kind's spec, set by validate
	t    store.Terms // the settings as the store takes them, set by validate (terms)

	wrap wrapSettings // read by the decorators, ignored by the engine
}

// wrapSettings are the options that only the decorators read.
type wrapSettings struct {
	use     runner // the Locker of Use; nil: the default Locker (SetDefault) at call time
	key     keySpec
	skip    any // func(context.Context, Req) bool, checked against Req by Wrap
	minHold time.Duration
}

// keySpec is how a decorator names its lock: the last of Key, Keys, RawKey, RawKeys and
// KeyFunc given.
type keySpec struct {
	kind keyKind
	text string // the template (keyTemplate) or the key (keyRaw)
	// texts are the templates (keyTemplates) or the keys (keyRaws) of a set of keys
	// (Keys, RawKeys).
	texts []string
	fn    any // func(context.Context, Req) (string, error), for keyFunc
}

type keyKind uint8

const (
	keyNone keyKind = iota
	keyTemplate
	keyRaw
	keyFunc
	keyTemplates
	keyRaws
)

func defaultSettings() settings {
	return settings{
		prefix:         "guard:",
		ttl:            30 * time.Second,
		maxKeyLen:      1024,
		retry:          MaxWait(-1, nil),
		releaseTimeout: 5 * time.Second,
		fenceRetention: defaultFenceRetention,
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

// validate checks the settings, naming the first field that is wrong, and computes the
// scripts' arguments that follow from them.
func (s *settings) validate() error {
	if err := s.checkLease(); err != nil {
		return err
	}
	if err := s.checkBounds(); err != nil {
		return err
	}
	if err := s.checkReplicas(); err != nil {
		return err
	}
	if err := s.retry.validate("Retry"); err != nil {
		return err
	}
	if err := s.validateLabel(); err != nil {
		return err
	}
	if s.kind == KindSemaphore && s.permits < 1 {
		return &ConfigError{Field: "Permits", Reason: fmt.Sprintf("must be ≥ 1, got %d", s.permits)}
	}
	if s.spec = specOf(s.kind); s.spec == nil {
		return &ConfigError{Field: "Kind", Reason: fmt.Sprintf("unknown lock kind %s", s.kind)}
	}
	s.terms()
	return nil
}

// terms fills in s.t from the other settings.
func (s *settings) terms() {
	s.t = store.Terms{Spec: &s.spec.ops, TTL: s.ttl, Validity: s.ttl - s.driftMargin(), Retention: s.fenceRetention,
		SyncReplicas: s.syncReplicas, SyncTimeout: s.syncTimeout}
	if s.kind == KindSemaphore {
		s.t.Permits = s.permits
	}
	s.t.Fill()
}

// checkLease checks the lease's clocks: the TTL, the renewal period and the drift margin.
func (s *settings) checkLease() *ConfigError {
	switch {
	case strings.ContainsAny(s.prefix, "{}"):
		return &ConfigError{Field: "Prefix", Reason: fmt.Sprintf("must not contain '{' or '}' (they would break the key's hash tag), got %q", s.prefix)}
	case s.ttl < time.Millisecond:
		return &ConfigError{Field: "TTL", Reason: fmt.Sprintf("must be ≥ 1ms, got %s", s.ttl)}
	case s.renewSet && s.renewEvery <= 0:
		return &ConfigError{Field: "Renewal", Reason: fmt.Sprintf("every must be > 0 (or 0 for the default, TTL/3), got %s", s.renewEvery)}
	case s.driftSet && (s.drift < 0 || s.drift >= s.ttl):
		return &ConfigError{Field: "Renewal", Reason: fmt.Sprintf("margin must be ≥ 0 (0 for the default, TTL/100 + 2ms) and < TTL (%s), got %s", s.ttl, s.drift)}
	case !s.renewSet && !s.driftSet && s.ttl-s.driftMargin() <= s.ttl/3:
		return &ConfigError{Field: "TTL", Reason: fmt.Sprintf("must be > 4ms with the default renewal period and drift margin, got %s", s.ttl)}
	case s.renewInterval() <= 0 || s.renewInterval() >= s.ttl-s.driftMargin():
		return &ConfigError{Field: "Renewal", Reason: fmt.Sprintf("every must be > 0 and < TTL − margin (%s − %s), got %s",
			s.ttl, s.driftMargin(), s.renewInterval())}
	}
	return nil
}

// checkBounds checks the limits and timeouts that stand alone.
func (s *settings) checkBounds() *ConfigError {
	switch {
	case s.maxKeyLen < 1:
		return &ConfigError{Field: "MaxKeyLen", Reason: fmt.Sprintf("must be ≥ 1, got %d", s.maxKeyLen)}
	case s.releaseTimeout <= 0:
		return &ConfigError{Field: "ReleaseTimeout", Reason: fmt.Sprintf("must be > 0, got %s", s.releaseTimeout)}
	case s.maxHold < 0:
		return &ConfigError{Field: "MaxHold", Reason: fmt.Sprintf("must be ≥ 0 (0 means no limit), got %s", s.maxHold)}
	case s.fenceRetention < time.Second:
		return &ConfigError{Field: "FenceRetention", Reason: fmt.Sprintf("must be ≥ 1s, got %s", s.fenceRetention)}
	case s.wrap.minHold < 0:
		return &ConfigError{Field: "MinHold", Reason: fmt.Sprintf("must be ≥ 0 (0 means none), got %s", s.wrap.minHold)}
	case s.replyBudgetSet && s.replyBudget <= 0:
		return &ConfigError{Field: "ReplyBudget", Reason: fmt.Sprintf("must be > 0, got %s", s.replyBudget)}
	case s.restartDelay < 0:
		return &ConfigError{Field: "RestartDelay", Reason: fmt.Sprintf("must be ≥ 0 (0 turns the check off), got %s", s.restartDelay)}
	}
	return nil
}

// apply applies opts on top of s, refusing options outside allowed.
func (s *settings) apply(opts []Option, allowed scope, where string) error {
	for _, o := range opts {
		if o.apply == nil {
			continue
		}
		if o.scope&allowed == 0 {
			hint := "set it on New"
			if o.scope == scopeWrap {
				hint = "it applies to Wrap, WrapE, Do and Locker.Run only"
			}
			return &ConfigError{Field: o.name, Reason: "cannot be set on " + where + "; " + hint}
		}
		o.apply(s)
	}
	return s.validate()
}

// Read makes the lock the shared (read) mode of the key's read-write lock: any number of
// owners hold it together while nobody holds the write mode. Writers go first: once a
// writer waits, new readers wait behind it (a writer that stops asking, having given up
// or died, holds them back for at most its TTL). Each reader's hold is a lease of its
// own, renewed by its own watchdog: a reader that dies frees its share after its TTL
// while the others keep theirs. A reader's fencing token comes from the counter the
// writers' tokens come from: it exceeds the token of every writer that held the lock
// before it, and every later writer's token exceeds it.
// Applies to each call (given to New, it is the default kind). Default: exclusive.
func Read() Option {
	return Option{name: "Read", scope: scopeCall, apply: func(s *settings) { s.kind = KindRead }}
}

// Write makes the lock the exclusive (write) mode of the key's read-write lock: one owner
// holds it, and no reader. Its owner may also take the read mode (a downgrade: release the
// write hold and keep reading); an owner that holds the read mode and asks to write fails
// at once with ErrUpgrade instead of deadlocking. Writers' fencing tokens strictly
// increase and exceed every earlier reader's and writer's.
// Applies to each call (given to New, it is the default kind). Default: exclusive.
func Write() Option {
	return Option{name: "Write", scope: scopeCall, apply: func(s *settings) { s.kind = KindWrite }}
}

// Permits makes the lock a semaphore: at most n owners hold it at once (n ≥ 1). Each
// permit is a lease of its own, renewed by its own watchdog and carrying its own fencing
// token; a holder that dies frees its permit after its TTL. n belongs to the call, not to
// the key: an acquisition waits while n or more owners hold permits, whatever n they
// were admitted under, so lowering n takes effect as holders leave (nobody is evicted)
// and raising it admits more at once. Give every call site of a key the same n unless
// that is what you want.
// Applies to each call (given to New, it is the default kind). Default: exclusive.
func Permits(n int) Option {
	return Option{name: "Permits", scope: scopeCall, apply: func(s *settings) { s.kind, s.permits = KindSemaphore, n }}
}

// Fair makes the lock exclusive and strictly first-come, first-served across processes:
// owners are queued in Redis in the order they first found it busy, and a release grants
// it, in Redis, to the first of them, which claims it when the announcement wakes it. An
// owner keeps its place by asking again within its TTL (waiters are told to ask within a
// third of it): one that gave up leaves the queue at once, one that died loses its place
// after its TTL, and a grant not claimed within the grantee's TTL passes on. TryAcquire
// never jumps the queue.
// Applies to each call (given to New, it is the default kind). Default: exclusive.
func Fair() Option {
	return Option{name: "Fair", scope: scopeCall, apply: func(s *settings) { s.kind = KindFair }}
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

// Renewal sets a lease's clocks. every is the watchdog period: while a lease is held, its
// TTL is reset this often. margin, the drift margin, is subtracted from the TTL to get a
// lease's local validity: a lease not renewed within TTL − margin of the last successful
// renewal (measured from before the request was sent) is treated as lost. It covers
// clock-rate drift between this process and Redis. margin must be shorter than the TTL,
// and every shorter than TTL − margin.
//
// 0 for either leaves it as it was: given to New, its default; given to a call, the
// Locker's. So Renewal(0, 50*time.Millisecond) changes the margin only.
// Applies to New and to each call. Default every TTL/3, margin TTL/100 + 2ms.
func Renewal(every, margin time.Duration) Option {
	return Option{name: "Renewal", scope: scopeLocker | scopeCall, apply: func(s *settings) {
		if every != 0 {
			s.renewEvery, s.renewSet = every, true
		}
		if margin != 0 {
			s.drift, s.driftSet = margin, true
		}
	}}
}

// MaxKeyLen caps the length of a lock key in bytes for acquisitions: a longer key fails
// with ErrInvalidKey before any Redis call. Reading and ending locks (Inspect,
// InspectKinds, List, ForceRelease) take keys of any length, so that an operator with
// default settings can see and end a lock a Locker with a higher limit took.
// Applies to New. Default 1024.
func MaxKeyLen(n int) Option {
	return Option{name: "MaxKeyLen", scope: scopeLocker, apply: func(s *settings) { s.maxKeyLen = n }}
}

// Retry sets how an acquisition waits for a busy lock. Given to a call (Acquire, a
// decorator, an Echo route, a gRPC rule) it applies to that call; given to New it is the
// default of every call that sets none. TryAcquire always makes one attempt.
// Applies to New and to each call. Default: Acquire waits until its context ends
// (MaxWait(-1, Fixed(100ms, 100ms))); the entry points that serve requests — Wrap,
// WrapE, Do, Locker.Run, the Echo middleware and the gRPC interceptors — wait at most 5s
// (MaxWait(5*time.Second, Fixed(100ms, 100ms))), so that a stuck holder can never keep
// a server's requests waiting without end.
func Retry(p RetryPolicy) Option {
	return Option{name: "Retry", scope: scopeLocker | scopeCall, apply: func(s *settings) { s.retry, s.retrySet = p, true }}
}

// WaitOutages sets what an acquisition that may wait does when Redis cannot be reached or
// its primary is moving (refused connections, timeouts, READONLY, LOADING, CLUSTERDOWN,
// too few quorum servers): with true, it waits the outage out like a busy
// lock, with the same backoff, while its Retry policy and context allow, and is granted
// once Redis serves again (a failover completes); with false it fails at once with
// ErrUnavailable. The Echo middleware and the gRPC interceptors set false on fail-open
// routes and methods, which run their handler unlocked instead.
// Applies to New and to each call. Default true.
func WaitOutages(wait bool) Option {
	return Option{name: "WaitOutages", scope: scopeLocker | scopeCall, apply: func(s *settings) { s.outageFails = !wait }}
}

// defaultMaxWait is how long the entry points that serve requests (Wrap, WrapE, Do,
// Locker.Run, the Echo middleware and the gRPC interceptors) wait for a busy lock when no
// Retry option is given, on the call or on New. Waiting also ends with the request's
// context.
const defaultMaxWait = 5 * time.Second

// entryRetry is the retry policy of an entry point that serves requests.
func (s *settings) entryRetry() {
	if !s.retrySet {
		s.retry = MaxWait(defaultMaxWait, nil)
	}
}

// ReleaseTimeout bounds a release's Redis call. Release ignores the caller's
// cancellation (a cancelled request must still free its lock) but not this timeout.
// With a client that honours context deadlines (go-redis: ContextTimeoutEnabled) the
// call runs inline; with another, it runs on a goroutine so that Release still returns
// in time.
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

// defaultFenceRetention is the FenceRetention of a Locker made without one.
const defaultFenceRetention = 10 * time.Second

// FenceRetention is how long a key's fence record (its last token, and the nonces of its
// last releases, by which a client's retry of a release is recognised) is kept after the
// key's last release (or, until then, after its first acquisition; a record that expires
// while a lock is held is written again by the release, from the hold's token). Once it
// has expired, a key leaves nothing in Redis, so memory follows what is held and what was
// released within d, not every key ever locked. Tokens keep rising after it expires: a
// new one is the Redis server's clock in microseconds, and the record only keeps them
// rising while the clock is behind the last token. The price of a short d: a server clock
// stepped backwards by more than d (or a failover to a replica whose clock is more than d
// behind) between two holds of one key, d apart, can hand out a token below an earlier
// one; and a client retry of a release that arrives more than d later reports ErrExpired
// instead of success. Keep server clocks disciplined (slewed), or raise d. It must be ≥ 1s.
// Applies to New. Default 10s (it was 1h: at 5,000 distinct keys a second that kept
// 18 million records, about 4 GB).
func FenceRetention(d time.Duration) Option {
	return Option{name: "FenceRetention", scope: scopeLocker, apply: func(s *settings) { s.fenceRetention = d }}
}

// Key names the lock of a decorated call with a key template (see package keyfunc):
// literal text with placeholders such as "account:{req.From}", where {req.Path} reads a
// field of the wrapped function's request by `key` tag, Go name or `json` tag, through
// nested structs, pointers and maps, and {req} is the request itself. Rendered values
// are escaped so that different requests never share a key by accident (keyfunc's
// "Escaping").
//
// The template is parsed once, by Wrap: a syntax error, an unknown source or a field that
// Req does not have fails there. A request whose value is missing (a nil pointer on the
// path) or empty fails the call with an error matching ErrInvalidKey. Do and Locker.Run
// have no request, so their template must have no placeholders. Never build the text from request data: it
// is parsed as a template; use a {req...} placeholder, KeyFunc or RawKey.
//
// Applies to Wrap, WrapE, Do and Locker.Run, which need a key: the last of Key, Keys,
// RawKey, RawKeys and KeyFunc given wins. No default.
func Key(template string) Option {
	return Option{name: "Key", scope: scopeWrap, apply: func(s *settings) { s.wrap.key = keySpec{kind: keyTemplate, text: template} }}
}

// RawKey names the lock of a decorated call with key exactly as given: braces are not
// placeholders. It is how Do and Locker.Run take a key computed in code, such as
// "order:" + id.
// Applies to Wrap, WrapE, Do and Locker.Run; the last of Key, Keys, RawKey, RawKeys and
// KeyFunc given wins. No default.
func RawKey(key string) Option {
	return Option{name: "RawKey", scope: scopeWrap, apply: func(s *settings) { s.wrap.key = keySpec{kind: keyRaw, text: key} }}
}

// KeyFunc names the lock of a decorated call with a function of the call's context and
// request, for keys a template cannot express. Req must be the wrapped function's
// request type; Wrap checks it. An error from f fails the call with an error matching
// ErrInvalidKey, with f's error in its chain. A nil f is ignored.
// Applies to Wrap and WrapE; the last of Key, Keys, RawKey, RawKeys and KeyFunc given
// wins. No default.
func KeyFunc[Req any](f func(ctx context.Context, req Req) (string, error)) Option {
	if f == nil {
		return Option{}
	}
	return Option{name: "KeyFunc", scope: scopeWrap, apply: func(s *settings) { s.wrap.key = keySpec{kind: keyFunc, fn: f} }}
}

// Use makes a decorator take its locks from l. A nil l is ignored.
// Applies to Wrap, WrapE and Do; Locker.Run accepts only its own Locker. Default: the
// Locker given to SetDefault, looked up at each call.
func Use(l *Locker) Option {
	if l == nil {
		return Option{}
	}
	return Option{name: "Use", scope: scopeWrap, apply: func(s *settings) { s.wrap.use = l }}
}

// SkipIf makes a decorated call run without a lock when skip reports true for its
// context and request: no owner, key or Redis call, and the function gets the caller's
// context as it is. Req must be the wrapped function's request type; Wrap checks it. A
// nil skip is ignored.
// Applies to Wrap and WrapE. Default: never skip.
func SkipIf[Req any](skip func(ctx context.Context, req Req) bool) Option {
	if skip == nil {
		return Option{}
	}
	return Option{name: "SkipIf", scope: scopeWrap, apply: func(s *settings) { s.wrap.skip = skip }}
}

// MinHold keeps the lock of a decorated call for at least d after it was acquired, like
// ShedLock's lockAtLeastFor: a scheduled job that runs on every node then runs once per
// period even when it finishes quickly and the nodes' clocks differ a little. The call
// returns as soon as the function does; when that is sooner than d, the lock is released
// in the background at acquisition + d (renewed until then, and released at once if the
// Locker is closed; Close waits for such releases). A lease lost while the function ran
// is released at once. d must be ≥ 0 and not above MaxHold.
// Applies to Wrap, WrapE, Do and Locker.Run. Default 0: release when the function
// returns.
func MinHold(d time.Duration) Option {
	return Option{name: "MinHold", scope: scopeWrap, apply: func(s *settings) { s.wrap.minHold = d }}
}

// Name names the lock in telemetry: the guard.lock.name attribute of spans and metrics.
// Keep names few (a route, a method, a key template), never a rendered key.
// Applies to New (as a default) and to each call. Default: the key template for Key,
// else "unnamed". The Echo middleware and gRPC interceptors default to the route and the
// method.
func Name(name string) Option {
	return Option{name: "Name", scope: scopeLocker | scopeCall, apply: func(s *settings) { s.name = name }}
}

// Telemetry sets where guard's spans (the guard.acquire spans and their events) and
// metrics go. A nil provider leaves that one as it was.
// Applies to New. Default: the global providers, otel.GetTracerProvider() and
// otel.GetMeterProvider().
func Telemetry(tp trace.TracerProvider, mp metric.MeterProvider) Option {
	return Option{name: "Telemetry", scope: scopeLocker, apply: func(s *settings) {
		if tp != nil {
			s.tracerProvider = tp
		}
		if mp != nil {
			s.meterProvider = mp
		}
	}}
}

// RedactKeys leaves the rendered key (guard.lock.key) out of spans, for keys that hold
// personal data. Metrics never carry it.
// Applies to New. Default: keys are recorded on spans.
func RedactKeys() Option {
	return Option{name: "RedactKeys", scope: scopeLocker, apply: func(s *settings) { s.redactKeys = true }}
}
