package interceptor

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/guardkit/guardkit/guard"
)

// UnaryServerInterceptor returns a server interceptor that runs each unary RPC whose
// method a rule matches (WithRules), or whose method declares a lock with the
// (guardkit.v1.lock) option (WithProtoOptions), under that lock, taken from locker:
//
//   - the owner is the caller's, when it sent a token that verifies (WithSigner,
//     WithTrustedPeer), so that a call chain that comes back on the same key reenters
//     the lock; otherwise it is a fresh one;
//   - the key is rendered from the rule's template; a value that is missing, empty or
//     ambiguous fails the RPC with codes.InvalidArgument;
//   - a busy lock is waited for as the rule's Retry option says, else as the one given
//     to guard.New says, else for at most 5s, and never past the
//     RPC's deadline; a lock still busy then fails the RPC with codes.Aborted and an
//     errdetails.RetryInfo carrying guard's retry hint (see "Retry hints" in package
//     guard: the observed hold time, bounded by the holder's TTL left), an unreachable Redis
//     with codes.Unavailable (or, with WithFailOpen, runs the handler unlocked);
//   - the handler runs with a context that carries the owner and the lease
//     (guard.LeaseFromContext; its Token is the fencing token) and is cancelled, with a
//     *guard.LeaseLostError as its cause, when the lease is lost;
//   - the lock is released when the handler returns or panics. When the lease was lost
//     while the handler ran, the RPC fails with codes.Aborted even if the handler
//     succeeded, because exclusivity was not guaranteed.
//
// Methods that no rule matches and that declare no lock run unchanged, except that a
// trusted owner token is accepted into their context, so that an unguarded service in
// the middle of a chain passes the owner on. Errors are described in the package
// documentation.
//
// It panics, as regexp.MustCompile does, when the configuration is invalid: a nil
// locker, a rule without a method or key, a malformed template or method pattern, two
// rules for the same method, a rule's method or pattern that matches no method of the
// protobuf registry (the error names the closest one; see WithUnregisteredServices for
// services without descriptors), nothing to lock (no rule, and no annotated method
// with WithProtoOptions), invalid guard options, a bad metadata key, a {req...} path
// that a registered request type does not have, or, with WithProtoOptions, any such
// mistake in a method's option. The panic value is an error matching
// guard.ErrInvalidConfig.
func UnaryServerInterceptor(locker *guard.Locker, opts ...Option) grpc.UnaryServerInterceptor {
	s := mustServer(locker, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, rej := s.accept(ctx)
		r := s.match(info.FullMethod)
		if r == nil {
			return handler(ctx, req)
		}
		var resp any
		err := s.guard(ctx, r, &call{ctx: ctx, method: info.FullMethod, req: req}, rej, func(ctx context.Context) (err error) {
			resp, err = handler(ctx, req)
			return err
		})
		return resp, err
	}
}

// StreamServerInterceptor returns a server interceptor that runs each streaming RPC whose
// method a rule matches, or whose method declares a lock (WithProtoOptions), under that
// lock, as UnaryServerInterceptor does for unary RPCs. The lock covers the whole
// stream: it is acquired before the handler starts, renewed while the stream lasts,
// and released when the handler returns, which it should do when the client cancels
// the stream (its context is then done). The handler sees a ServerStream whose Context
// carries the owner and the lease.
//
// A stream has not delivered any message when the lock is taken, so a streaming
// method's rule or option must key on {md...} or {method}: a {req...} placeholder
// fails the interceptor's construction when the method is in the registry
// (protoregistry.GlobalFiles, or WithProtoRegistry), and the stream with
// codes.Internal otherwise.
//
// It panics, like UnaryServerInterceptor, when the configuration is invalid.
func StreamServerInterceptor(locker *guard.Locker, opts ...Option) grpc.StreamServerInterceptor {
	s := mustServer(locker, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, rej := s.accept(ss.Context())
		r := s.match(info.FullMethod)
		if r == nil {
			if ctx != ss.Context() {
				ss = &serverStream{ServerStream: ss, ctx: ctx}
			}
			return handler(srv, ss)
		}
		return s.guard(ctx, r, &call{ctx: ctx, method: info.FullMethod}, rej, func(ctx context.Context) error {
			return handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
		})
	}
}

