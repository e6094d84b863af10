package interceptor_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/interceptor/lockpb"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/keyfunc"
)

// annotate returns a registry of its own holding the test file, in package testPkg,
// whose methods carry the given (guardkit.v1.lock) options by method name. It is
// never GlobalFiles, so that no test can leave a bad option where others read.
func annotate(t testing.TB, locks map[string]*lockpb.Lock) *protoregistry.Files {
	t.Helper()
	return annotateWith(t, func(opts *descriptorpb.MethodOptions, lock *lockpb.Lock) {
		proto.SetExtension(opts, lockpb.E_Lock, lock)
	}, locks)
}

// annotateWith is annotate with set putting each option into its method's options.
func annotateWith(t testing.TB, set func(*descriptorpb.MethodOptions, *lockpb.Lock), locks map[string]*lockpb.Lock) *protoregistry.Files {
	t.Helper()
	fd := buildFile(testPkg, func(fdp *descriptorpb.FileDescriptorProto) {
		for _, m := range fdp.Service[0].Method {
			if lock := locks[m.GetName()]; lock != nil {
				m.Options = &descriptorpb.MethodOptions{}
				set(m.Options, lock)
			}
		}
	})
	files := new(protoregistry.Files)
	if err := files.RegisterFile(fd); err != nil {
		t.Fatalf("RegisterFile: %v", err)
	}
	return files
}

func failFast() *lockpb.Lock_FailFast { return &lockpb.Lock_FailFast{FailFast: true} }

func maxWait(d time.Duration) *lockpb.Lock_MaxWait {
	return &lockpb.Lock_MaxWait{MaxWait: durationpb.New(d)}
}

// redisCalls returns the commands srv has run since it started, INFO excepted.
func redisCalls(t testing.TB, srv *redistest.Server) map[string]int64 {
	t.Helper()
	calls := srv.CommandCalls(t)
	delete(calls, "info")
	return calls
}

