package interceptor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/keyfunc"
)

// keyOf runs ui as the server would for one RPC and returns the key of the lease the
// handler ran under, or "" when it ran without one.
func keyOf(ctx context.Context, ui grpc.UnaryServerInterceptor, method string, req any) (string, error) {
	var key string
	_, err := ui(ctx, req, &grpc.UnaryServerInfo{FullMethod: method}, func(ctx context.Context, _ any) (any, error) {
		if le, ok := guard.LeaseFromContext(ctx); ok {
			key = le.Key()
		}
		return nil, nil
	})
	return key, err
}

func TestRulePrecedence(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	ui := interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithRules(
		interceptor.Rule{Method: "*", Key: "any:{method}"},
		interceptor.Rule{Method: "/x.S/*", Key: "service:{method}"},
		interceptor.Rule{Method: "/x.S/Long*", Key: "long:{method}"},
		interceptor.Rule{Method: "/x.S/M", Key: "exact"},
	))
	ctx := ctxTimeout(t, 5*time.Second)
	for method, want := range map[string]string{
		"/x.S/M":       "exact",
		"/x.S/Mo":      "service:/x.S/Mo",
		"/x.S/LongOne": "long:/x.S/LongOne",
		"/y.T/Q":       "any:/y.T/Q",
	} {
		if got, err := keyOf(ctx, ui, method, transfer("1")); err != nil || got != want {
			t.Errorf("%s: key %q, %v; want %q", method, got, err, want)
		}
	}

	none := interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithRules(interceptor.Rule{Method: "/x.S/M", Key: "exact"}))
	if got, err := keyOf(ctx, none, "/x.S/Other", transfer("1")); err != nil || got != "" {
		t.Fatalf("method without a rule: key %q, %v; want no lock", got, err)
	}
}

// TestRequestSource: {req...} reads proto fields by proto name, through nested
// messages, maps, enums, wrappers and timestamps, of dynamic and generated messages.
func TestRequestSource(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	rules := map[string]string{
		"/t/nested": "to:{req.to.id}",
		"/t/map":    "region:{req.labels.region}",
		"/t/enum":   "kind:{req.kind}",
		"/t/memo":   "memo:{req.memo}",
		"/t/at":     "at:{req.at}",
		"/t/int":    "n:{req.amount}",
		"/t/md":     "tenant:{md.X-Tenant}",
		"/t/two":    "{req.from_account}:{md.x-tenant}",
		"/t/value":  "value:{req.value}",
	}
	var rs []interceptor.Rule
	for m, k := range rules {
		rs = append(rs, interceptor.Rule{Method: m, Key: k})
	}
	ui := interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithRules(rs...))
	ctx := metadata.NewIncomingContext(ctxTimeout(t, 5*time.Second), metadata.Pairs("x-tenant", "acme"))

	f := transferDesc.Fields()
	at := time.Date(2025, 6, 1, 12, 30, 0, 5, time.FixedZone("CEST", 2*3600))
	atText, _ := keyfunc.Format(at)
	full := transfer("a:b", withLabel("region", "eu"), func(m *dynamicpb.Message) {
		to := m.Mutable(f.ByName("to")).Message()
		to.Set(to.Descriptor().Fields().ByName("id"), protoreflect.ValueOfString("acct-2"))
		m.Set(f.ByName("kind"), protoreflect.ValueOfEnum(1))
		m.Set(f.ByName("memo"), protoreflect.ValueOfMessage(wrapperspb.String("rent").ProtoReflect()))
		m.Set(f.ByName("at"), protoreflect.ValueOfMessage(timestamppb.New(at).ProtoReflect()))
		m.Set(f.ByName("amount"), protoreflect.ValueOfInt64(-42))
	})
	for _, tc := range []struct {
		method string
		req    any
		want   string
	}{
		{"/t/nested", full, "to:acct-2"},
		{"/t/map", full, "region:eu"},
		{"/t/enum", full, "kind:KIND_FAST"},
		{"/t/memo", full, "memo:rent"},
		{"/t/at", full, "at:" + atText},
		{"/t/int", full, "n:-42"},
		{"/t/md", full, "tenant:acme"},
		{"/t/two", full, "a%3Ab:acme"}, // escaped, see keyfunc "Escaping"
		// One path, resolved separately for each message type it meets.
		{"/t/value", wrapperspb.String("v1"), "value:v1"},
		{"/t/value", wrapperspb.Int64(7), "value:7"},
		{"/t/value", wrapperspb.Bool(true), "value:true"},
	} {
		if got, err := keyOf(ctx, ui, tc.method, tc.req); err != nil || got != tc.want {
			t.Errorf("%s on %v: key %q, %v; want %q", tc.method, tc.req, got, err, tc.want)
		}
	}

	// A proto3 field without presence that holds its zero value is missing, and so is
	// an absent map key or nested message.
	for _, tc := range []struct {
		method string
		req    proto.Message
	}{
		{"/t/int", transfer("1")},
		{"/t/map", transfer("1", withLabel("other", "x"))},
		{"/t/nested", transfer("1")},
		{"/t/memo", transfer("1")},
	} {
		_, err := keyOf(ctx, ui, tc.method, tc.req)
		if st := wantCode(t, err, codes.InvalidArgument); !errors.Is(err, keyfunc.ErrMissing) {
			t.Errorf("%s: %v, want ErrMissing in the chain", tc.method, st)
		}
	}
	// A wrapper field that is set to an empty string is present but empty.
	emptyMemo := transfer("1", func(m *dynamicpb.Message) {
		m.Set(f.ByName("memo"), protoreflect.ValueOfMessage(wrapperspb.String("").ProtoReflect()))
	})
	_, err := keyOf(ctx, ui, "/t/memo", emptyMemo)
	if wantCode(t, err, codes.InvalidArgument); !errors.Is(err, keyfunc.ErrEmpty) {
		t.Errorf("empty wrapper: %v, want ErrEmpty", err)
	}

	// A message type without the field, or a request that is not a proto message, is
	// a server configuration error.
	for _, req := range []any{full, "not a message"} {
		_, err := keyOf(ctx, ui, "/t/value", req)
		if wantCode(t, err, codes.Internal); !errors.Is(err, guard.ErrInvalidConfig) {
			t.Errorf("request %T: %v, want ErrInvalidConfig", req, err)
		}
	}
}

