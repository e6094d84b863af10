package httpguard

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/httplock"
)

// Skipper reports whether the middleware should let a request through unlocked.
type Skipper = func(r *http.Request) bool

// Extractor reads one value of a request for a lock key, for anything the built-in
// sources cannot reach (an authenticated user, a cookie, a value an earlier middleware
// put in the request's context).
type Extractor = func(r *http.Request) (string, error)

// PathValueFunc reads the path value name of a request as the router matched it, "" when
// there is none. (*http.Request).PathValue is one (the default), chi.URLParam another;
// for gorilla/mux write func(r *http.Request, name string) string { return
// mux.Vars(r)[name] }.
type PathValueFunc = func(r *http.Request, name string) string

// LockConfig defines the config for the Lock middleware.
type LockConfig struct {
	// Skipper defines a function to skip the middleware: a request it reports true for
	// runs unlocked, with no owner or key.
	// Optional. Default value nil (never skip).
	Skipper Skipper

	// Locker hands out the leases.
	// Required.
	Locker *guard.Locker

	// Key is the key template that names each request's lock, such as
	// "order:{path.id}" (see package keyfunc for the syntax). Sources: {path.name}
	// (the path value as PathValue returns it: what the handler reads), {query.name}
	// (first value, decoded once), {header.Name} (first value, as sent), {route} (the
	// matched pattern, as Route returns it), {method}, and one bare {name} per entry of
	// Extractors. The rendered text is the whole lock key: two routes whose templates
	// render the same text share one lock.
	// Required.
	Key string

	// MoreKeys are further key templates, with Key's sources: the request takes the
	// lock of Key and those of MoreKeys as one lock (guard.Locker.AcquireAll): all or
	// none, in one canonical order whatever order they are listed in, under one lease,
	// each key with its own fencing token (guard.Lease.Tokens). A transfer between two
	// accounts locks both: Key "account:{path.from}", MoreKeys
	// []string{"account:{path.to}"}. Keys that render the same count once.
	// Optional. Default value nil.
	MoreKeys []string

	// PathValue reads {path.name} placeholders. Set it to chi.URLParam for chi, or to a
	// function over mux.Vars for gorilla/mux.
	// Optional. Default value nil: (*http.Request).PathValue, the standard ServeMux's
	// wildcards (Go 1.22 patterns such as "POST /orders/{id}").
	PathValue PathValueFunc

	// Route returns the route pattern that matched the request, for {route}, for the
	// lock's name in telemetry, and to tell a template naming a path value the route
	// does not have (a mistake: 500) from a value that is empty (400). For chi:
	// func(r *http.Request) string { return chi.RouteContext(r.Context()).RoutePattern() };
	// for gorilla/mux, mux.CurrentRoute(r).GetPathTemplate.
	// Optional. Default value nil: r.Pattern, set by the standard ServeMux.
	Route func(r *http.Request) string

	// Extractors adds template sources: Extractors["user"] is read by the placeholder
	// {user}. Names match [a-z][a-z0-9_]* and must differ from the built-in sources.
	// An extractor's error fails the request's key (ErrorHandler; 400 by default, or
	// the status of an *Error it returns).
	// Optional. Default value nil.
	Extractors map[string]Extractor

	// TTL is the lease time (see guard.TTL): how long the lock outlives a process that
	// died holding it. The lease is renewed while the handler runs, however long.
	// Optional. Default value 0: the Locker's TTL.
	TTL time.Duration

	// MaxWait is how long a request waits for a busy lock before DenyHandler answers
	// it. Waiters are woken by the holder's release, not by polling. A negative value
	// waits until the request's context ends. Waiting always ends with the request's
	// context. To deny a busy lock at once, set Options:
	// []guard.Option{guard.Retry(guard.NoRetry())}; a guard.Retry in Options overrides
	// MaxWait.
	// Optional. Default value 0: the Retry given to the Locker's guard.New, else at
	// most 5s.
	MaxWait time.Duration

	// Options are further guard options for each acquisition, such as guard.Renewal,
	// guard.Read or guard.MaxHold. They apply after TTL and MaxWait, so a guard.TTL or
	// guard.Retry here overrides those fields; options that name the key or the Locker
	// are overridden by Key and Locker.
	// Optional. Default value nil.
	Options []guard.Option

	// Signer verifies the owner token a calling service sends in the ctxid.Header
	// header ("Guardkit-Owner", as Transport sends it): a request whose token verifies
	// runs as that owner and reenters the locks it holds. Anything else — no Signer
	// here, a bad or expired token, several headers, oversized text — is never trusted:
	// the request gets a fresh owner, its span gets a "guard.owner_rejected" event, and
	// if the lock is busy the default DenyHandler names the reason (OwnerRejection).
	// Optional. Default value nil: every request gets a fresh owner.
	Signer *ctxid.Signer

	// FailOpen makes a request whose lock cannot be taken because Redis is unreachable
	// (guard.ErrUnavailable) run its handler without the lock, at once. Only choose it
	// for work that stays correct without mutual exclusion.
	// Optional. Default value false: the wait rides out the outage while MaxWait
	// lasts, then ErrorHandler answers (503 by default).
	FailOpen bool

	// DenyHandler writes the response to a request denied because another owner held
	// the lock for longer than the request would wait.
	// Optional. Default value: 409 Conflict with Retry-After (guard's retry hint in
	// whole seconds, rounded up, at least 1) and the text "locked by another request";
	// when the request's Guardkit-Owner header was not accepted, the
	// HeaderOwnerRejected header names the reason, and so does the text.
	DenyHandler func(w http.ResponseWriter, r *http.Request, err *guard.LockedError)

	// ErrorHandler writes the response when the lock could not be taken or kept: the
	// key could not be built (err matches guard.ErrInvalidKey), Redis could not be
	// reached (guard.ErrUnavailable), the request holds the key's read lock and the
	// route writes (guard.ErrUpgrade), the wait was chosen to end a deadlock
	// (guard.ErrDeadlock), or the lease was lost while the handler ran
	// (guard.ErrLeaseLost; the handler may have written its response already, see
	// Started).
	// Optional. Default value: plain-text responses as Respond writes them — 400, 500
	// for a template naming a path value the route lacks (logged once), 409, 503 —
	// whose text never carries the key, an owner, a token or Redis's address.
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

	// Logger receives what a client must not read: a route whose pattern lacks a path
	// value the key names (once per route), a lease lost after the response started,
	// a release that failed after the handler answered.
	// Optional. Default value nil: slog.Default().
	Logger *slog.Logger
}

