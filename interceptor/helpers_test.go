package interceptor_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// unregistered names the test services that have no descriptor in
// protoregistry.GlobalFiles: their rules are taken as written.
var unregistered = interceptor.WithUnregisteredServices(testPkg+".Accounts", "x.S", "t", "other.v1.S", "pkg.S")

// The test service, declared without protoc: a proto file built as a descriptor, whose
// messages are dynamicpb messages. In .proto terms:
//
//	package <pkg>;
//	enum Kind { KIND_UNSPECIFIED = 0; KIND_FAST = 1; }
//	message Account { string id = 1; }
//	message Transfer {
//	  string from_account = 1; Account to = 2; int64 amount = 3;
//	  map<string, string> labels = 4; Kind kind = 5;
//	  google.protobuf.StringValue memo = 6; repeated string tags = 7;
//	  google.protobuf.Timestamp at = 8;
//	}
//	service Accounts {
//	  rpc Hold(Transfer) returns (google.protobuf.Int64Value);
//	  rpc Debit(Transfer) returns (google.protobuf.Int64Value);
//	  rpc Audit(Transfer) returns (google.protobuf.Int64Value);
//	  rpc Plain(Transfer) returns (google.protobuf.Int64Value);
//	  rpc Watch(Transfer) returns (stream google.protobuf.Int64Value);
//	}
const (
	testPkg    = "interceptortest.v1"
	accounts   = "/" + testPkg + ".Accounts/"
	mHold      = accounts + "Hold"
	mDebit     = accounts + "Debit"
	mAudit     = accounts + "Audit"
	mPlain     = accounts + "Plain"
	mWatch     = accounts + "Watch"
	registered = "interceptortest.registered.v1" // a copy registered in GlobalFiles
)

var (
	testFile     = buildFile(testPkg)
	transferDesc = testFile.Messages().ByName("Transfer")
	registerOnce sync.Once
)

// registerFile puts the registered copy of the test file into protoregistry.GlobalFiles,
// where the interceptors check rules against request types at construction.
func registerFile(t testing.TB) {
	registerOnce.Do(func() {
		if err := protoregistry.GlobalFiles.RegisterFile(buildFile(registered)); err != nil {
			t.Fatalf("RegisterFile: %v", err)
		}
	})
}

// buildFile builds the test file in package pkg, changed by edits before it is checked.
func buildFile(pkg string, edits ...func(*descriptorpb.FileDescriptorProto)) protoreflect.FileDescriptor {
	// Importing these packages registers the well-known files the test file depends on.
	_ = wrapperspb.String("")
	_ = timestamppb.Now()
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(), Label: opt.Enum()}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	labels := field("labels", 4, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, "."+pkg+".Transfer.LabelsEntry")
	labels.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	tags := field("tags", 7, str, "")
	tags.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	method := func(name string, stream bool) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String("." + pkg + ".Transfer"),
			OutputType: proto.String(".google.protobuf.Int64Value"), ServerStreaming: proto.Bool(stream)}
	}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String(pkg + "/accounts.proto"),
		Package:    proto.String(pkg),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/wrappers.proto", "google/protobuf/timestamp.proto"},
		EnumType: []*descriptorpb.EnumDescriptorProto{{Name: proto.String("Kind"), Value: []*descriptorpb.EnumValueDescriptorProto{
			{Name: proto.String("KIND_UNSPECIFIED"), Number: proto.Int32(0)},
			{Name: proto.String("KIND_FAST"), Number: proto.Int32(1)},
		}}},
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Account"), Field: []*descriptorpb.FieldDescriptorProto{field("id", 1, str, "")}},
			{Name: proto.String("Transfer"), Field: []*descriptorpb.FieldDescriptorProto{
				field("from_account", 1, str, ""),
				field("to", 2, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, "."+pkg+".Account"),
				field("amount", 3, descriptorpb.FieldDescriptorProto_TYPE_INT64, ""),
				labels,
				field("kind", 5, descriptorpb.FieldDescriptorProto_TYPE_ENUM, "."+pkg+".Kind"),
				field("memo", 6, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.StringValue"),
				tags,
				field("at", 8, descriptorpb.FieldDescriptorProto_TYPE_MESSAGE, ".google.protobuf.Timestamp"),
			}, NestedType: []*descriptorpb.DescriptorProto{{
				Name:    proto.String("LabelsEntry"),
				Field:   []*descriptorpb.FieldDescriptorProto{field("key", 1, str, ""), field("value", 2, str, "")},
				Options: &descriptorpb.MessageOptions{MapEntry: proto.Bool(true)},
			}}},
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{Name: proto.String("Accounts"), Method: []*descriptorpb.MethodDescriptorProto{
			method("Hold", false), method("Debit", false), method("Audit", false), method("Plain", false), method("Watch", true),
		}}},
	}
	for _, edit := range edits {
		edit(fdp)
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	return fd
}

// transfer returns a Transfer from account from ("" leaves it unset), changed by set.
func transfer(from string, set ...func(m *dynamicpb.Message)) *dynamicpb.Message {
	m := dynamicpb.NewMessage(transferDesc)
	if from != "" {
		m.Set(transferDesc.Fields().ByName("from_account"), protoreflect.ValueOfString(from))
	}
	for _, f := range set {
		f(m)
	}
	return m
}

// withLabel sets labels[k] = v.
func withLabel(k, v string) func(*dynamicpb.Message) {
	return func(m *dynamicpb.Message) {
		m.Mutable(transferDesc.Fields().ByName("labels")).Map().Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(v))
	}
}

