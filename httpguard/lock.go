package httpguard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/httplock"
	"github.com/guardkit/guardkit/keyfunc"
)

// lock is one Lock middleware, shared by every route it wraps.
type lock struct {
	skip      Skipper
	key       *keyfunc.Template[*http.Request]
	more      []*keyfunc.Template[*http.Request] // MoreKeys
	locker    *guard.Locker
	opts      *httplock.Options
	signer    *ctxid.Signer
	failOpen  bool
	deny      func(http.ResponseWriter, *http.Request, *guard.LockedError)
	onError   func(http.ResponseWriter, *http.Request, error)
	log       *slog.Logger
	pathValue PathValueFunc
	muxPaths  bool // pathValue is r.PathValue: the standard ServeMux routes
	route     func(*http.Request) string
	logged    sync.Map // noParamError → true: route mistakes already logged
}

func (m *lock) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.skip != nil && m.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	ctx := m.owner(r)
	key, err := m.key.Render(r)
	tpl := m.key
	var more []string
	if err == nil {
		var bad *keyfunc.Template[*http.Request]
		if more, bad, err = httplock.RenderMore(m.more, r); bad != nil {
			tpl = bad
		}
	}
	if err != nil {
		var np *noParamError
		if errors.As(err, &np) {
			m.logOnce(r, *np, tpl)
		}
		m.onError(w, r.WithContext(ctx), fmt.Errorf("%w: template %q: %w", guard.ErrInvalidKey, tpl.String(), err))
		return
	}
	rw := &responseWriter{ResponseWriter: w}
	ran, err := m.locker.Run(ctx, func(ctx context.Context) error {
		next.ServeHTTP(rw, r.WithContext(ctx))
		return nil
	}, m.opts.For(m.route(r), key, more)...)
	switch {
	case err == nil:
		return
	case ran && !errors.Is(err, guard.ErrLeaseLost):
		// The handler ran under a valid lease and only the release failed (a
		// *guard.ReleaseError): its response stands.
		m.log.Warn("httpguard: release failed after the handler answered", "error", err)
		return
	case ran: // the lease was lost while the handler ran
		if rw.started {
			m.log.Error("httpguard: lock lost while the handler ran; its response had started", "error", err)
		}
		m.onError(rw, r.WithContext(ctx), err)
		return
	}
	var busy *guard.LockedError
	switch {
	case errors.As(err, &busy):
		m.deny(w, r.WithContext(ctx), busy) // the context tells OwnerRejection
	case m.failOpen && errors.Is(err, guard.ErrUnavailable):
		next.ServeHTTP(w, r.WithContext(ctx))
	default:
		m.onError(w, r.WithContext(ctx), err)
	}
}

// logOnce logs, once per route and path value, that the route's key names a path value
// the route lacks: every request to it is answered 500, and the fix is in the code.
func (m *lock) logOnce(r *http.Request, np noParamError, tpl *keyfunc.Template[*http.Request]) {
	if _, seen := m.logged.LoadOrStore(np, true); seen {
		return
	}
	m.log.Error("httpguard: the key template names a path value the route lacks; its requests are answered 500",
		"template", tpl.String(), "method", r.Method, "error", &np)
}

// owner returns the request's context with a lock owner: the one it carries already,
// else the caller's when its signed token verifies, else a fresh one (httplock.Owner).
// Why a token was refused is kept under rejectionKey, for OwnerRejection.
func (m *lock) owner(r *http.Request) context.Context {
	return httplock.Owner(r.Context(), m.signer, r.Header[ctxid.Header], rejectionKey{})
}

// rejectionKey is the context key under which httplock.Owner keeps why it refused a
// request's owner header.
type rejectionKey struct{}

// OwnerRejection reports why the Lock middleware did not accept the ctxid.Header
// ("Guardkit-Owner") header of the request whose context is ctx: reason is one of
// no_signer (LockConfig.Signer is nil), several_values, too_long, malformed,
// invalid_owner, unknown_key, bad_signature, too_many_hops, not_yet_valid or expired;
// err explains it. Both are zero when the request sent no such header, when its token
// was accepted, and outside a Lock middleware. A DenyHandler can use it as the default
// one does.
func OwnerRejection(ctx context.Context) (reason string, err error) {
	return httplock.Rejected(ctx, rejectionKey{})
}