// TestAnnotationLocksLikeRule: a method annotated with (guardkit.v1.lock) is locked
// exactly as the equivalent Rule locks it — the same Redis key and TTL, the same
// statuses and RetryInfo, the same waiting, and the same reentry of a lock that the
// caller's signed owner holds in another service.
func TestAnnotationLocksLikeRule(t *testing.T) {
	srv := redistest.Start(t)
	annLocker, rdb := newLocker(t, srv)
	ruleLocker, _ := newLocker(t, srv)
	holder, _ := newLocker(t, srv)
	signer := newSigner(t, []ctxid.Key{keyCurrent})
	ttl := 2 * time.Second
	files := annotate(t, map[string]*lockpb.Lock{
		"Hold":  {Key: "account:{from_account}", Ttl: durationpb.New(ttl), Wait: failFast()},
		"Debit": {Key: "account:{req.from_account}:{labels.region}", Wait: maxWait(20 * time.Second)},
	})
	rules := interceptor.WithRules(
		interceptor.Rule{Method: mHold, Key: "account:{req.from_account}",
			Options: []guard.Option{guard.TTL(ttl), guard.Retry(guard.NoRetry())}},
		interceptor.Rule{Method: mDebit, Key: "account:{req.from_account}:{req.labels.region}",
			Options: []guard.Option{guard.Retry(guard.MaxWait(20*time.Second, nil))}},
	)

	type visit struct {
		key       string
		pttl      time.Duration
		reentrant bool
		token     int64
	}
	visits := make(chan visit, 1)
	h := func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		le, ok := guard.LeaseFromContext(ctx)
		if !ok {
			return nil, status.Error(codes.Internal, "no lease")
		}
		// The hold's lease in Redis: its #e, by the server's clock.
		until, _ := rdb.HGet(ctx, "guard:{"+le.Key()+"}", "#e").Int64()
		left := time.Duration(until-rdb.Time(ctx).Val().UnixMilli()) * time.Millisecond
		visits <- visit{key: le.Key(), pttl: left, reentrant: le.Reentrant(), token: le.Token()}
		return wrapperspb.Int64(1), nil
	}
	sd := service(map[string]unaryFunc{"Hold": h, "Debit": h}, nil)
	client := grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(signer))
	servers := []struct {
		name string
		conn *grpc.ClientConn
	}{
		{"annotation", dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(annLocker, unregistered,
			interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files), interceptor.WithSigner(signer)))), client)},
		{"rule", dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(ruleLocker, unregistered,
			rules, interceptor.WithSigner(signer)))), client)},
	}
	ctx := ctxTimeout(t, 30*time.Second)
	eu := withLabel("region", "eu")

	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			// A free lock: the key of the template, in Redis under the declared TTL;
			// the method without a TTL gets the Locker's (30s).
			if _, err := invoke(ctx, s.conn, mHold, transfer("1")); err != nil {
				t.Fatalf("Hold: %v", err)
			}
			if v := <-visits; v.key != "account:1" || v.pttl <= 0 || v.pttl > ttl || v.reentrant {
				t.Fatalf("Hold ran under %+v, want account:1 with a TTL in (0, %s]", v, ttl)
			}
			if _, err := invoke(ctx, s.conn, mDebit, transfer("1", eu)); err != nil {
				t.Fatalf("Debit: %v", err)
			}
			if v := <-visits; v.key != "account:1:eu" || v.pttl <= ttl || v.pttl > 30*time.Second {
				t.Fatalf("Debit ran under %+v, want account:1:eu with the Locker's TTL", v)
			}

			// A missing field.
			_, err := invoke(ctx, s.conn, mHold, transfer(""))
			wantReason(t, wantCode(t, err, codes.InvalidArgument), interceptor.ReasonInvalidKey, mHold)

			// A busy lock: fail_fast answers at once with the holder's TTL as RetryInfo.
			held, err := holder.Acquire(ctx, "account:2", guard.TTL(10*time.Second))
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			defer held.Release(context.Background())
			_, err = invoke(ctx, s.conn, mHold, transfer("2"))
			wantBusy(t, err, mHold, 10*time.Second)

			// max_wait waits: Debit's attempt is seen by Redis while the lock is held,
			// and Debit runs once the holder releases it.
			held2, err := holder.Acquire(ctx, "account:2:eu")
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			defer held2.Release(context.Background())
			before := redisCalls(t, srv)
			done := make(chan error, 1)
			go func() {
				_, err := invoke(ctx, s.conn, mDebit, transfer("2", eu))
				done <- err
			}()
			waitUntil(t, 10*time.Second, "Debit's first attempt", func() bool {
				after := redisCalls(t, srv)
				return after["evalsha"]+after["eval"] > before["evalsha"]+before["eval"]
			})
			if err := held2.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Debit after the release: %v, want it to have waited for the lock", err)
			}
			if v := <-visits; v.key != "account:2:eu" {
				t.Fatalf("Debit ran under %+v", v)
			}

			// The caller's signed owner, which holds account:2 in another service,
			// reenters it with the same fencing token.
			if err := held.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			mine := ctxid.NewContext(ctx, ctxid.New())
			outer, err := holder.Acquire(mine, "account:3")
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			defer outer.Release(context.Background())
			// Called from inside the section that holds the lock.
			if _, err := invoke(ctxid.NewContext(ctx, outer.Owner()), s.conn, mHold, transfer("3")); err != nil {
				t.Fatalf("Hold as the holder's owner: %v", err)
			}
			if v := <-visits; v.key != "account:3" || !v.reentrant || v.token != outer.Token() {
				t.Fatalf("Hold as the holder's owner ran under %+v, want a reentry of token %d", v, outer.Token())
			}
			// Another owner finds it busy.
			_, err = invoke(ctx, s.conn, mHold, transfer("3"))
			wantBusy(t, err, mHold, 30*time.Second)
		})
	}
}