// unaryFunc is a test handler.
type unaryFunc func(ctx context.Context, req *dynamicpb.Message) (*wrapperspb.Int64Value, error)

// streamFunc is a test handler of a server-streaming method; req is its one request.
type streamFunc func(req *dynamicpb.Message, ss grpc.ServerStream) error

// service describes the Accounts service with the given handlers; methods without one
// are not registered.
func service(unary map[string]unaryFunc, streams map[string]streamFunc) *grpc.ServiceDesc {
	sd := &grpc.ServiceDesc{ServiceName: testPkg + ".Accounts", HandlerType: (*any)(nil)}
	for name, h := range unary {
		full := accounts + name
		sd.Methods = append(sd.Methods, grpc.MethodDesc{MethodName: name,
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := dynamicpb.NewMessage(transferDesc)
				if err := dec(in); err != nil {
					return nil, err
				}
				call := func(ctx context.Context, req any) (any, error) { return h(ctx, req.(*dynamicpb.Message)) }
				if ic == nil {
					return call(ctx, in)
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, call)
			}})
	}
	for name, h := range streams {
		sd.Streams = append(sd.Streams, grpc.StreamDesc{StreamName: name, ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				in := dynamicpb.NewMessage(transferDesc)
				if err := ss.RecvMsg(in); err != nil {
					return err
				}
				return h(in, ss)
			}})
	}
	return sd
}

// serve runs sd on a loopback TCP port until the test ends and returns the address.
func serve(t testing.TB, sd *grpc.ServiceDesc, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(sd, struct{}{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String()
}

// dial connects to addr until the test ends.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// invoke calls a unary method of the test service.
func invoke(ctx context.Context, conn *grpc.ClientConn, method string, req proto.Message) (int64, error) {
	var out wrapperspb.Int64Value
	err := conn.Invoke(ctx, method, req, &out)
	return out.GetValue(), err
}

// newLocker returns a Locker on a fresh client of srv, closed when the test ends.
func newLocker(t testing.TB, srv *redistest.Server, opts ...guard.Option) (*guard.Locker, *redis.Client) {
	t.Helper()
	c := srv.Client(t)
	l, err := guard.New(c, opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, c
}

// newSigner returns a Signer with the given keys (ID → secret), in order.
func newSigner(t testing.TB, keys []ctxid.Key, opts ...ctxid.Option) *ctxid.Signer {
	t.Helper()
	s, err := ctxid.NewSigner(keys, opts...)
	if err != nil {
		t.Fatalf("NewSigner: %v", err)
	}
	return s
}

var (
	keyCurrent = ctxid.Key{ID: "k2", Secret: []byte("current-secret-0123456789abcdef!")}
	keyOld     = ctxid.Key{ID: "k1", Secret: []byte("previous-secret-0123456789abcdef")}
)

// ctxTimeout is a test context bounded so that a hang fails instead of blocking.
func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// wantCode fails the test unless err is a status with code, and returns the status.
func wantCode(t testing.TB, err error, code codes.Code) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error %v: want code %s", err, code)
	}
	return st
}

// errorInfo returns the ErrorInfo detail of st, nil when it has none.
func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// retryInfo returns the RetryInfo detail of st, nil when it has none.
func retryInfo(st *status.Status) *errdetails.RetryInfo {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri
		}
	}
	return nil
}

// wantReason fails the test unless st carries the guardkit ErrorInfo with reason.
func wantReason(t testing.TB, st *status.Status, reason, method string) {
	t.Helper()
	ei := errorInfo(st)
	if ei == nil || ei.GetReason() != reason || ei.GetDomain() != "guardkit" || ei.GetMetadata()["method"] != method {
		t.Fatalf("status %v: ErrorInfo %v, want reason %s for %s", st, ei, reason, method)
	}
}

// wantBusy fails the test unless err is the busy status: Aborted, LOCKED, and a
// RetryInfo delay in (0, ttl].
func wantBusy(t testing.TB, err error, method string, ttl time.Duration) {
	t.Helper()
	st := wantCode(t, err, codes.Aborted)
	wantReason(t, st, "LOCKED", method)
	ri := retryInfo(st)
	if ri == nil {
		t.Fatalf("busy status %v has no RetryInfo", st)
	}
	if d := ri.GetRetryDelay().AsDuration(); d <= 0 || d > ttl {
		t.Fatalf("RetryInfo delay %s, want in (0, %s]", d, ttl)
	}
}

// chainErr records the error the guard interceptor returned, as an outer interceptor
// (a logger) sees it on the server.
type chainErr struct {
	mu  sync.Mutex
	err error
}

func (c *chainErr) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	return resp, err
}

func (c *chainErr) last() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// mustPanicConfig fails the test unless f panics with an error matching
// guard.ErrInvalidConfig, and returns it.
func mustPanicConfig(t testing.TB, f func()) (err error) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		e, ok := r.(error)
		if !ok || !errors.Is(e, guard.ErrInvalidConfig) {
			t.Fatalf("panic value %v (%T), want an error matching guard.ErrInvalidConfig", r, r)
		}
		err = e
	}()
	f()
	return nil
}

// waitUntil polls cond every 5ms until it holds or d passes.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// atomicCounter hands out distinct decimal strings.
type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) next() string { return strconv.FormatInt(c.n.Add(1), 10) }
