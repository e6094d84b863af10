package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/keyfunc"
)

// lock is one Lock middleware, shared by every route it is applied to.
type lock struct {
	skip     Skipper
	key      *keyfunc.Template[echo.Context]
	locker   *guard.Locker
	opts     []guard.Option // every request's guard options but its key
	routes   sync.Map       // route → opts naming the lock after route
	signer   *ctxid.Signer
	failOpen bool
	deny     func(echo.Context, *guard.LockedError) error
	onError  func(echo.Context, error) error
	logged   sync.Map // noParamError → true: route mistakes already logged
}

// options returns the guard options of a request to route, whose lock telemetry names
// after route (guard.Name), unless the configuration's Options name it otherwise.
func (m *lock) options(route string) []guard.Option {
	if route == "" {
		return m.opts
	}
	if o, ok := m.routes.Load(route); ok {
		return o.([]guard.Option)
	}
	o, _ := m.routes.LoadOrStore(route, append([]guard.Option{guard.Name(route)}, m.opts...))
	return o.([]guard.Option)
}

func (m *lock) serve(c echo.Context, next echo.HandlerFunc) error {
	if m.skip != nil && m.skip(c) {
		return next(c)
	}
	ctx := m.owner(c)
	key, err := m.key.Render(c)
	if err != nil {
		var np *noParamError
		if errors.As(err, &np) && !np.notFound {
			m.logOnce(c, *np)
		}
		return m.onError(c, fmt.Errorf("%w: template %q: %w", guard.ErrInvalidKey, m.key.String(), err))
	}
	// The handler's own error is kept aside, so that an error Run returns is guard's.
	var herr error
	ran, err := m.locker.Run(ctx, func(ctx context.Context) error {
		c.SetRequest(c.Request().WithContext(ctx))
		herr = next(c)
		return nil
	}, withKey(m.options(c.Path()), key)...)
	if err == nil {
		return herr
	}
	if ran && !errors.Is(err, guard.ErrLeaseLost) {
		// The handler ran under a valid lease and only the release failed (a
		// *guard.ReleaseError): its response stands.
		c.Logger().Warn(err)
		return herr
	}
	if ran { // the lease was lost while the handler ran
		if herr != nil {
			err = fmt.Errorf("%w; the handler returned: %w", err, herr)
		}
		return m.onError(c, err)
	}
	var busy *guard.LockedError
	if errors.As(err, &busy) {
		c.SetRequest(c.Request().WithContext(ctx)) // for OwnerRejection
		return m.deny(c, busy)
	}
	if m.failOpen && errors.Is(err, guard.ErrUnavailable) {
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
	return m.onError(c, err)
}

// logOnce logs, once per route and parameter, through Echo's logger, that the route's
// key names a parameter the route lacks: every request to it is answered 500, and the
// fix is in the code (the route, or the template).
func (m *lock) logOnce(c echo.Context, np noParamError) {
	if _, seen := m.logged.LoadOrStore(np, true); seen {
		return
	}
	c.Logger().Errorf("guardkit middleware: the key template %q names the parameter %q, which route %s %s does not have: its requests are answered 500",
		m.key.String(), np.name, c.Request().Method, np.route)
}

// owner returns the request's context with a lock owner: the one it carries already,
// else the caller's when its signed token verifies, else a fresh one. A token that
// does not verify is never used, since an owner is a capability to pass the lock; why
// it was refused is recorded on the request's span and in the returned context
// (OwnerRejection), so that a missing or mismatched Signer can be seen.
func (m *lock) owner(c echo.Context) context.Context {
	r := c.Request()
	ctx := r.Context()
	if _, ok := ctxid.FromContext(ctx); ok {
		return ctx
	}
	ctx, _, ref := m.signer.Inbound(ctx, ctxid.Header+" header", r.Header[ctxid.Header])
	if ref == nil {
		ctx, _ = ctxid.Ensure(ctx) // the token's owner, or a fresh one without a token
		return ctx
	}
	rej := &rejection{reason: ref.Reason, err: ref}
	if ref.Reason == ctxid.RefusedNoSigner {
		rej.err = fmt.Errorf("LockConfig.Signer is nil: %w", ref)
	}
	trace.SpanFromContext(ctx).AddEvent("guard.owner_rejected",
		trace.WithAttributes(attribute.String("guard.reason", rej.reason)))
	ctx, _ = ctxid.Ensure(ctx)
	return context.WithValue(ctx, rejectionKey{}, rej)
}

// rejectionKey is the context key of a request's *rejection.
type rejectionKey struct{}

// rejection is an inbound owner header that was not accepted, and why.
type rejection struct {
	reason string // a ctxid.Refused* value or a ctxid.VerifyError code
	err    error  // has the *ctxid.VerifyError in its chain
}

// OwnerRejection reports why the Lock middleware did not accept the ctxid.Header
// ("Guardkit-Owner") header of the request whose context is ctx. reason is one of
// no_signer (LockConfig.Signer is nil), several_values, too_long, malformed,
// invalid_owner, unknown_key (signed with a key ID the Signer does not know),
// bad_signature (the key ID is known, the secret differs), too_many_hops,
// not_yet_valid or expired (clocks apart, or a token older than the Signer's MaxAge);
// err explains it and has the *ctxid.VerifyError in its chain. Both are zero when the
// request sent no such header, when its token was accepted, and outside a Lock
// middleware. A DenyHandler can use it as the default one does.
func OwnerRejection(ctx context.Context) (reason string, err error) {
	if rej, ok := ctx.Value(rejectionKey{}).(*rejection); ok {
		return rej.reason, rej.err
	}
	return "", nil
}
