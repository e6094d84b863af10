package interceptor_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/keyfunc"
)

// TestConfigErrors: every configuration mistake fails when the interceptor is built,
// with an error that names the field.
func TestConfigErrors(t *testing.T) {
	registerFile(t)
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	rule := func(method, key string, opts ...guard.Option) interceptor.Option {
		return interceptor.WithRules(interceptor.Rule{Method: method, Key: key, Options: opts})
	}
	for _, tc := range []struct {
		name   string
		locker *guard.Locker
		opts   []interceptor.Option
		field  string
		cause  error
	}{
		{name: "nil locker", opts: nil, field: "locker"},
		{name: "no method", opts: []interceptor.Option{rule("", "k")}, field: "Rule.Method"},
		{name: "relative method", opts: []interceptor.Option{rule("pkg.S/M", "k")}, field: "Rule.Method"},
		{name: "star inside", opts: []interceptor.Option{rule("/pkg.S/*M", "k")}, field: "Rule.Method"},
		{name: "no method name", opts: []interceptor.Option{rule("/pkg.S", "k")}, field: "Rule.Method"},
		{name: "duplicate method", opts: []interceptor.Option{rule("/pkg.S/M", "a"), rule("/pkg.S/M", "b")}, field: "Rule.Method"},
		{name: "no key", opts: []interceptor.Option{rule("/pkg.S/M", "")}, field: "Rule.Key"},
		{name: "bad template", opts: []interceptor.Option{rule("/pkg.S/M", "a:{req.id")}, field: "Rule.Key", cause: keyfunc.ErrSyntax},
		{name: "source name", opts: []interceptor.Option{rule("/pkg.S/M", "a:{Req.id}")}, field: "Rule.Key", cause: keyfunc.ErrSyntax},
		{name: "bare field missing", opts: []interceptor.Option{rule("/"+registered+".Accounts/Hold", "a:{nope}")}, field: "Rule.Key"},
		{name: "method typo", opts: []interceptor.Option{rule("/"+registered+".Accounts/Hodl", "a")}, field: "Rule.Method"},
		{name: "service typo", opts: []interceptor.Option{rule("/"+registered+".Account/Hold", "a")}, field: "Rule.Method"},
		{name: "pattern of no service", opts: []interceptor.Option{rule("/"+registered+".Acounts/*", "a")}, field: "Rule.Method"},
		{name: "locks nothing", opts: nil, field: "WithRules"},
		{name: "locks nothing, signer only", opts: []interceptor.Option{interceptor.WithSigner(newSigner(t, []ctxid.Key{keyCurrent}))}, field: "WithRules"},
		{name: "no annotated method", opts: []interceptor.Option{interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(new(protoregistry.Files))}, field: "WithRules"},
		{name: "unregistered pattern", opts: []interceptor.Option{interceptor.WithUnregisteredServices("/pkg.S/*")}, field: "WithUnregisteredServices"},
		{name: "bare req", opts: []interceptor.Option{rule("/pkg.S/M", "a:{req}")}, field: "Rule.Key"},
		{name: "bare md", opts: []interceptor.Option{rule("/pkg.S/M", "a:{md}")}, field: "Rule.Key"},
		{name: "bad md key", opts: []interceptor.Option{rule("/pkg.S/M", "a:{md.x@y}")}, field: "Rule.Key"},
		{name: "method with path", opts: []interceptor.Option{rule("/pkg.S/M", "a:{method.x}")}, field: "Rule.Key"},
		{name: "bad TTL", opts: []interceptor.Option{rule("/pkg.S/M", "a", guard.TTL(0))}, field: "TTL"},
		{name: "bad retry", opts: []interceptor.Option{rule("/pkg.S/M", "a", guard.Retry(guard.MaxWait(0, nil)))}, field: "Retry"},
		{name: "locker-only option", opts: []interceptor.Option{rule("/pkg.S/M", "a", guard.Prefix("x:"))}, field: "Prefix"},
		{name: "binary metadata key", opts: []interceptor.Option{interceptor.WithMetadataKey("owner-bin")}, field: "MetadataKey"},
		{name: "reserved metadata key", opts: []interceptor.Option{interceptor.WithMetadataKey("grpc-owner")}, field: "MetadataKey"},
		{name: "invalid metadata key", opts: []interceptor.Option{interceptor.WithMetadataKey("owner id")}, field: "MetadataKey"},
		{name: "empty metadata key", opts: []interceptor.Option{interceptor.WithMetadataKey("")}, field: "MetadataKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := locker
			if tc.name == "nil locker" {
				l = nil
			}
			for _, build := range []func(){
				func() {
					interceptor.UnaryServerInterceptor(l, append([]interceptor.Option{unregistered}, tc.opts...)...)
				},
				func() {
					interceptor.StreamServerInterceptor(l, append([]interceptor.Option{unregistered}, tc.opts...)...)
				},
			} {
				err := mustPanicConfig(t, build)
				var ce *guard.ConfigError
				if !errors.As(err, &ce) || ce.Field != tc.field {
					t.Fatalf("error %v: want a *guard.ConfigError for field %s", err, tc.field)
				}
				if !strings.HasPrefix(err.Error(), "interceptor: ") {
					t.Fatalf("error %q lacks the package prefix", err)
				}
				if tc.cause != nil && !errors.Is(err, tc.cause) {
					t.Fatalf("error %v: want %v in the chain", err, tc.cause)
				}
			}
		})
	}

	signer := newSigner(t, []ctxid.Key{keyCurrent})
	mustPanicConfig(t, func() { interceptor.UnaryClientInterceptor(signer, interceptor.WithMetadataKey("a-bin")) })
	mustPanicConfig(t, func() { interceptor.StreamClientInterceptor(signer, interceptor.WithMetadataKey("a b")) })

	// Valid options build; nil options and nil collaborators in options are ignored.
	interceptor.UnaryServerInterceptor(locker, unregistered, nil, interceptor.WithSigner(nil), interceptor.WithTrustedPeer(nil),
		rule("/pkg.S/M", "a:{req.id}:{md.x-tenant-bin}:{method}", guard.TTL(time.Second), guard.MinHold(time.Millisecond)))
	interceptor.UnaryClientInterceptor(nil, interceptor.WithMetadataKey("X-Owner"))
}
