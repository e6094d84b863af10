package interceptor_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/interceptor/lockpb"
)

// A rule table, and the interceptors registered on a server with
// grpc.ChainUnaryInterceptor and grpc.ChainStreamInterceptor. Building them checks the
// table; no Redis call is made until an RPC arrives.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locker, err := guard.New(rdb, guard.TTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	// Load the secret from your secret store: 32 random bytes, shared by the services
	// of one call chain.
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "2025-06", Secret: []byte("example only: 32 random bytes!!!")}})
	if err != nil {
		log.Fatal(err)
	}

	rules := []interceptor.Rule{
		// One transfer per source account at a time; wait up to 2s for it.
		{Method: "/bank.v1.Bank/Transfer", Key: "account:{req.from_account}",
			Options: []guard.Option{guard.Retry(guard.MaxWait(2*time.Second, nil))}},
		// Closing an account fails at once if the account is busy.
		{Method: "/bank.v1.Bank/Close", Key: "account:{req.account.id}",
			Options: []guard.Option{guard.Retry(guard.NoRetry())}},
		// Every other reporting method: one at a time per tenant.
		{Method: "/bank.v1.Reports/*", Key: "reports:{md.x-tenant}"},
		// A streaming export holds its lock for as long as the stream lasts.
		{Method: "/bank.v1.Reports/Export", Key: "export:{md.x-tenant}"},
	}
	opts := []interceptor.Option{interceptor.WithRules(rules...), interceptor.WithSigner(signer),
		// Rules are checked against the services linked into the program: here, whose
		// bank.v1 code is not linked in, the services are named as known without it.
		interceptor.WithUnregisteredServices("bank.v1.Bank", "bank.v1.Reports")}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor( /* auth, logging, recovery, */ interceptor.UnaryServerInterceptor(locker, opts...)),
		grpc.ChainStreamInterceptor(interceptor.StreamServerInterceptor(locker, opts...)),
	)
	defer srv.Stop()
	// bankv1.RegisterBankServer(srv, bank) ...
	fmt.Println("interceptors ready")
	// Output: interceptors ready
}

// Service A's handler holds account:{from_account} and calls service B, whose Debit is
// guarded on the same key. With the client interceptor on A's connection and B's server
// interceptor trusting the same signing key, B runs as A's request and reenters the
// lock; without it, B would wait for a lock that A releases only after B returns.
func Example_crossService() {
	var (
		locker *guard.Locker // this service's Locker
		signer *ctxid.Signer // the same keys in A and B
	)
	// In service A: a connection to B that carries the owner.
	toB, err := grpc.NewClient("service-b:8443",
		grpc.WithTransportCredentials(insecure.NewCredentials()), // use TLS between services
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(signer)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(signer)),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer toB.Close()

	// A's Transfer handler, guarded by the rule {Method: "/bank.v1.A/Transfer", Key:
	// "account:{req.value}"}, passes its own context on: it carries the owner.
	transfer := func(ctx context.Context, from *wrapperspb.StringValue) (*wrapperspb.Int64Value, error) {
		var balance wrapperspb.Int64Value
		if err := toB.Invoke(ctx, "/bank.v1.B/Debit", from, &balance); err != nil {
			return nil, err
		}
		return &balance, nil
	}
	_ = transfer

	// In service B (and in A, for calls that come back): trust owners signed with the
	// shared keys.
	_ = interceptor.UnaryServerInterceptor(locker,
		interceptor.WithSigner(signer),
		interceptor.WithRules(interceptor.Rule{Method: "/bank.v1.B/Debit", Key: "account:{req.value}"}),
		interceptor.WithUnregisteredServices("bank.v1.B"), // its generated code is not linked in here
	)
}