// TestAnnotationConfigErrors: a mistake in a method's option fails the interceptor's
// construction with an error naming the method and the option's field.
func TestAnnotationConfigErrors(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	for _, tc := range []struct {
		name   string
		method string // "Hold" unless set
		lock   *lockpb.Lock
		field  string // of the option
		text   string // in the error's text
		cause  error
	}{
		{name: "no key", lock: &lockpb.Lock{}, field: "key", text: "required"},
		{name: "bad template", lock: &lockpb.Lock{Key: "a:{from_account"}, field: "key", cause: keyfunc.ErrSyntax},
		{name: "bad more_keys template", lock: &lockpb.Lock{Key: "a", MoreKeys: []string{"b", "c:{to.id"}}, field: "more_keys[1]", cause: keyfunc.ErrSyntax},
		{name: "unknown bare field", lock: &lockpb.Lock{Key: "a:{order}"}, field: "key", text: `{req.order}: message ` + testPkg + `.Transfer has no field "order"`},
		{name: "unknown req field", lock: &lockpb.Lock{Key: "a:{req.order}"}, field: "key", text: `has no field "order"`},
		{name: "unknown nested field", lock: &lockpb.Lock{Key: "a:{to.number}"}, field: "key", text: `has no field "number"`},
		{name: "not a source", lock: &lockpb.Lock{Key: "a:{param.id}"}, field: "key", text: `has no field "param"`},
		{name: "repeated field", lock: &lockpb.Lock{Key: "a:{tags}"}, field: "key", text: "repeated field"},
		{name: "bare md", lock: &lockpb.Lock{Key: "a:{md}"}, field: "key", text: "md needs a metadata key"},
		{name: "stream keyed by request", method: "Watch", lock: &lockpb.Lock{Key: "w:{from_account}"}, field: "key", text: "streaming RPC"},
		{name: "zero ttl", lock: &lockpb.Lock{Key: "a", Ttl: durationpb.New(0)}, field: "ttl", text: "must be > 0"},
		{name: "negative ttl", lock: &lockpb.Lock{Key: "a", Ttl: durationpb.New(-time.Second)}, field: "ttl", text: "must be > 0"},
		{name: "malformed ttl", lock: &lockpb.Lock{Key: "a", Ttl: &durationpb.Duration{Seconds: 1, Nanos: -1}}, field: "ttl", text: "different signs"},
		{name: "huge ttl", lock: &lockpb.Lock{Key: "a", Ttl: &durationpb.Duration{Seconds: 10_000_000_000}}, field: "ttl", text: "beyond the range"},
		{name: "ttl below the renewal", lock: &lockpb.Lock{Key: "a", Ttl: durationpb.New(2 * time.Millisecond)}, field: "ttl", text: "TTL: must be > 4ms"},
		{name: "negative max_wait", lock: &lockpb.Lock{Key: "a", Wait: maxWait(-time.Second)}, field: "max_wait", text: "must be ≥ 0"},
		{name: "semaphore without permits", lock: &lockpb.Lock{Key: "a", Kind: lockpb.Kind_KIND_SEMAPHORE}, field: "permits", text: "must be ≥ 1 with KIND_SEMAPHORE, got 0"},
		{name: "permits of a read lock", lock: &lockpb.Lock{Key: "a", Kind: lockpb.Kind_KIND_READ, Permits: 3}, field: "permits", text: "is for KIND_SEMAPHORE only, got 3 with KIND_READ"},
		{name: "unknown kind", lock: &lockpb.Lock{Key: "a", Kind: lockpb.Kind(9)}, field: "kind", text: "unknown kind 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.method
			if name == "" {
				name = "Hold"
			}
			files := annotate(t, map[string]*lockpb.Lock{name: tc.lock, "Debit": {Key: "fine:{from_account}"}})
			opts := []interceptor.Option{interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files)}
			for _, build := range []func(){
				func() {
					interceptor.UnaryServerInterceptor(locker, append([]interceptor.Option{unregistered}, opts...)...)
				},
				func() {
					interceptor.StreamServerInterceptor(locker, append([]interceptor.Option{unregistered}, opts...)...)
				},
			} {
				err := mustPanicConfig(t, build)
				prefix := "interceptor: " + accounts + name + ": option (guardkit.v1.lock)." + tc.field + ": "
				if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.text) {
					t.Fatalf("error %q: want it to start with %q and contain %q", msg, prefix, tc.text)
				}
				var ce *guard.ConfigError
				if !errors.As(err, &ce) {
					t.Fatalf("error %v: no *guard.ConfigError in the chain", err)
				}
				if tc.name != "ttl below the renewal" && ce.Field != "(guardkit.v1.lock)."+tc.field {
					t.Fatalf("ConfigError field %q, want (guardkit.v1.lock).%s", ce.Field, tc.field)
				}
				if tc.cause != nil && !errors.Is(err, tc.cause) {
					t.Fatalf("error %v: want %v in the chain", err, tc.cause)
				}
			}
		})
	}

	// A ttl too short for the Locker's renewal period (guard names Renewal) is the
	// option's ttl.
	slow, _ := newLocker(t, srv, guard.Renewal(10*time.Second, 0))
	files := annotate(t, map[string]*lockpb.Lock{"Hold": {Key: "a", Ttl: durationpb.New(time.Second)}, "Debit": {Key: "fine:{from_account}"}})
	err := mustPanicConfig(t, func() {
		interceptor.UnaryServerInterceptor(slow, unregistered, interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files))
	})
	if prefix := "interceptor: " + accounts + "Hold: option (guardkit.v1.lock).ttl: "; !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), "Renewal: every must be") {
		t.Fatalf("ttl below the Locker's renewal period: %v, want it to start with %q and name Renewal", err, prefix)
	}

	// The message names the method and the field as a reader of the .proto file
	// would look for them.
	files = annotate(t, map[string]*lockpb.Lock{"Debit": {Key: "order:{req.order}"}})
	err = mustPanicConfig(t, func() {
		interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files))
	})
	want := "interceptor: " + mDebit + `: option (guardkit.v1.lock).key: {req.order}: message ` + testPkg +
		`.Transfer has no field "order" (fields are named as in the .proto file)`
	if err.Error() != want {
		t.Fatalf("error\n%s\nwant\n%s", err, want)
	}

	// Every field in use, the shorthand beside the three sources, literal braces.
	files = annotate(t, map[string]*lockpb.Lock{
		"Hold": {Key: "a:{from_account}:{md.x-tenant}:{method}:{to.id}:{labels.region}:{req.kind}:{{x}}",
			Ttl: durationpb.New(time.Second), Wait: maxWait(0), FailOpen: true, Name: "hold"},
		"Debit": {Key: "d:{req.amount}", Wait: failFast()},
		"Watch": {Key: "w:{md.x-account}"},
	})
	interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files))
	interceptor.StreamServerInterceptor(locker, unregistered, interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files))
	// The program's own registry, where nothing is annotated, locks nothing: refused.
	err = mustPanicConfig(t, func() { interceptor.UnaryServerInterceptor(locker, interceptor.WithProtoOptions()) })
	if ce := new(guard.ConfigError); !errors.As(err, &ce) || ce.Field != "WithRules" {
		t.Fatalf("no rule and no annotated method: %v, want a *guard.ConfigError for WithRules", err)
	}
}

