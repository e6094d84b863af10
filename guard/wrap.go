package guard

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/keyfunc"
)

// defaultLocker is the Locker of decorators given no Use option.
var defaultLocker atomic.Pointer[Locker]

// SetDefault makes l the Locker that decorators use when they were given no Use option,
// for programs that talk to one Redis. Decorators look it up at each call, so it may be
// set after they are built (at init, say) and replaced later; nil unsets it. It is safe
// for concurrent use.
func SetDefault(l *Locker) { defaultLocker.Store(l) }

// errNoLocker fails a decorated call that has no Locker to use.
var errNoLocker = &ConfigError{Field: "Locker", Reason: "none to use: pass guard.Use(locker) or call guard.SetDefault(locker) first"}

// Wrap returns a function that calls fn under the lock that its options name, for the
// common service method shape func(ctx, req) (resp, error):
//
//	svc.Transfer = guard.Wrap(svc.Transfer, guard.Key("account:{req.From}"))
//
// Wrap needs a key (Key, RawKey or KeyFunc) and takes the Locker from Use or, at each
// call, the one given to SetDefault. It panics, like regexp.MustCompile, when the options
// are invalid: a malformed key template, a placeholder that Req cannot fill, a bad TTL or
// Retry, a typed option for another request type. WrapE returns the same error instead.
//
// The returned function may be called concurrently. Each call:
//
//   - runs fn at once, unlocked, when a SkipIf predicate reports true;
//   - renders the key from the request, and acquires the lock for the owner in ctx (a
//     fresh owner when ctx has none), waiting as the Retry option says: the one given
//     to Wrap, else the one given to the Locker's New, else at most 5s, and never past
//     ctx's end. When it gives up it returns a *LockedError (ErrLocked) with a hint of
//     when to retry as RetryAfter (see "Retry hints"), and ctx's error in its chain when ctx ended the wait;
//   - calls fn with a context derived from ctx that carries the owner and the Lease
//     (LeaseFromContext; its Token is the fencing token) and is cancelled, with
//     a *LeaseLostError as its cause, if the lease is lost;
//   - releases the lock when fn returns, whatever it returns, and when it panics (the
//     panic then goes on) — or, with MinHold, no sooner than that long after acquiring;
//   - returns fn's result. When the lease was lost while fn ran, the error matches
//     ErrLeaseLost even if fn succeeded, because exclusivity was not guaranteed; fn's
//     own error stays in the chain, and resp is still fn's.
//
// A guarded call made inside fn with fn's context (or one derived from it, in any
// goroutine) runs inside the section that holds the lock: on the same key it reenters the
// lock at once, with the same fencing token and no Redis call, instead of deadlocking; on
// another key it acquires that one as a section within it. Pass fn's context on, not the
// one the outer caller gave: with that one the call is a sibling section, and waits for
// the lock fn holds.
//
// A release whose reply says the lock was expired or taken, and came back while the
// lease was still valid here, counts as a lost lease: the lock vanished under a valid
// lease (a restarted or flushed Redis, a failover), so fn may have run unprotected. A
// release that is merely late (its reply came after the validity ran out: Redis paused or
// slow after fn returned) or that cannot reach Redis is a *ReleaseError, never
// ErrLeaseLost: fn ran under a valid lease, and the lock frees itself after its TTL. It
// is returned joined to fn's own error, if any, so that a caller can tell the two apart
// (errors.As) — and must not redo fn's work for it.
//
// When the Locker is the default one (SetDefault), a call made while none is set fails
// with a *ConfigError naming "Locker". Options are checked against the settings of the
// Locker from Use, or of the default Locker when one is set at Wrap time, and again
// against a default Locker at its first call: a call with options that do not fit it (a
// renewal period longer than its TTL, say) fails with a *ConfigError.
func Wrap[Req, Resp any](fn func(context.Context, Req) (Resp, error), opts ...Option) func(context.Context, Req) (Resp, error) {
	g, err := WrapE(fn, opts...)
	if err != nil {
		panic(err)
	}
	return g
}

