package interceptor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestRuleMethodChecked: a Rule whose Method names no method of the protobuf registry
// fails the interceptor's construction, naming the method and the closest known one, so
// that a typo cannot leave a method unlocked; a service named by
// WithUnregisteredServices is taken as written; an interceptor that can lock nothing
// is refused.
func TestRuleMethodChecked(t *testing.T) {
	registerFile(t)
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	svc := "/" + registered + ".Accounts/"
	for _, c := range []struct{ method, want string }{
		{"/" + registered + ".Account/Hold", `no service ` + registered + `.Account in the protobuf registry; did you mean "` + svc + `Hold"?`},
		{svc + "Hodl", `service ` + registered + `.Accounts has no method "Hodl"; did you mean "` + svc + `Hold"?`},
		{svc + "Refund", `service ` + registered + `.Accounts has no method "Refund"`},
		{"/" + registered + ".Acounts/*", `matches no method of the protobuf registry; did you mean "` + svc + `*"?`},
	} {
		for _, build := range []func(){
			func() {
				interceptor.UnaryServerInterceptor(locker, interceptor.WithRules(interceptor.Rule{Method: c.method, Key: "k"}))
			},
			func() {
				interceptor.StreamServerInterceptor(locker, interceptor.WithRules(interceptor.Rule{Method: c.method, Key: "k"}))
			},
		} {
			err := mustPanicConfig(t, build)
			var ce *guard.ConfigError
			if !errors.As(err, &ce) || ce.Field != "Rule.Method" || !strings.Contains(err.Error(), c.method) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("rule for %s: %v\nwant a *guard.ConfigError for Rule.Method naming it and saying %s", c.method, err, c.want)
			}
		}
	}
	// Known methods and patterns build; so does any method of a service named as
	// having no descriptor.
	interceptor.UnaryServerInterceptor(locker, interceptor.WithRules(
		interceptor.Rule{Method: svc + "Hold", Key: "k"},
		interceptor.Rule{Method: svc + "*", Key: "k"},
		interceptor.Rule{Method: "/" + registered + ".Acc*", Key: "k"},
		interceptor.Rule{Method: "*", Key: "k"},
		interceptor.Rule{Method: "/shop.v1.Payments/Refund", Key: "k"},
	), interceptor.WithUnregisteredServices("shop.v1.Payments"))

	// Nothing to lock.
	for _, opts := range [][]interceptor.Option{nil, {interceptor.WithProtoOptions()}} {
		err := mustPanicConfig(t, func() { interceptor.UnaryServerInterceptor(locker, opts...) })
		if !strings.Contains(err.Error(), "locks nothing") {
			t.Fatalf("interceptor without rules: %v, want it to say it locks nothing", err)
		}
	}
}

// TestRuleBareField: a Rule's key accepts the bare {field} form that the proto option
// accepts: {from_account} is {req.from_account}, and locks the same key.
func TestRuleBareField(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	keys := make(chan string, 2)
	hold := func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		le, _ := guard.LeaseFromContext(ctx)
		keys <- le.Key()
		return wrapperspb.Int64(1), nil
	}
	for _, key := range []string{"account:{from_account}:{to.id}", "account:{req.from_account}:{req.to.id}"} {
		conn := dial(t, serve(t, service(map[string]unaryFunc{"Hold": hold}, nil),
			grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
				interceptor.WithRules(interceptor.Rule{Method: mHold, Key: key})))))
		req := transfer("a1", func(m *dynamicpb.Message) {
			to := m.Mutable(transferDesc.Fields().ByName("to")).Message()
			to.Set(to.Descriptor().Fields().ByName("id"), protoreflect.ValueOfString("b2"))
		})
		if _, err := invoke(ctxTimeout(t, 5*time.Second), conn, mHold, req); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if got := <-keys; got != "account:a1:b2" {
			t.Fatalf("rule key %s locked %q, want account:a1:b2", key, got)
		}
	}
}