// TestAnnotationPassThrough: methods without the option, and every method when
// WithProtoOptions is not given, run without a lock and without a Redis command.
func TestAnnotationPassThrough(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	files := annotate(t, map[string]*lockpb.Lock{"Hold": {Key: "account:{from_account}"}})
	sd := service(map[string]unaryFunc{"Hold": ok, "Plain": ok}, nil)
	annotated := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
		interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files)))))
	// Without WithProtoOptions (a rule on another method, since an interceptor that
	// locks nothing is refused), Hold's option is not read.
	optedOut := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
		interceptor.WithProtoRegistry(files), interceptor.WithRules(interceptor.Rule{Method: mAudit, Key: "audit"})))))
	ctx := ctxTimeout(t, 10*time.Second)

	before := redisCalls(t, srv)
	for _, c := range []struct {
		conn   *grpc.ClientConn
		method string
	}{{annotated, mPlain}, {optedOut, mPlain}, {optedOut, mHold}} {
		for range 3 {
			if v, err := invoke(ctx, c.conn, c.method, transfer("1")); err != nil || v != 0 {
				t.Fatalf("%s: %d, %v; want the handler to run without a lease", c.method, v, err)
			}
		}
	}
	if after := redisCalls(t, srv); !maps.Equal(before, after) {
		t.Fatalf("Redis commands before %v, after %v: want none for unlocked methods", before, after)
	}
	if v, err := invoke(ctx, annotated, mHold, transfer("1")); err != nil || v != 1 {
		t.Fatalf("annotated Hold: %d, %v; want it to run under a lease", v, err)
	}
	if after := redisCalls(t, srv); maps.Equal(before, after) {
		t.Fatal("the annotated method's lock made no Redis command: the count is blind")
	}
}

