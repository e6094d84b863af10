package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/httplock"
	"github.com/guardkit/guardkit/keyfunc"
)

// Skipper reports whether the middleware should let a request through unlocked. It is
// the same function type as Echo's middleware.Skipper, so Echo's skippers can be used.
type Skipper = func(c echo.Context) bool

// Extractor reads one value of a request for a lock key, for anything the built-in
// sources cannot reach (an authenticated user, a cookie, a value an earlier middleware
// stored with c.Set). It is the same function type as Echo's middleware.Extractor.
type Extractor = func(c echo.Context) (string, error)

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
	// "order:{param.id}" (see package keyfunc for the syntax). Sources: {param.name}
	// (route parameter, percent-decoded exactly once), {query.name}, {header.Name},
	// {form.name} (fields of an application/x-www-form-urlencoded body), {path} (the
	// request path, segment by segment decoded, with '%' and '/' inside a segment kept
	// as %25 and %2F), {route} (the route pattern, as "/orders/:id"), {method}, and one
	// bare {name} per entry of Extractors; the package documentation says exactly what
	// each reads. The rendered text is the whole lock key: two routes whose templates
	// render the same text share one lock, which is how several routes on one resource
	// exclude each other.
	// Required.
	Key string

	// MoreKeys are further key templates, with Key's sources: the request takes the
	// lock of Key and those of MoreKeys as one lock (guard.Locker.AcquireAll): all or
	// none, in one canonical order whatever order they are listed in, under one lease,
	// each key with its own fencing token (guard.Lease.Tokens). A transfer between two
	// accounts locks both: Key "account:{param.from}", MoreKeys
	// []string{"account:{param.to}"}. Keys that render the same count once.
	// Optional. Default value nil.
	MoreKeys []string

	// Extractors adds template sources: Extractors["user"] is read by the placeholder
	// {user}. Names match [a-z][a-z0-9_]* and must differ from the built-in sources.
	// An extractor's error fails the request's key (ErrorHandler; an *echo.HTTPError
	// is answered as it is by the default one).
	// Optional. Default value nil.
	Extractors map[string]Extractor

	// TTL is the lease time (see guard.TTL): how long the lock outlives a process that
	// died holding it. The lease is renewed while the handler runs, however long.
	// Optional. Default value 0: the Locker's TTL.
	TTL time.Duration

	// MaxWait is how long a request waits for a busy lock before DenyHandler answers
	// it. Waiters are woken by the holder's release, not by polling. A negative value
	// waits until the request's context ends (the client leaves or a server timeout
	// fires). Waiting always ends with the request's context. To deny a busy lock at
	// once, set Options: []guard.Option{guard.Retry(guard.NoRetry())}; a guard.Retry
	// in Options overrides MaxWait.
	// Optional. Default value 0: the Retry given to the Locker's guard.New, else at
	// most 5s.
	MaxWait time.Duration

	// Options are further guard options for each acquisition, such as guard.Renewal or
	// guard.MaxHold. They apply after TTL and MaxWait, so a guard.TTL or guard.Retry
	// here overrides those fields; options that name the key or the Locker (guard.Key,
	// guard.RawKey, guard.KeyFunc, guard.Use) are overridden by Key and Locker.
	// Optional. Default value nil.
	Options []guard.Option

	// Signer verifies the owner token a calling service sends in the ctxid.Header
	// header ("Guardkit-Owner", made by the caller's Signer.Outbound): a request whose
	// token verifies runs as that owner and reenters the locks it holds. The request
	// must carry exactly one such header of at most ctxid.MaxTokenLen (256) bytes,
	// signed with a key this Signer knows, no older than its MaxAge (issue times are
	// whole seconds, so a token can expire up to a second early) and with no more hops
	// than its MaxHops. Anything else — no Signer here, an unknown key ID, a bad
	// signature, an expired or future token, too many hops, malformed or oversized
	// text, several headers — is never trusted: the request gets a fresh owner, the
	// request's span gets a "guard.owner_rejected" event, and if the lock then turns
	// out busy the default DenyHandler names the reason (see OwnerRejection). An empty
	// header counts as sent, and malformed.
	// Optional. Default value nil: every request gets a fresh owner, and a request
	// that sends the header is told, when busy, that no Signer is configured.
	Signer *ctxid.Signer

	// FailOpen makes a request whose lock cannot be taken because Redis is unreachable
	// (guard.ErrUnavailable) run its handler without the lock instead of failing, at
	// once (guard.WaitOutages(false)): a fail-closed route waits an outage out within
	// MaxWait instead. Only choose it for work that stays correct without mutual
	// exclusion.
	// Optional. Default value false: the wait for the lock rides out the outage while
	// MaxWait lasts, then ErrorHandler answers (503 by default).
	FailOpen bool

	// DenyHandler builds the response to a request denied because another owner held
	// the lock for longer than the request would wait (MaxWait). Its result is
	// returned to Echo, whose HTTPErrorHandler renders it.
	// Optional. Default value: 409 Conflict with a Retry-After header (the
	// retry hint, err.RetryAfter: see "Retry hints" in package guard; in whole seconds
	// rounded up, at least 1) and an *echo.HTTPError whose
	// Internal is err. When the request sent a Guardkit-Owner header that was not
	// accepted, it also sets the HeaderOwnerRejected header to the reason, says the
	// reason in the message, and puts the *ctxid.VerifyError in Internal's chain next
	// to err.
	DenyHandler func(c echo.Context, err *guard.LockedError) error

	// ErrorHandler builds the response when the lock could not be taken or kept:
	// the key could not be built (err matches guard.ErrInvalidKey), Redis could not
	// be reached (guard.ErrUnavailable), the request's owner holds the route's
	// read-write lock for reading and the route writes (guard.ErrUpgrade), the wait was
	// chosen to end a deadlock (guard.ErrDeadlock) or the lease
	// was lost while the handler ran (guard.ErrLeaseLost; the handler's own error, if
	// any, is in the chain). Its result is returned to Echo.
	// Optional. Default value: an *echo.HTTPError whose Internal is err — 400 Bad
	// Request for a key that cannot be built from the request (an extractor's
	// *echo.HTTPError as it is), 500 Internal Server Error when the matched route has no
	// parameter the key names (a mistake the middleware also logs once per route through
	// Echo's logger; 404 Not Found on a not-found route, such as an Echo group's
	// catch-all), 409 Conflict for an upgrade refused and for a deadlock's victim (without
	// Retry-After: waiting does not clear it), 503 Service Unavailable
	// otherwise. Messages are plain words that never carry the key, an owner or a token,
	// nor Redis's address; a custom ErrorHandler can add what err holds for internal
	// APIs.
	ErrorHandler func(c echo.Context, err error) error
}