// serverStream is a grpc.ServerStream with the context of a guarded stream.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context with the owner and the lease.
func (s *serverStream) Context() context.Context { return s.ctx }

// server is the shared state of the server interceptors.
type server struct {
	o         options
	rules     *ruleSet
	annotated map[string]*rule // by full method name; empty without WithProtoOptions
}

// match returns the rule that locks method: a Rule's first, then the method's option.
func (s *server) match(method string) *rule {
	if r := s.rules.match(method); r != nil {
		return r
	}
	return s.annotated[method]
}

func mustServer(locker *guard.Locker, opts []Option) *server {
	s, err := newServer(locker, opts)
	if err != nil {
		panic(err)
	}
	return s
}

func newServer(locker *guard.Locker, opts []Option) (*server, error) {
	if locker == nil {
		return nil, fmt.Errorf("interceptor: %w", &guard.ConfigError{Field: "locker", Reason: "must not be nil"})
	}
	o, err := evaluate(opts)
	if err != nil {
		return nil, err
	}
	rs, err := compileRules(locker, o.rules, o.files, o.failOpen)
	if err != nil {
		return nil, err
	}
	k := knownMethods(o.files, o.unregistered)
	for i, rl := range o.rules {
		if problem := k.check(rl.Method); problem != "" {
			return nil, fmt.Errorf("interceptor: rule %d (%q): %w", i, rl.Method, &guard.ConfigError{Field: "Rule.Method", Reason: problem})
		}
	}
	s := &server{o: o, rules: rs}
	if o.protoOptions {
		if s.annotated, err = compileAnnotations(locker, o.files, o.failOpen); err != nil {
			return nil, err
		}
	}
	if len(o.rules) == 0 && len(s.annotated) == 0 {
		return nil, errLocksNothing(o.protoOptions)
	}
	return s, nil
}

// invocation is one guarded RPC as it passes through its rule's lock.
type invocation struct {
	run  func(context.Context) error
	herr error // the handler's own error, kept aside so that Run's error is guard's
}

// handle is the function every rule's lock runs: it hands the handler the lease's
// context as it is, and keeps the handler's error. That context carries the lease's
// section, within the owner the inbound token vouched for, and the token's hop count
// (ctxid.Enter keeps it), so the handler's own guarded calls reenter the lock and an
// outgoing call counts one more hop. Nothing is read from the token again: accepting it
// a second time would put its owner, who does not hold the lock, in the section's place.
func (inv *invocation) handle(ctx context.Context) error {
	inv.herr = inv.run(ctx)
	return nil
}

// guard runs run under r's lock for c and maps the outcome to a gRPC status. rej is the
// inbound token that was refused, if any.
func (s *server) guard(ctx context.Context, r *rule, c *call, rej *rejection, run func(context.Context) error) error {
	m := mapping{method: c.method}
	key, more, tpl, err := r.render(c)
	if err != nil {
		return recorded(ctx, m.keyStatus(r, tpl, err))
	}
	if s.o.exposeKey {
		m.key = key
	}
	inv := &invocation{run: run}
	ran, err := r.run(ctx, key, more, inv.handle)
	switch {
	case !ran:
		if r.failOpen && errors.Is(err, guard.ErrUnavailable) {
			return run(ctx)
		}
		return recorded(ctx, m.acquireStatus(err, rej))
	case err == nil, !errors.Is(err, guard.ErrLeaseLost):
		// Either all went well, or the handler ran under a valid lease and only the
		// release failed (a *guard.ReleaseError): its result stands.
		return inv.herr
	}
	if inv.herr != nil { // the lease was lost while the handler ran: keep both
		err = fmt.Errorf("%w; the handler returned: %w", err, inv.herr)
	}
	return recorded(ctx, m.lostStatus(err, inv.herr))
}

// recorded records the cause of a status error on the RPC's span, where the key and the
// Redis address may be read, and returns it.
func recorded(ctx context.Context, err error) error {
	var se *statusError
	if errors.As(err, &se) {
		trace.SpanFromContext(ctx).RecordError(se.err)
	}
	return err
}