// TestAnnotationStream: a streaming method's option locks the whole stream.
func TestAnnotationStream(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	files := annotate(t, map[string]*lockpb.Lock{"Watch": {Key: "watch:{md.x-account}", Wait: failFast()}})
	keys := make(chan string, 2)
	watch := func(_ *dynamicpb.Message, ss grpc.ServerStream) error {
		le, ok := guard.LeaseFromContext(ss.Context())
		if !ok {
			return status.Error(codes.Internal, "stream context carries no lease")
		}
		keys <- le.Key()
		if err := ss.SendMsg(wrapperspb.Int64(le.Token())); err != nil {
			return err
		}
		<-ss.Context().Done()
		return ss.Context().Err()
	}
	conn := dial(t, serve(t, service(nil, map[string]streamFunc{"Watch": watch}),
		grpc.ChainStreamInterceptor(interceptor.StreamServerInterceptor(locker, unregistered,
			interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files)))))
	open := func(ctx context.Context, acct string) error {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-account", acct)
		s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, mWatch)
		if err != nil {
			return err
		}
		if err := s.SendMsg(transfer("x")); err != nil {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		return s.RecvMsg(new(wrapperspb.Int64Value))
	}
	base := ctxTimeout(t, 10*time.Second)
	first, cancel := context.WithCancel(base)
	defer cancel()
	if err := open(first, "1"); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if key := <-keys; key != "watch:1" {
		t.Fatalf("stream locked %q, want watch:1", key)
	}
	wantBusy(t, open(base, "1"), mWatch, 30*time.Second)
	cancel()
}

// TestRuleOverridesAnnotation: a Rule that matches a method, by name or pattern,
// takes precedence over the method's option.
func TestRuleOverridesAnnotation(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	files := annotate(t, map[string]*lockpb.Lock{
		"Hold":  {Key: "ann:{from_account}"},
		"Debit": {Key: "ann:{from_account}"},
	})
	ctx := ctxTimeout(t, 10*time.Second)
	build := func(rules ...interceptor.Rule) grpc.UnaryServerInterceptor {
		return interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files),
			interceptor.WithRules(rules...))
	}
	for _, tc := range []struct {
		ui          grpc.UnaryServerInterceptor
		hold, debit string
	}{
		{build(), "ann:1", "ann:1"},
		{build(interceptor.Rule{Method: mHold, Key: "rule:{req.from_account}"}), "rule:1", "ann:1"},
		// (The pattern covers the streaming Watch too, so it keys by method.)
		{build(interceptor.Rule{Method: accounts + "*", Key: "svc:{method}"}), "svc:" + mHold, "svc:" + mDebit},
		{build(interceptor.Rule{Method: "/other.v1.S/*", Key: "other"}), "ann:1", "ann:1"},
	} {
		for method, want := range map[string]string{mHold: tc.hold, mDebit: tc.debit} {
			if got, err := keyOf(ctx, tc.ui, method, transfer("1")); err != nil || got != want {
				t.Errorf("%s: key %q, %v; want %q", method, got, err, want)
			}
		}
	}
}