// WrapE is Wrap for callers that prefer an error to a panic: it returns a *ConfigError
// (ErrInvalidConfig) naming the bad option, with a key template's *keyfunc.SyntaxError
// or *keyfunc.BindError in its chain, or an error matching ErrInvalidKey for an empty RawKey:
// a key is input, whichever way it is given.
func WrapE[Req, Resp any](fn func(context.Context, Req) (Resp, error), opts ...Option) (func(context.Context, Req) (Resp, error), error) {
	if fn == nil {
		return nil, errNilFn
	}
	d, err := newDecorator(opts, "Wrap", true)
	if err != nil {
		return nil, err
	}
	var skip func(context.Context, Req) bool
	if d.wrap.skip != nil {
		var ok bool
		if skip, ok = d.wrap.skip.(func(context.Context, Req) bool); !ok {
			return nil, typeMismatch("SkipIf", d.wrap.skip, reflect.TypeFor[Req]())
		}
	}
	if k := d.wrap.key.kind; k == keyTemplates || k == keyRaws {
		return wrapSet(fn, d, skip)
	}
	key, err := keyOf[Req](d.wrap.key)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req Req) (Resp, error) {
		if skip != nil && skip(ctx, req) {
			return fn(ctx, req)
		}
		var resp Resp
		k, err := key(ctx, req)
		if err != nil {
			return resp, err
		}
		b, err := d.binding()
		if err != nil {
			return resp, err
		}
		_, err = b.r.run(ctx, b.s, k, nil, func(ctx context.Context) (err error) {
			resp, err = fn(ctx, req)
			return err
		})
		return resp, err
	}, nil
}

// Do calls fn under the lock that its options name, as a call of a function decorated by
// Wrap would, and returns fn's error or the guard's. It is for a closure, or a job of the
// shape func(ctx) error; results leave through the closure's variables:
//
//	err := guard.Do(ctx, func(ctx context.Context) error {
//		return rebuildIndex(ctx)
//	}, guard.Key("index:rebuild"), guard.Retry(guard.NoRetry()))
//
// Do is Locker.Run on the Locker of Use (else Default) for a caller that need not learn
// whether fn ran. It has no request: its key is a Key template without placeholders or a
// RawKey, for a key computed in code ("order:" + id); KeyFunc and SkipIf are refused. Do
// checks its options at every call and returns a *ConfigError when they are invalid; on
// a hot path decorate the function once with Wrap instead.
func Do(ctx context.Context, fn func(context.Context) error, opts ...Option) error {
	if fn == nil {
		return errNilFn
	}
	d, err := newDecorator(opts, "Do", false)
	if err != nil {
		return err
	}
	key, keys, err := fixedKeys(d.wrap, "Do")
	if err != nil {
		return err
	}
	b, err := d.binding()
	if err != nil {
		return err
	}
	_, err = b.r.run(ctx, b.s, key, keys, fn)
	return err
}

// Run calls fn under the lock that opts name, exactly as a call of a function decorated by
// Wrap does (see Wrap), and reports whether fn ran. It is the one primitive under Wrap,
// Do, the Echo middleware and the gRPC interceptors, and the one to build another adapter
// on (a queue consumer, a job runner) when the key is known only at each call:
//
//	ran, err := locker.Run(ctx, handle, guard.RawKey("order:"+msg.OrderID), guard.Name("order-events"))
//
// The key is a Key template without placeholders or a RawKey; KeyFunc and SkipIf are
// refused, as Do refuses them, and so is a Use naming another Locker. Every other call
// option applies, MinHold included; without Retry, Run waits at most 5s, as Wrap does.
//
// Run acquires the lock for the owner in ctx, calls fn with the lease's context, releases
// the lock when fn returns or panics, and returns ran true with fn's error, a
// *LeaseLostError (ErrLeaseLost, with fn's error in its chain) when the lease was lost
// while fn ran, or fn's error joined to a *ReleaseError when only the release failed.
// When fn did not run, ran is false and err says why: a *ConfigError (ErrInvalidConfig)
// for bad options, ErrInvalidKey for an empty or too long key, the acquisition's
// *LockedError, ErrUnavailable, ErrClosed, or ctx's error.
//
// Run checks opts and the key before it looks at ctx or calls Redis: given a ctx that is
// already done, it returns the *ConfigError or ErrInvalidKey they cause, else ctx's
// error, and makes no Redis call. An adapter can so check its options when it is built.
func (l *Locker) Run(ctx context.Context, fn func(context.Context) error, opts ...Option) (ran bool, err error) {
	if fn == nil {
		return false, errNilFn
	}
	s := l.cfg
	if err := s.apply(opts, scopeCall|scopeWrap, "Run"); err != nil {
		return false, err
	}
	s.entryRetry()
	if u := s.wrap.use; u != nil && u != runner(l) {
		return false, &ConfigError{Field: "Use", Reason: "names another Locker than the one Run is called on"}
	}
	key, keys, err := fixedKeys(s.wrap, "Run")
	if err != nil {
		return false, err
	}
	return l.run(ctx, &s, key, keys, fn)
}