// HeaderOwnerRejected is the response header in which the default DenyHandler says why
// the request's Guardkit-Owner header was not accepted, such as "bad_signature".
const HeaderOwnerRejected = "Guardkit-Owner-Rejected"

// denyConflict is the default DenyHandler.
func denyConflict(w http.ResponseWriter, r *http.Request, err *guard.LockedError) {
	w.Header().Set("Retry-After", RetryAfter(err.RetryAfter))
	reason, _ := OwnerRejection(r.Context())
	if reason != "" {
		w.Header().Set(HeaderOwnerRejected, reason)
	}
	http.Error(w, httplock.DenyText(reason), http.StatusConflict)
}

// RetryAfter formats a retry hint (guard.LockedError's RetryAfter) as a Retry-After
// value: whole seconds, rounded up, at least 1, since an unknown or elapsed hint must
// not invite an immediate retry storm.
func RetryAfter(d time.Duration) string { return httplock.RetryAfter(d) }

// errorStatus is the default ErrorHandler. An error that is not guard's (a cancelled
// request's context, a Locker's per-call option refused) is answered 503 with the
// unavailable text, as the Echo middleware answers it: a request is never left with an
// empty 200.
func (m *lock) errorStatus(w http.ResponseWriter, r *http.Request, err error) {
	if Started(w) {
		return // the handler's response stands; serve logged the loss
	}
	if !Respond(w, r, err) {
		http.Error(w, httplock.TextUnavailable, http.StatusServiceUnavailable)
	}
}

// Respond writes the response the Lock middleware's default handlers write for err, a
// guard error, and reports whether it wrote one, so that a handler answers a guarded
// call of its own (guard.Wrap, guard.Do, Locker.Acquire) as the middleware answers its
// route's lock instead of with a 500: a busy lock (*guard.LockedError) 409 Conflict with
// Retry-After, a deadlock's victim 409 without it, a refused upgrade 409, an invalid key
// 400 (or an *Error's status and text), Redis unavailable or a lost lease 503. The text
// is plain words, never the key, an owner, a token or Redis's address. For an error that
// is not guard's, and for nil, it writes nothing and returns false.
func Respond(w http.ResponseWriter, r *http.Request, err error) bool {
	var (
		busy *guard.LockedError
		he   *Error
		np   *noParamError
	)
	switch {
	case err == nil:
		return false
	case errors.As(err, &busy):
		denyConflict(w, r, busy)
		return true
	case errors.Is(err, guard.ErrLeaseLost): // httplock.Status answers it first
	case errors.As(err, &np):
		http.Error(w, httplock.TextInternal, http.StatusInternalServerError)
		return true
	case errors.Is(err, guard.ErrInvalidKey) && errors.As(err, &he):
		http.Error(w, he.Text, he.Code)
		return true
	}
	code, text, ok := httplock.Status(err)
	if ok {
		http.Error(w, text, code)
	}
	return ok
}

// Started reports whether the handler behind the Lock middleware has started its
// response (written a status or a byte) on w, the ResponseWriter an ErrorHandler is
// given: a lease lost after that cannot change what the client receives.
func Started(w http.ResponseWriter) bool {
	rw, ok := w.(*responseWriter)
	return ok && rw.started
}

// responseWriter notes whether the handler started its response. It passes Flush and
// Hijack on, and Unwrap gives http.ResponseController the writer beneath.
type responseWriter struct {
	http.ResponseWriter
	started bool
}

func (w *responseWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.started = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.started = true
	return w.ResponseWriter.Write(b)
}

// Flush sends what the handler wrote so far, when the writer beneath can.
func (w *responseWriter) Flush() {
	w.started = true
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection over, when the writer beneath can.
func (w *responseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.started = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap returns the writer beneath, for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