// TestAnnotationFailOpen: fail_open, like Rule.FailOpen, lets one method run without
// its lock when Redis is unreachable while the others fail closed.
func TestAnnotationFailOpen(t *testing.T) {
	srv := redistest.Start(t)
	locker, err := guard.New(srv.Client(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 }))
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	files := annotate(t, map[string]*lockpb.Lock{
		"Hold": {Key: "account:{from_account}", FailOpen: true},
		// The fail-closed methods wait out the outage for their budget, then fail.
		"Debit": {Key: "account:{from_account}", Wait: &lockpb.Lock_MaxWait{MaxWait: durationpb.New(500 * time.Millisecond)}},
	})
	sd := service(map[string]unaryFunc{"Hold": ok, "Debit": ok, "Audit": ok, "Plain": ok}, nil)
	conn := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
		interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files),
		interceptor.WithRules(
			interceptor.Rule{Method: mAudit, Key: "account:{req.from_account}", FailOpen: true},
			interceptor.Rule{Method: mPlain, Key: "account:{req.from_account}",
				Options: []guard.Option{guard.Retry(guard.MaxWait(500*time.Millisecond, nil))}},
		)))))
	ctx := ctxTimeout(t, 10*time.Second)
	for _, m := range []string{mHold, mDebit, mAudit, mPlain} {
		if v, err := invoke(ctx, conn, m, transfer("1")); err != nil || v != 1 {
			t.Fatalf("%s before the fault: %d, %v", m, v, err)
		}
	}
	srv.Kill(t)
	for _, m := range []string{mHold, mAudit} {
		if v, err := invoke(ctx, conn, m, transfer("1")); err != nil || v != 0 {
			t.Fatalf("%s (fail open): %d, %v; want the handler to run without a lease", m, v, err)
		}
	}
	for _, m := range []string{mDebit, mPlain} {
		_, err := invoke(ctx, conn, m, transfer("1"))
		wantReason(t, wantCode(t, err, codes.Unavailable), interceptor.ReasonUnavailable, m)
	}
}

// TestProtoRegistry: WithProtoRegistry is where rules are checked too, and an option
// that was parsed while its extension was unknown is still read.
func TestProtoRegistry(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	bad := interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "a:{req.nope}"})
	// The test package is not in GlobalFiles: the rule is checked at its first call.
	interceptor.UnaryServerInterceptor(locker, unregistered, bad)
	err := mustPanicConfig(t, func() {
		interceptor.UnaryServerInterceptor(locker, unregistered, bad, interceptor.WithProtoRegistry(annotate(t, nil)))
	})
	if !strings.Contains(err.Error(), `no field "nope"`) {
		t.Fatalf("error %v: want the rule's path checked against the registry's request type", err)
	}

	// Options bytes decoded without lockpb's extension keep it as unknown fields.
	files := annotateWith(t, func(opts *descriptorpb.MethodOptions, lock *lockpb.Lock) {
		withExt := &descriptorpb.MethodOptions{}
		proto.SetExtension(withExt, lockpb.E_Lock, lock)
		b, err := proto.Marshal(withExt)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if err := (proto.UnmarshalOptions{Resolver: new(protoregistry.Types)}).Unmarshal(b, opts); err != nil {
			t.Fatalf("Unmarshal: %v", err)
		}
		if proto.HasExtension(opts, lockpb.E_Lock) {
			t.Fatal("the option was decoded as a known extension")
		}
	}, map[string]*lockpb.Lock{"Hold": {Key: "ann:{from_account}"}})
	ui := interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files))
	if got, err := keyOf(ctxTimeout(t, 5*time.Second), ui, mHold, transfer("1")); err != nil || got != "ann:1" {
		t.Fatalf("key %q, %v; want ann:1", got, err)
	}
}

// TestLockOptionIdentity: the option's name, number and import path are what .proto
// files and the documentation use; changing one breaks every annotated file.
func TestLockOptionIdentity(t *testing.T) {
	xd := lockpb.E_Lock.TypeDescriptor()
	if xd.FullName() != "guardkit.v1.lock" || xd.Number() != 71301 ||
		xd.ContainingMessage().FullName() != "google.protobuf.MethodOptions" ||
		xd.ParentFile().Path() != "guardkit/v1/lock.proto" {
		t.Fatalf("option %s = %d on %s in %s", xd.FullName(), xd.Number(), xd.ContainingMessage().FullName(), xd.ParentFile().Path())
	}
	if _, err := protoregistry.GlobalFiles.FindFileByPath("guardkit/v1/lock.proto"); err != nil {
		t.Fatalf("lock.proto is not registered: %v", err)
	}
}
