package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
)

// lock is one Lock middleware, shared by every route it is applied to.
type lock struct {
	skip     Skipper
	run      runner                             // unnamed: for requests that matched no route
	named    func(route string) (runner, error) // the same, naming the lock after route
	routes   sync.Map                           // route → runner
	signer   *ctxid.Signer
	failOpen bool
	deny     func(echo.Context, *guard.LockedError) error
	onError  func(echo.Context, error) error
}

// runner is a guarded call: runHandler decorated by guard.WrapE.
type runner = func(context.Context, *call) (struct{}, error)

// runner returns the guarded call for route, whose lock telemetry names after route
// (guard.Name), unless the configuration's Options name it otherwise.
func (m *lock) runner(route string) runner {
	if route == "" {
		return m.run
	}
	if r, ok := m.routes.Load(route); ok {
		return r.(runner)
	}
	r, err := m.named(route)
	if err != nil {
		return m.run // the same options passed the checks at construction: not expected
	}
	actual, _ := m.routes.LoadOrStore(route, r)
	return actual.(runner)
}

// call is one request going through the guarded call: what runHandler needs, and what
// it reports back.
type call struct {
	c    echo.Context
	next echo.HandlerFunc
	ran  bool  // the handler was called: the lock was held
	err  error // the handler's error
}

// runHandler is the function guard.WrapE decorates. It hands the handler the lease's
// context and keeps the handler's error aside, so that an error coming out of the
// decorated call is always guard's own.
func runHandler(ctx context.Context, r *call) (struct{}, error) {
	r.ran = true
	r.c.SetRequest(r.c.Request().WithContext(ctx))
	r.err = r.next(r.c)
	return struct{}{}, nil
}

func (m *lock) serve(c echo.Context, next echo.HandlerFunc) error {
	if m.skip != nil && m.skip(c) {
		return next(c)
	}
	ctx := m.owner(c)
	r := &call{c: c, next: next}
	_, err := m.runner(c.Path())(ctx, r)
	if err == nil {
		return r.err
	}
	if r.ran { // the lease was lost while the handler ran
		if r.err != nil {
			err = fmt.Errorf("%w; the handler returned: %w", err, r.err)
		}
		return m.onError(c, err)
	}
	var busy *guard.LockedError
	if errors.As(err, &busy) {
		return m.deny(c, busy)
	}
	if m.failOpen && errors.Is(err, guard.ErrUnavailable) {
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
	return m.onError(c, err)
}

// owner returns the request's context with a lock owner: the one it carries already,
// else the caller's when its signed token verifies, else a fresh one. A token that
// does not verify is ignored on purpose: an owner is a capability to pass the lock.
func (m *lock) owner(c echo.Context) context.Context {
	ctx := c.Request().Context()
	if _, ok := ctxid.FromContext(ctx); ok {
		return ctx
	}
	if m.signer == nil {
		ctx, _ = ctxid.Ensure(ctx)
		return ctx
	}
	ctx, _, _ = m.signer.Accept(ctx, c.Request().Header.Get(ctxid.Header))
	return ctx
}
