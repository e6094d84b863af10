package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/httplock"
	"github.com/guardkit/guardkit/keyfunc"
)

// lock is one Lock middleware, shared by every route it is applied to.
type lock struct {
	skip     Skipper
	key      *keyfunc.Template[echo.Context]
	more     []*keyfunc.Template[echo.Context] // MoreKeys
	locker   *guard.Locker
	opts     *httplock.Options
	signer   *ctxid.Signer
	failOpen bool
	deny     func(echo.Context, *guard.LockedError) error
	onError  func(echo.Context, error) error
	logged   sync.Map // noParamError → true: route mistakes already logged
}

func (m *lock) serve(c echo.Context, next echo.HandlerFunc) error {
	if m.skip != nil && m.skip(c) {
		return next(c)
	}
	ctx := m.owner(c)
	key, err := m.key.Render(c)
	tpl := m.key
	var more []string
	if err == nil {
		var bad *keyfunc.Template[echo.Context]
		if more, bad, err = httplock.RenderMore(m.more, c); bad != nil {
			tpl = bad
		}
	}
	if err != nil {
		var np *noParamError
		if errors.As(err, &np) && !np.notFound {
			m.logOnce(c, *np, tpl)
		}
		return m.onError(c, fmt.Errorf("%w: template %q: %w", guard.ErrInvalidKey, tpl.String(), err))
	}
	// The handler's own error is kept aside, so that an error Run returns is guard's.
	var herr error
	ran, err := m.locker.Run(ctx, func(ctx context.Context) error {
		c.SetRequest(c.Request().WithContext(ctx))
		herr = next(c)
		return nil
	}, m.opts.For(c.Path(), key, more)...)
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
func (m *lock) logOnce(c echo.Context, np noParamError, tpl *keyfunc.Template[echo.Context]) {
	if _, seen := m.logged.LoadOrStore(np, true); seen {
		return
	}
	c.Logger().Errorf("guardkit middleware: the key template %q names the parameter %q, which route %s %s does not have: its requests are answered 500",
		tpl.String(), np.name, c.Request().Method, np.route)
}

// owner returns the request's context with a lock owner: the one it carries already,
// else the caller's when its signed token verifies, else a fresh one (httplock.Owner).
// Why a token was refused is kept under rejectionKey, for OwnerRejection.
func (m *lock) owner(c echo.Context) context.Context {
	r := c.Request()
	return httplock.Owner(r.Context(), m.signer, r.Header[ctxid.Header], rejectionKey{})
}

// rejectionKey is the context key under which httplock.Owner keeps why it refused a
// request's owner header.
type rejectionKey struct{}

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
	return httplock.Rejected(ctx, rejectionKey{})
}