// fixedKey returns the key of Do or Run, which have no request to render one from.
func fixedKey(w wrapSettings, where string) (key string, err error) {
	switch k := w.key; k.kind {
	case keyFunc:
		return "", &ConfigError{Field: "KeyFunc", Reason: where + " has no request: compute the key in code and pass it with RawKey"}
	case keyTemplate:
		tpl, err := keyfunc.Parse(k.text, keyfunc.Sources[struct{}]{})
		if err != nil {
			return "", templateError(err, where+" has no request, so its template cannot have placeholders; pass a computed key with RawKey")
		}
		key, _ = tpl.Render(struct{}{}) // a template without placeholders cannot fail
	case keyRaw:
		key = k.text // an empty or too long key fails in acquire, with ErrInvalidKey
	default:
		return "", errNoKey
	}
	if w.skip != nil {
		return "", &ConfigError{Field: "SkipIf", Reason: where + " has no request: test the condition before calling " + where}
	}
	return key, nil
}

var errNilFn = &ConfigError{Field: "fn", Reason: "must not be nil"}

var errNoKey = &ConfigError{Field: "Key", Reason: "required: set Key, RawKey or KeyFunc"}

// decorator is the configuration of one Wrap, or of one Do call.
type decorator struct {
	opts  []Option     // re-applied over the settings of the default Locker (SetDefault)
	wrap  wrapSettings // the decorator-only options
	fixed *binding     // the Locker from Use; nil when Default is looked up per call
	bound atomic.Pointer[binding]
	where string
}

// binding is a decorator's call settings resolved against one Locker.
type binding struct {
	r   runner
	s   *settings
	err error
}

// runner is what a decorator takes its locks from: a Locker's run primitive, under
// its settings.
type runner interface {
	// run takes key, or, when keys has more than one, keys as one lock (AcquireAll).
	run(ctx context.Context, s *settings, key string, keys []string, fn func(context.Context) error) (ran bool, err error)
	config() *settings
}

// config returns the Locker's settings, which a decorator's options apply over.
func (l *Locker) config() *settings { return &l.cfg }

// newDecorator checks opts and resolves them against the Locker they name, or the
// current default Locker when it is set. keep copies opts for later defaults.
func newDecorator(opts []Option, where string, keep bool) (*decorator, error) {
	base := defaultSettings()
	if l := defaultLocker.Load(); l != nil {
		base = l.cfg
	}
	if err := base.apply(opts, scopeCall|scopeWrap, where); err != nil {
		return nil, err
	}
	base.entryRetry()
	d := &decorator{wrap: base.wrap, where: where, opts: opts}
	if keep {
		d.opts = append([]Option(nil), opts...)
	}
	if r := base.wrap.use; r != nil {
		if d.fixed = d.bind(r); d.fixed.err != nil {
			return nil, d.fixed.err
		}
	}
	return d, nil
}

// bind resolves the decorator's options against r's settings.
func (d *decorator) bind(r runner) *binding {
	s := *r.config()
	err := s.apply(d.opts, scopeCall|scopeWrap, d.where)
	s.entryRetry()
	return &binding{r: r, s: &s, err: err}
}

// binding returns the Locker of a call and the settings to acquire with.
func (d *decorator) binding() (*binding, error) {
	if d.fixed != nil {
		return d.fixed, nil
	}
	l := defaultLocker.Load()
	if l == nil {
		return nil, errNoLocker
	}
	b := d.bound.Load()
	if b == nil || b.r != runner(l) {
		b = d.bind(l)
		d.bound.Store(b)
	}
	return b, b.err
}

// run calls fn under the lock on key, or, when keys has more than one, on keys as one
// lock, acquired with s: the core of every guarded call. ran reports whether fn was
// called.
func (l *Locker) run(ctx context.Context, s *settings, key string, keys []string, fn func(context.Context) error) (ran bool, err error) {
	var le *Lease
	if len(keys) > 1 {
		le, err = l.acquireSet(ctx, keys, s, s.retry)
	} else {
		le, err = l.acquire(ctx, key, s, s.retry)
	}
	if err != nil {
		return false, err
	}
	key = le.Key()
	acquired := time.Now()
	fctx, cancel := le.Bind(ctx)
	returned := false
	defer func() {
		if !returned { // fn panicked or ran runtime.Goexit, which goes on after this
			cancel()
			_ = l.release(ctx, le, s.wrap.minHold, acquired)
		}
	}()
	err = fn(fctx)
	returned = true
	cancel()

	lost := le.Err() // reads the deadline: nil unless lost while fn ran
	rerr := l.release(ctx, le, s.wrap.minHold, acquired)
	if lost == nil && rerr != nil {
		lost, rerr = lostAtRelease(key, rerr, le.ValidUntil(), time.Now())
	}
	switch {
	case lost != nil && err == nil:
		return true, lost
	case lost != nil:
		return true, fmt.Errorf("%w; the function returned: %w", lost, err)
	case rerr != nil && err == nil:
		return true, rerr
	case rerr != nil:
		return true, fmt.Errorf("%w; then %w", err, rerr)
	}
	return true, err
}