// DefaultLockConfig is the default Lock middleware config. Its Locker and Key are unset:
// copy it and set them.
var DefaultLockConfig = LockConfig{
	DenyHandler:  denyConflict,
	ErrorHandler: errorStatus,
}

// Lock returns a middleware that runs each request's handler under the lock that the
// key template names, with DefaultLockConfig otherwise:
//
//	e.POST("/orders/:id/pay", pay, middleware.Lock(locker, "order:{param.id}"))
//
// It panics when the key template or another setting is invalid; see LockWithConfig.
func Lock(locker *guard.Locker, key string) echo.MiddlewareFunc {
	config := DefaultLockConfig
	config.Locker = locker
	config.Key = key
	return LockWithConfig(config)
}

// LockWithConfig returns a Lock middleware with config. Like Echo's own middleware, it
// panics when the config is invalid; ToMiddleware returns the error instead.
//
// For each request that Skipper does not skip, the middleware:
//
//   - makes sure the request's context has a lock owner: an owner already there (set
//     by an earlier middleware) is kept, otherwise the Signer decides between the
//     caller's signed owner and a fresh one;
//   - renders the key and acquires the lock for that owner, waiting as MaxWait says
//     (by default up to the Locker's Retry, else 5s);
//   - runs the rest of the chain with c.Request()'s context replaced by one that carries
//     the owner and the lease and is cancelled, with a guard.ErrLeaseLost cause, if the
//     lease is lost; guarded calls made with it (guard.Wrap, guard.Do, Locker.Acquire)
//     reenter the lock instead of waiting for it;
//   - releases the lock when the handler returns, whatever it returns, or panics (the
//     panic goes on, to Echo's Recover middleware if there is one).
//
// Busy, errors and lost leases are answered by DenyHandler and ErrorHandler, whose
// results are returned to Echo; see the package documentation for what the client sees.
func LockWithConfig(config LockConfig) echo.MiddlewareFunc {
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
func (config LockConfig) ToMiddleware() (echo.MiddlewareFunc, error) {
	tpl, more, opts, bad := httplock.Prepare(httplock.Config{
		Locker:   config.Locker,
		Key:      config.Key,
		MoreKeys: config.MoreKeys,
		TTL:      config.TTL,
		MaxWait:  config.MaxWait,
		Options:  config.Options,
		FailOpen: config.FailOpen,
	}, builtinSources, config.Extractors)
	if bad != nil {
		return nil, &ConfigError{Field: bad.Field, Reason: bad.Reason, Err: bad.Err}
	}
	m := &lock{
		skip:     config.Skipper,
		key:      tpl,
		more:     more,
		locker:   config.Locker,
		opts:     opts,
		signer:   config.Signer,
		failOpen: config.FailOpen,
		deny:     config.DenyHandler,
		onError:  config.ErrorHandler,
	}
	if m.deny == nil {
		m.deny = denyConflict
	}
	if m.onError == nil {
		m.onError = errorStatus
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return m.serve(c, next) }
	}, nil
}

// HeaderOwnerRejected is the response header in which the default DenyHandler says
// why the request's ctxid.Header ("Guardkit-Owner") header was not accepted: one of
// the reasons OwnerRejection lists, such as "no_signer" or "bad_signature".
const HeaderOwnerRejected = "Guardkit-Owner-Rejected"

