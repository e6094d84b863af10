package interceptor

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
)

// MetadataKey is the default metadata key that carries the signed owner token between
// services: ctxid.Header in the lower case gRPC metadata uses.
const MetadataKey = "guardkit-owner"

// Option configures the interceptors of this package. Each option's comment says which
// interceptors read it and what its default is; the others ignore it. Options are values:
// build them once and pass the same ones to the server and client interceptors.
type Option func(*options)

// options is the resolved configuration. Each constructor starts from defaultOptions, so
// interceptors never share mutable state.
type options struct {
	rules        []Rule
	signer       *ctxid.Signer
	mdKey        string
	failOpen     bool
	trustedPeer  func(ctx context.Context) bool
	protoOptions bool
	files        *protoregistry.Files
	unregistered []string // WithUnregisteredServices
	exposeKey    bool
}

func defaultOptions() options {
	return options{mdKey: MetadataKey, files: protoregistry.GlobalFiles}
}

// evaluate applies opts over the defaults and checks what every interceptor reads.
func evaluate(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := checkMetadataKey(o.mdKey); err != nil {
		return o, err
	}
	if err := checkUnregistered(o.unregistered); err != nil {
		return o, err
	}
	return o, nil
}

// Rule guards the methods that Method matches with the lock that Key names.
type Rule struct {
	// Method is the full method name of one method, "/pkg.Service/Method", or a pattern
	// ending in "*" that matches every full method name starting with the text before
	// it: "/pkg.Service/*" for a whole service, "*" for every method. A full method name
	// wins over every pattern, and a longer pattern over a shorter one. It must name a
	// method of the protobuf registry (protoregistry.GlobalFiles, or WithProtoRegistry),
	// or a pattern must match one, unless its service is named by
	// WithUnregisteredServices: a typo fails construction. Required.
	Method string

	// Key is the lock key template (see package keyfunc), with three sources:
	//
	//	{req.from_account}, {req.to.id}, {req.labels.tenant}
	//	    a field of the request message by its proto name, through nested
	//	    messages and map keys
	//	{md.x-tenant}    the single value of an incoming metadata key
	//	{method}         the full method name
	//
	// As in the (guardkit.v1.lock) option, a bare {from_account} or {to.id} means
	// {req.from_account} or {req.to.id} (a field named req, md or method needs the
	// req. prefix).
	//
	// Required.
	Key string

	// MoreKeys are further key templates, with Key's sources: the call takes the lock
	// of Key and those of MoreKeys as one lock (guard.Locker.AcquireAll): all or none,
	// in one canonical order whatever order they are listed in, under one lease, each
	// key with its own fencing token (guard.Lease.Tokens). A transfer locks both of its
	// accounts: Key "account:{from_account}", MoreKeys []string{"account:{to_account}"}.
	// The option's more_keys field is the same. Keys that render the same count once.
	// Default: none.
	MoreKeys []string

	// Options are guard options for the lock: TTL, Renewal, Retry, MaxHold, MinHold. They are checked, against the Locker's settings, when the
	// interceptor is built. Key, RawKey, KeyFunc and Use are overridden: the lock is
	// named by Key and taken from the interceptor's Locker; SkipIf is refused.
	// Default: the Locker's settings. A busy lock is waited for as the Retry given here
	// says, else the one given to guard.New, else at most 5s, and
	// never past the RPC's deadline; then the RPC fails with codes.Aborted.
	Options []guard.Option

	// FailOpen makes the methods of this rule run without their lock, at once, when Redis
	// cannot be reached, as WithFailOpen does for every rule. Default false: fail closed
	// (the wait for the lock rides out an outage within its budget, then
	// codes.Unavailable), unless WithFailOpen(true) is given.
	FailOpen bool
}

// WithRules adds rules to the server interceptors. Methods that no rule matches pass
// through without a lock. Two rules with the same Method are a configuration error.
// Read by UnaryServerInterceptor and StreamServerInterceptor. Default: no rules.
func WithRules(rules ...Rule) Option {
	return func(o *options) { o.rules = append(o.rules, rules...) }
}

// WithProtoOptions makes the server interceptors lock the methods whose descriptors
// carry the (guardkit.v1.lock) option of guardkit/v1/lock.proto (see package lockpb),
// as a Rule with the same settings would: the lock is declared in the .proto file,
// next to the method, instead of in a rule table.
//
//	rpc Transfer(TransferRequest) returns (TransferReply) {
//	  option (guardkit.v1.lock) = { key: "account:{from_account}" max_wait: { seconds: 2 } };
//	}
//
// The interceptor's constructor reads every service of the registry (WithProtoRegistry)
// once and checks each annotated method's option as it checks a Rule, so a mistake
// fails at start-up, naming the method and the option's field; the rules it makes are
// kept by full method name. A Rule that matches a method, by its full name or a
// pattern, takes precedence over the method's option, so an operator can change or
// lift a lock without editing the .proto file.
//
// It is off by default because a .proto file is often shared: an option added to it
// by the team that owns it must not start locking, on Redis, a service that links its
// generated code but never planned for a lock. Each server opts in.
// Read by UnaryServerInterceptor and StreamServerInterceptor. Default: off; only rules
// lock.
func WithProtoOptions() Option {
	return func(o *options) { o.protoOptions = true }
}