// DefaultLockConfig is the default Lock middleware config. Its Locker and Key are unset:
// copy it and set them.
var DefaultLockConfig = LockConfig{}

// Lock returns a middleware that runs each request's handler under the lock that the
// key template names, with DefaultLockConfig otherwise:
//
//	mux.Handle("POST /orders/{id}/pay", httpguard.Lock(locker, "order:{path.id}")(pay))
//
// It panics when the key template or another setting is invalid; see LockWithConfig.
func Lock(locker *guard.Locker, key string) func(http.Handler) http.Handler {
	config := DefaultLockConfig
	config.Locker = locker
	config.Key = key
	return LockWithConfig(config)
}

// LockWithConfig returns a Lock middleware with config. It panics when the config is
// invalid, as regexp.MustCompile does; ToMiddleware returns the error instead.
//
// For each request that Skipper does not skip, the middleware:
//
//   - makes sure the request's context has a lock owner: an owner already there is
//     kept, otherwise the Signer decides between the caller's signed owner and a fresh
//     one;
//   - renders the key and acquires the lock for that owner, waiting as MaxWait says;
//   - calls the next handler with a request whose context carries the owner and the
//     lease and is cancelled, with a guard.ErrLeaseLost cause, if the lease is lost;
//     guarded calls made with it (guard.Wrap, guard.Do, Locker.Acquire) reenter the
//     lock, and outgoing requests made with it through a Transport carry the owner;
//   - releases the lock when the handler returns or panics (the panic goes on).
func LockWithConfig(config LockConfig) func(http.Handler) http.Handler {
	mw, err := config.ToMiddleware()
	if err != nil {
		panic(err)
	}
	return mw
}

// ToMiddleware checks config and returns the Lock middleware it describes, or a
// *ConfigError naming the bad field (matching guard.ErrInvalidConfig), with the key
// template's *keyfunc.SyntaxError or *keyfunc.BindError, or guard's *guard.ConfigError,
// in its chain.
func (config LockConfig) ToMiddleware() (func(http.Handler) http.Handler, error) {
	m := &lock{
		skip:      config.Skipper,
		locker:    config.Locker,
		signer:    config.Signer,
		failOpen:  config.FailOpen,
		deny:      config.DenyHandler,
		onError:   config.ErrorHandler,
		log:       config.Logger,
		pathValue: config.PathValue,
		route:     config.Route,
	}
	var bad *httplock.Invalid
	m.key, m.more, m.opts, bad = httplock.Prepare(httplock.Config{
		Locker:   config.Locker,
		Key:      config.Key,
		MoreKeys: config.MoreKeys,
		TTL:      config.TTL,
		MaxWait:  config.MaxWait,
		Options:  config.Options,
		FailOpen: config.FailOpen,
	}, m.keySources(), config.Extractors)
	if bad != nil {
		return nil, &ConfigError{Field: bad.Field, Reason: bad.Reason, Err: bad.Err}
	}
	if m.deny == nil {
		m.deny = denyConflict
	}
	if m.onError == nil {
		m.onError = m.errorStatus
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.route == nil {
		m.route = func(r *http.Request) string { return r.Pattern }
	}
	if m.pathValue == nil {
		m.pathValue = (*http.Request).PathValue
		m.muxPaths = true
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}