// release releases le now, or in the background at acquired+minHold. It returns the
// result of a release made now.
func (l *Locker) release(ctx context.Context, le *Lease, minHold time.Duration, acquired time.Time) error {
	if minHold > 0 && le.Err() == nil {
		if wait := time.Until(acquired.Add(minHold)); wait > 0 {
			l.releaseAfter(ctx, le, wait)
			return nil
		}
	}
	return le.Release(ctx)
}

// releaseAfter releases le after wait, or as soon as le ends (lost, or the Locker
// closing). Close waits for it; once closed, le is released at once.
func (l *Locker) releaseAfter(ctx context.Context, le *Lease, wait time.Duration) {
	ctx = context.WithoutCancel(ctx)
	later := l.background(func() {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-le.Context().Done():
		}
		_ = le.Release(ctx)
	})
	if !later {
		_ = le.Release(ctx)
	}
}

// lostAtRelease sorts the error of a release made after fn returned under a valid lease.
// Redis reporting the lock expired or taken before the lease's validity ran out
// (replied before validUntil) means the lock vanished while the lease was valid here (a
// restarted or flushed Redis, a failover): fn may have run unprotected, and that is a
// lost lease. The same reply after the validity ran out says only that the release was
// late, and an unreachable Redis says nothing of the lock: fn ran protected, and the
// release's failure is returned as a *ReleaseError.
func lostAtRelease(key string, err error, validUntil, replied time.Time) (lost, rerr error) {
	switch {
	case errors.Is(err, ErrLeaseLost):
		return err, nil
	case (errors.Is(err, ErrExpired) || errors.Is(err, ErrNotHeld)) && replied.Before(validUntil):
		reason := "lock found expired in Redis at release"
		if errors.Is(err, ErrNotHeld) {
			reason = "lock found held by another owner at release"
		}
		return &LeaseLostError{Key: key, Reason: reason}, nil
	}
	return nil, &ReleaseError{Key: key, Err: err}
}

// keyOf builds the key function of a Wrap from its key option.
func keyOf[Req any](k keySpec) (func(context.Context, Req) (string, error), error) {
	switch k.kind {
	case keyTemplate:
		tpl, err := keyfunc.Parse(k.text, keyfunc.Sources[Req]{"req": keyfunc.FieldSource[Req]()})
		if err != nil {
			return nil, templateError(err, "")
		}
		if tpl.Static() {
			key, _ := tpl.Render(*new(Req)) // a template without placeholders cannot fail
			return constKey[Req](key), nil
		}
		return func(_ context.Context, req Req) (string, error) {
			key, err := tpl.Render(req)
			if err != nil {
				return "", fmt.Errorf("%w: template %q: %w", ErrInvalidKey, tpl.String(), err)
			}
			return key, nil
		}, nil
	case keyRaw:
		if k.text == "" {
			return nil, invalidKey(k.text, "empty (RawKey)")
		}
		return constKey[Req](k.text), nil
	case keyFunc:
		f, ok := k.fn.(func(context.Context, Req) (string, error))
		if !ok {
			return nil, typeMismatch("KeyFunc", k.fn, reflect.TypeFor[Req]())
		}
		return func(ctx context.Context, req Req) (string, error) {
			key, err := f(ctx, req)
			if err != nil {
				return "", fmt.Errorf("%w: key function: %w", ErrInvalidKey, err)
			}
			return key, nil
		}, nil
	}
	return nil, errNoKey
}

func constKey[Req any](key string) func(context.Context, Req) (string, error) {
	return func(context.Context, Req) (string, error) { return key, nil }
}

// templateError reports a key template that does not parse, keeping keyfunc's error.
func templateError(err error, hint string) error {
	reason := strings.TrimPrefix(err.Error(), "keyfunc: ")
	if hint != "" {
		reason += " (" + hint + ")"
	}
	return &ConfigError{Field: "Key", Reason: reason, Err: err}
}

// typeMismatch reports a typed option (KeyFunc, SkipIf) made for another request type.
func typeMismatch(field string, f any, want reflect.Type) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf("takes a %s request, but the wrapped function's request is %s",
		reflect.TypeOf(f).In(1), want)}
}