// WithProtoRegistry sets where the server interceptors find method descriptors: the
// annotated methods that WithProtoOptions reads, and the request types that rules'
// {req...} paths are checked against at construction. A nil files is ignored.
// Read by UnaryServerInterceptor and StreamServerInterceptor. Default
// protoregistry.GlobalFiles, where generated code registers its files.
func WithProtoRegistry(files *protoregistry.Files) Option {
	return func(o *options) {
		if files != nil {
			o.files = files
		}
	}
}

// WithUnregisteredServices names services, by full name ("pkg.v1.Service"), whose
// methods rules may lock although the protobuf registry (protoregistry.GlobalFiles, or
// WithProtoRegistry) has no descriptor for them: services registered with a
// hand-written grpc.ServiceDesc, as tests often do. The server interceptors' constructors
// check every Rule's Method against the registry, so that a typo ("/shop.v1.Payment/Refund"
// for the service Payments) fails at start-up, naming the closest method, instead of
// leaving the method unlocked; a method or pattern of a service named here is taken as
// written. Read by UnaryServerInterceptor and StreamServerInterceptor. Default: none.
func WithUnregisteredServices(services ...string) Option {
	return func(o *options) { o.unregistered = append(o.unregistered, services...) }
}

// WithExposeKey makes the status messages of the server interceptors name the lock key,
// as in `busy: another request holds the lock (key "order:o9")`, for internal APIs
// whose callers may see it. Keys often hold user or account IDs: by default a message
// says what happened in plain words only, and the key, the owner and the Redis address
// go to the error chain the server's interceptors and logs see, and to the RPC's span.
// The ErrorInfo details are the same either way.
// Read by UnaryServerInterceptor and StreamServerInterceptor. Default false.
func WithExposeKey(expose bool) Option {
	return func(o *options) { o.exposeKey = expose }
}

// WithSigner sets the keys that owner tokens are signed and verified with. The server
// interceptors accept an inbound owner only when its token verifies against one of the
// signer's keys (so keys rotate by key ID: see ctxid.NewSigner) and has travelled no more
// than the signer's MaxHops; the client interceptors take the signer as their argument.
// A nil signer is ignored.
// A token that does not verify is never used; it is reported on the RPC's span and in
// a busy status (ReasonOwnerRejected).
// Read by UnaryServerInterceptor and StreamServerInterceptor. Default: none, so no
// inbound owner is trusted and every RPC runs as a fresh owner; a token that arrives
// anyway is reported as rejected with the reason no_signer.
func WithSigner(s *ctxid.Signer) Option {
	return func(o *options) {
		if s != nil {
			o.signer = s
		}
	}
}

// WithMetadataKey sets the metadata key that carries the owner token. It must be a
// valid gRPC metadata key (lower case ASCII letters, digits, '-', '_' and '.'), must not
// end in "-bin" (the token is text) and must not start with "grpc-" (reserved). Upper
// case letters are lowered, as gRPC does.
// Read by every interceptor of this package. Default MetadataKey, "guardkit-owner".
func WithMetadataKey(key string) Option {
	return func(o *options) { o.mdKey = strings.ToLower(key) }
}

// WithFailOpen makes a guarded RPC run without its lock, at once, when Redis cannot be
// reached, instead of waiting the outage out and failing with codes.Unavailable:
// availability over exclusion. The handler can
// tell from guard.LeaseFromContext, which then reports no lease. It applies to every
// rule and annotated method; Rule.FailOpen and the option's fail_open choose it for
// some only.
// Read by UnaryServerInterceptor and StreamServerInterceptor. Default false: fail
// closed.
func WithFailOpen(open bool) Option {
	return func(o *options) { o.failOpen = open }
}

// WithTrustedPeer restricts which callers may vouch for an owner: an inbound owner token
// is considered only when f reports true for the RPC's context, which carries the peer
// (peer.FromContext) and its authentication (credentials.RequestInfoFromContext).
// Use it to accept owners only from the mTLS identities of your own services. A nil f is
// ignored.
// Read by UnaryServerInterceptor and StreamServerInterceptor. Default: every caller
// whose token verifies.
func WithTrustedPeer(f func(ctx context.Context) bool) Option {
	return func(o *options) {
		if f != nil {
			o.trustedPeer = f
		}
	}
}

// checkMetadataKey reports why key cannot carry the owner token.
func checkMetadataKey(key string) error {
	reason := ""
	switch {
	case key == "":
		reason = "must not be empty"
	case strings.HasSuffix(key, "-bin"):
		reason = fmt.Sprintf("%q ends in -bin, which marks binary metadata; the token is text", key)
	case strings.HasPrefix(key, "grpc-"):
		reason = fmt.Sprintf("%q starts with grpc-, which gRPC reserves", key)
	default:
		for i := 0; i < len(key); i++ {
			if !mdKeyByte(key[i]) {
				reason = fmt.Sprintf("%q has byte %#02x at offset %d; allowed are a-z, 0-9, '-', '_' and '.'", key, key[i], i)
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	return fmt.Errorf("interceptor: %w", &guard.ConfigError{Field: "MetadataKey", Reason: reason})
}

// mdKeyByte reports whether c may appear in a gRPC metadata key.
func mdKeyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.'
}