// TestRequestSourceConcurrent: many RPCs resolving one path on new message types at
// once agree on the keys (run with -race).
func TestRequestSourceConcurrent(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	ui := interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithRules(interceptor.Rule{Method: "/t/v", Key: "v:{req.value}"}))
	ctx := ctxTimeout(t, 5*time.Second)
	reqs := []proto.Message{wrapperspb.String("s"), wrapperspb.Int32(3), wrapperspb.UInt64(4), wrapperspb.Double(0.5)}
	want := []string{"v:s", "v:3", "v:4", "v:0.5"}
	errs := make(chan error, 4*len(reqs))
	for range 4 {
		for i, req := range reqs {
			go func() {
				got, err := keyOf(ctx, ui, "/t/v", req)
				if err == nil && got != want[i] {
					err = errors.New("key " + got + ", want " + want[i])
				}
				errs <- err
			}()
		}
	}
	for range 4 * len(reqs) {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestRegisteredMethodsCheckedAtConstruction: rules on methods whose descriptors are in
// protoregistry.GlobalFiles are checked against their request types when built.
func TestRegisteredMethodsCheckedAtConstruction(t *testing.T) {
	registerFile(t)
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	svc := "/" + registered + ".Accounts/"
	for _, tc := range []struct {
		rules []interceptor.Rule
		bad   string // a text the error must contain; "" when the rules are valid
	}{
		{rules: []interceptor.Rule{{Method: svc + "Hold", Key: "to:{req.to.id}"}}},
		{rules: []interceptor.Rule{{Method: svc + "Hold", Key: "a:{req.from}"}}, bad: `no field "from"`},
		{rules: []interceptor.Rule{{Method: svc + "Hold", Key: "a:{req.tags}"}}, bad: "repeated field"},
		{rules: []interceptor.Rule{{Method: svc + "Hold", Key: "a:{req.labels}"}}, bad: "needs a key"},
		{rules: []interceptor.Rule{{Method: svc + "Hold", Key: "a:{req.to}"}}, bad: "cannot name a lock"},
		{rules: []interceptor.Rule{{Method: svc + "Hold", Key: "a:{req.amount.x}"}}, bad: "has no fields"},
		{rules: []interceptor.Rule{{Method: svc + "Watch", Key: "w:{req.from_account}"}}, bad: "streaming RPC"},
		// A service pattern covers the streaming Watch, unless a rule of its own does.
		{rules: []interceptor.Rule{{Method: svc + "*", Key: "a:{req.from_account}"}}, bad: "Watch"},
		{rules: []interceptor.Rule{{Method: svc + "*", Key: "a:{req.from_account}"}, {Method: svc + "Watch", Key: "w:{md.x-account}"}}},
	} {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = r.(error)
				}
			}()
			interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithRules(tc.rules...))
			return nil
		}()
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("rules %v: %v", tc.rules, err)
		case tc.bad != "" && (!errors.Is(err, guard.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("rules %v: error %v, want ErrInvalidConfig mentioning %q", tc.rules, err, tc.bad)
		}
	}
}
