// Package interceptor guards gRPC methods with guard locks, and carries the lock owner
// across service boundaries so that a call chain that comes back on a key it already
// holds reenters the lock instead of deadlocking.
//
// # Usage
//
// The server interceptors take their locks from a guard.Locker, and the keys from a
// rule table that maps methods to key templates or from locks declared on the methods
// in their .proto files (see "Locks declared in the .proto file"):
//
//	rules := []interceptor.Rule{
//		{Method: "/bank.v1.Bank/Transfer", Key: "account:{req.from_account}",
//			Options: []guard.Option{guard.TTL(10 * time.Second)}},
//		{Method: "/bank.v1.Bank/Close", Key: "account:{req.account.id}",
//			Options: []guard.Option{guard.Retry(guard.NoRetry())}},
//		{Method: "/bank.v1.Reports/*", Key: "reports:{md.x-tenant}"},
//	}
//	opts := []interceptor.Option{interceptor.WithRules(rules...), interceptor.WithSigner(signer)}
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(recovery, logging, interceptor.UnaryServerInterceptor(locker, opts...)),
//		grpc.ChainStreamInterceptor(interceptor.StreamServerInterceptor(locker, opts...)),
//	)
//
// Put the lock after authentication, logging and panic recovery in the chain, so that
// unauthenticated calls take no lock and the others see the status it returns. A method
// that no rule matches and that declares no lock runs without one.
//
// A busy lock is waited for as the rule's guard.Retry option says, else the one given
// to guard.New, else at most 5s; waiting never outlasts the RPC's deadline. A call
// without a deadline therefore gets codes.Aborted after 5s rather than waiting for as
// long as the holder keeps the lock; give the rule guard.Retry(guard.MaxWait(-1, nil))
// to wait until the RPC ends.
//
// Key templates use the syntax of package keyfunc with three sources: {req.field} reads
// a field of the request message by its proto name (from_account, not FromAccount),
// through nested messages ({req.account.id}) and map keys ({req.labels.region}); the
// path is resolved once per message type. Scalars render as keyfunc.Format renders
// their Go values, enums by name, wrapper messages by their value, Timestamps in UTC
// RFC 3339, Durations as time.Duration prints them. A field that is not set — for a field without presence, one that holds its
// zero value — is missing, so that requests without it do not all share one lock.
// {md.key} reads the single value of an incoming metadata key, {method} the full method
// name.
//
// # Locks declared in the .proto file
//
// A method's lock can be declared where the method is, with the (guardkit.v1.lock)
// option of guardkit/v1/lock.proto (package lockpb; give protoc this module's
// interceptor/proto directory as an import path):
//
//	import "guardkit/v1/lock.proto";
//
//	service Bank {
//	  rpc Transfer(TransferRequest) returns (TransferReply) {
//	    option (guardkit.v1.lock) = { key: "account:{from_account}" max_wait: { seconds: 2 } };
//	  }
//	  rpc Close(CloseRequest) returns (CloseReply) {
//	    option (guardkit.v1.lock) = { key: "account:{account.id}" fail_fast: true ttl: { seconds: 10 } };
//	  }
//	}
//
// and the server reads it with WithProtoOptions, with no rule table:
//
//	opts := []interceptor.Option{interceptor.WithProtoOptions(), interceptor.WithSigner(signer)}
//
// The option's fields are a Rule's: key is a template with the three sources above, in
// which a bare {from_account} or {account.id} means {req.from_account} or
// {req.account.id} (so a field named req, md or method needs the req. prefix, and the
// shorthand is for field names in lower case, as the protobuf style guide writes
// them); ttl is guard.TTL, max_wait guard.Retry(guard.MaxWait(d, nil)) (0 means try
// once), fail_fast guard.Retry(guard.NoRetry()), fail_open Rule.FailOpen, name
// guard.Name, and kind the lock's kind: KIND_READ and KIND_WRITE are guard.Read() and
// guard.Write() (readers of a key share it, a writer has it alone), KIND_SEMAPHORE with
// permits: n is guard.Permits(n), KIND_FAIR guard.Fair(). An annotated method is locked exactly as the equivalent Rule would lock
// it: same Redis key, statuses, waiting and reentrancy.
//
// The constructor reads every service of protoregistry.GlobalFiles, where generated
// code registers its files (or of the registry given to WithProtoRegistry), and checks
// each annotated method as it checks a rule: the template, the request fields it names,
// that a streaming method keys by {md...} or {method}, that ttl is > 0 and max_wait
// ≥ 0, that permits is set with KIND_SEMAPHORE and only then, and the settings against the Locker's. A mistake panics at start-up, with an
// error naming the method and the option's field:
//
//	interceptor: /bank.v1.Bank/Transfer: option (guardkit.v1.lock).key: {req.from}: message bank.v1.TransferRequest has no field "from" ...
//
// The rules are built once and looked up by full method name. A Rule that matches a
// method, by name or pattern, takes precedence over its option, so an operator can
// change or lift a declared lock without editing the .proto file.
//
// The option is read only when the server opts in with WithProtoOptions: a .proto file
// is often shared, and an option added to it by the team that owns it must not start
// locking, on Redis, a service that never planned for one.
//
// # Reentrancy across services
//
// A lock is held by an owner, the request (see package ctxid). When service A's handler,
// holding "account:1", calls service B, whose method is guarded on "account:1" too, B
// must run as A's owner or it waits for a lock that will not be released until it
// returns. The client interceptors send the owner of the call's context in a signed
// token; the server interceptors accept an inbound owner only when its token verifies
// with a key of their WithSigner signer (and the caller passes WithTrustedPeer, when
// set). A chain A → B → A (another method of A, on the same key) reenters too: A's own
// process counts the hold locally, B's in Redis.
//
//	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "2025-06", Secret: secret}}, ctxid.MaxHops(4))
//	conn, err := grpc.NewClient(serviceB,
//		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(signer)),
//		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(signer)))
//
// Every service of the chain needs the client interceptors on its connections to the
// others and the server interceptors with the same keys. Keys rotate by ID: list the new
// key after the current one everywhere, then move it first. Tokens expire (ctxid.MaxAge)
// and count hops (ctxid.MaxHops): a token that has travelled too far is not sent again.
//
// An owner ID is a capability: a caller that could choose it could make two of its
// requests reenter each other. So a token that is missing, unsigned, signed with an
// unknown key, tampered with, expired, too long, sent twice under the metadata key, or
// sent under another key (including its "-bin" variant) never makes an RPC run as an
// existing owner: the RPC runs as a fresh one, and waits for the lock like anyone else.
//
// # When a call does not reenter
//
// A refused token makes a call of the chain wait for its own request's lock, so the
// refusal is made visible without ever using the token. When such a call is refused as
// busy, its status carries, after the RetryInfo, a second errdetails.ErrorInfo with
// Reason ReasonOwnerRejected whose "reason" metadata says why: no_signer when the server
// has no WithSigner, unknown_key or bad_signature when the two sides do not share keys,
// expired or not_yet_valid when their clocks disagree, and the others listed with
// ReasonOwnerRejected. The status message says it too ("owner token rejected
// (unknown_key): ..."), and the server-side error chain holds the ctxid error
// (ctxid.ErrUntrusted and its reason). Every refused token, busy or not, also adds the
// event guard.owner_rejected, with the reason in the attribute guard.reason, to the RPC's
// span (trace.SpanFromContext, the span an OpenTelemetry stats handler starts).
//
// A call that carried no token gets no such detail, because most callers are not
// services of the chain. When a call you expected to reenter is busy without it, the
// token was never sent: check that the calling connection has the client interceptors
// with a non-nil signer, that the call is made with the handler's context (or one
// derived from it) and not a fresh one such as context.Background(), that both sides
// use the same WithMetadataKey, and that the chain has not used up the signer's MaxHops.
// An outer server interceptor can log metadata.ValueFromIncomingContext(ctx,
// interceptor.MetadataKey) to see what arrived.
//
// # Status codes
//
// Statuses made by the server interceptors tell the client what happened in plain
// words — "busy: another request holds the lock", "unavailable: the lock service cannot
// be reached", "lease lost: the lock was lost while the call ran", "invalid key: …" —
// and never the lock key (keys often hold user or account IDs), the owner, a token or
// a Redis address. The cause, with all of those, stays in the error chain (errors.Is,
// errors.As, Error) for code on the server side of the interceptor, such as a logging
// interceptor further out, and is recorded on the RPC's span. WithExposeKey adds the
// key to the message, for internal APIs. Statuses also carry an errdetails.ErrorInfo
// with Domain ErrorDomain and a Reason:
//
//	lock busy                      Aborted, RetryInfo with guard's retry hint (ReasonLocked),
//	                               and ReasonOwnerRejected when an owner token was refused
//	  ... until the RPC's context ended the wait
//	                               DeadlineExceeded or Canceled (ReasonLocked)
//	Redis unreachable              Unavailable (ReasonUnavailable), or the handler
//	                               runs unlocked with WithFailOpen
//	key missing, empty, ambiguous  InvalidArgument (ReasonInvalidKey)
//	owner reads, method writes     FailedPrecondition (ReasonUpgradeRefused)
//	deadlock, this call the victim Aborted, no RetryInfo (ReasonDeadlock)
//	lease lost during the handler  Aborted (ReasonLeaseLost), even if the handler
//	                               returned OK; a status code of its own is kept
//	rule cannot read the request   Internal
//
// A handler's own error passes through unchanged when the lease held. A handler that
// makes guarded calls of its own (guard.Wrap, guard.Do) answers their errors as the
// interceptors would with Status.
//
// # Streams
//
// The lock covers the whole stream: it is acquired before the handler starts, renewed
// for as long as the stream lasts, and released when the handler returns. The handler's
// ServerStream has a Context that carries the owner and the lease (guard.LeaseFromContext,
// whose Token is the fencing token), and that is cancelled when the client
// cancels or the lease is lost. Streams have no request message when the lock is taken,
// so their rules key on {md...} and {method}.
//
// # Concurrency
//
// The interceptors are safe for concurrent use. They keep no state per RPC beyond its
// lock; the per-message-type resolution of {req...} paths is cached for their lifetime.
package interceptor