// denyConflict is the default DenyHandler.
func denyConflict(c echo.Context, err *guard.LockedError) error {
	c.Response().Header().Set(echo.HeaderRetryAfter, httplock.RetryAfter(err.RetryAfter))
	reason, rejected := OwnerRejection(c.Request().Context())
	if rejected == nil {
		return &echo.HTTPError{Code: http.StatusConflict, Message: httplock.TextBusy, Internal: err}
	}
	// The caller meant to reenter a lock of its own: a Signer missing here, or keys
	// that differ between the services, would otherwise show as a plain 409.
	c.Response().Header().Set(HeaderOwnerRejected, reason)
	return &echo.HTTPError{
		Code:     http.StatusConflict,
		Message:  httplock.DenyText(reason),
		Internal: fmt.Errorf("%w; %s header not accepted (%s): %w", err, ctxid.Header, reason, rejected),
	}
}

// Status returns the error the Lock middleware's default DenyHandler and ErrorHandler
// return for err, a guard error, so that a handler answers a guarded call of its own
// (guard.Wrap, guard.Do, Locker.Acquire) as the middleware answers its route's lock,
// instead of as a 500: a busy lock (*guard.LockedError) is 409 Conflict with Retry-After
// (set on c's response), Redis unavailable or a lost lease 503 Service Unavailable, an
// invalid key 400 Bad Request, a refused upgrade 409 Conflict, a deadlock's victim 409
// Conflict without Retry-After. The result is an
// *echo.HTTPError whose message is plain words and whose Internal is err. An error
// that is not guard's is returned unchanged, and nil as nil.
func Status(c echo.Context, err error) error {
	var busy *guard.LockedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &busy):
		return denyConflict(c, busy)
	case errors.Is(err, guard.ErrLeaseLost), errors.Is(err, guard.ErrUnavailable), errors.Is(err, guard.ErrClosed),
		errors.Is(err, guard.ErrInvalidKey), errors.Is(err, guard.ErrUpgrade), errors.Is(err, guard.ErrDeadlock):
		return errorStatus(c, err)
	}
	return err
}

// errorStatus is the default ErrorHandler. It answers as httplock.Status says, but
// with the texts as constants: an *echo.HTTPError's Message is an interface value, and a
// string that is not a constant would cost an allocation to put in it.
func errorStatus(_ echo.Context, err error) error {
	var he *echo.HTTPError
	var np *noParamError
	switch {
	case errors.Is(err, guard.ErrLeaseLost):
		return &echo.HTTPError{Code: http.StatusServiceUnavailable, Message: httplock.TextLeaseLost, Internal: err}
	case errors.As(err, &np) && np.notFound:
		return &echo.HTTPError{Code: http.StatusNotFound, Message: http.StatusText(http.StatusNotFound), Internal: err}
	case errors.As(err, &np):
		return &echo.HTTPError{Code: http.StatusInternalServerError, Message: httplock.TextInternal, Internal: err}
	case errors.Is(err, guard.ErrInvalidKey) && errors.As(err, &he):
		return &echo.HTTPError{Code: he.Code, Message: he.Message, Internal: err}
	case errors.Is(err, guard.ErrInvalidKey):
		return &echo.HTTPError{Code: http.StatusBadRequest, Message: keyText(err), Internal: err}
	case errors.Is(err, guard.ErrUpgrade):
		return &echo.HTTPError{Code: http.StatusConflict, Message: httplock.TextUpgrade, Internal: err}
	case errors.Is(err, guard.ErrDeadlock):
		// No Retry-After: waiting does not clear a deadlock; the request may be retried.
		return &echo.HTTPError{Code: http.StatusConflict, Message: httplock.TextDeadlock, Internal: err}
	}
	return &echo.HTTPError{Code: http.StatusServiceUnavailable, Message: httplock.TextUnavailable, Internal: err}
}

// keyText is the client's message for a key that cannot be built from the request: the
// placeholder that failed, as httplock.KeyText words it, and what this middleware's own
// sources can add — a route parameter percent-encoded twice, a form field read only
// from form bodies. It never carries a value, the key or the source's own error text.
func keyText(err error) string {
	var re *keyfunc.RenderError
	var twice *twiceEncodedError
	switch {
	case !errors.As(err, &re): // no placeholder to name: httplock.KeyText says so
	case errors.As(re, &twice):
		return fmt.Sprintf("%s: {%s} is percent-encoded twice (once decoded, it still holds a %%XX escape)", httplock.TextInvalidKey, re.Placeholder)
	case strings.HasPrefix(re.Placeholder, "form.") && errors.Is(re, keyfunc.ErrMissing):
		return fmt.Sprintf("%s: {%s} is missing (form fields are read from %s bodies of POST, PUT and PATCH requests)",
			httplock.TextInvalidKey, re.Placeholder, echo.MIMEApplicationForm)
	}
	return httplock.KeyText(err)
}