// The client interceptor signs the owner of the call's context into the outgoing
// metadata, one hop further than it came.
func ExampleUnaryClientInterceptor() {
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("example only: 32 random bytes!!!")}})
	if err != nil {
		log.Fatal(err)
	}
	// A guarded handler's context carries its request's owner.
	ctx, owner := ctxid.Ensure(context.Background())

	send := interceptor.UnaryClientInterceptor(signer)
	invoker := func(ctx context.Context, method string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		claims, err := signer.Verify(md.Get(interceptor.MetadataKey)[0])
		fmt.Printf("%s carries the caller's owner: %v, after %d hop\n", method, err == nil && claims.Owner == owner, claims.Hops)
		return nil
	}
	_ = send(ctx, "/bank.v1.Ledger/Debit", nil, nil, nil, invoker)
	// Output: /bank.v1.Ledger/Debit carries the caller's owner: true, after 1 hop
}

// When Redis cannot be reached, a guarded RPC waits the outage out for its budget (here
// 100ms) and then fails with codes.Unavailable, or, with WithFailOpen, runs at once
// without its lock.
func ExampleWithFailOpen() {
	// Nothing listens on port 1: every Redis call fails at once.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	rules := interceptor.WithRules(interceptor.Rule{Method: "/bank.v1.Ledger/Debit", Key: "account:{req.value}",
		Options: []guard.Option{guard.Retry(guard.MaxWait(100*time.Millisecond, nil))}})
	ledger := interceptor.WithUnregisteredServices("bank.v1.Ledger") // no generated code here
	info := &grpc.UnaryServerInfo{FullMethod: "/bank.v1.Ledger/Debit"}
	handler := func(ctx context.Context, _ any) (any, error) {
		_, locked := guard.LeaseFromContext(ctx)
		fmt.Println("handler ran, locked:", locked)
		return &wrapperspb.Int64Value{}, nil
	}

	// The gRPC server calls the interceptor this way for each RPC.
	closed := interceptor.UnaryServerInterceptor(locker, rules, ledger)
	_, err = closed(context.Background(), wrapperspb.String("42"), info, handler)
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			fmt.Println("fail closed:", st.Code(), ei.GetReason())
		}
	}

	open := interceptor.UnaryServerInterceptor(locker, rules, ledger, interceptor.WithFailOpen(true))
	_, err = open(context.Background(), wrapperspb.String("42"), info, handler)
	fmt.Println("fail open:", status.Code(err))
	// Output:
	// fail closed: Unavailable LOCK_UNAVAILABLE
	// handler ran, locked: false
	// fail open: OK
}

// Locks declared in the .proto file, read with WithProtoOptions. Generated code
// registers its files in protoregistry.GlobalFiles, where the interceptors look by
// default; here the file is built by hand, in a registry of its own, with a typo in
// the option's key, and the constructor reports it before any RPC arrives.
func ExampleWithProtoOptions() {
	// In bank.proto:
	//
	//	rpc Transfer(TransferRequest) returns (TransferReply) {
	//	  option (guardkit.v1.lock) = { key: "account:{from_acount}" max_wait: { seconds: 2 } };
	//	}
	lock := &descriptorpb.MethodOptions{}
	proto.SetExtension(lock, lockpb.E_Lock, &lockpb.Lock{Key: "account:{from_acount}",
		Wait: &lockpb.Lock_MaxWait{MaxWait: durationpb.New(2 * time.Second)}})
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("bank.proto"), Package: proto.String("bank.v1"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("TransferRequest"), Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("from_account"), Number: proto.Int32(1), Type: str.Enum()}}},
			{Name: proto.String("TransferReply")},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Bank"), Method: []*descriptorpb.MethodDescriptorProto{
			{Name: proto.String("Transfer"), InputType: proto.String(".bank.v1.TransferRequest"),
				OutputType: proto.String(".bank.v1.TransferReply"), Options: lock}}}},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(fd); err != nil {
		log.Fatal(err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locker, err := guard.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	defer func() { fmt.Println(recover()) }()
	interceptor.UnaryServerInterceptor(locker, interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files))
	// Output: interceptor: /bank.v1.Bank/Transfer: option (guardkit.v1.lock).key: {req.from_acount}: message bank.v1.TransferRequest has no field "from_acount" (fields are named as in the .proto file)
}
