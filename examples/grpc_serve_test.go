package examples_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestGRPCServe runs `grpc -serve` and every grpcurl line of its documentation against
// it, as grpcurl would run them: the services through server reflection, or, with
// -proto, from the .proto files with the import paths given (resolved by protoc, from
// the module's root). The documented ports are replaced by free ones.
func TestGRPCServe(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "grpc")
	if out, err := exec.Command("go", "build", "-o", bin, "./grpc").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv := redistest.Start(t)
	orders, payments := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), runDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-serve", "-orders", orders, "-payments", payments)
	cmd.Env = append(os.Environ(), embedded.EnvAddr+"="+srv.Addr())
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("grpc -serve after an interrupt: %v", err)
		}
	}()
	lines := bufio.NewScanner(out)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "serving:") {
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()

	doc := grpcurlLines(t)
	if len(doc) < 5 {
		t.Fatalf("found %d grpcurl lines in examples/grpc/main.go, want 5", len(doc))
	}
	want := []string{"shop.v1.Orders", "shop.v1.Orders.Cancel", `"refunded":"30"`, `"refunded":"30"`, `"refunded":"30"`}
	for i, line := range doc {
		line = strings.NewReplacer("127.0.0.1:50051", orders, "127.0.0.1:50052", payments).Replace(line)
		got, err := grpcurl(ctx, t, shellSplit(line))
		t.Logf("%s\n  → %s", line, got)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !strings.Contains(got, want[i]) {
			t.Fatalf("%s answered %s, want %s in it", line, got, want[i])
		}
	}
}

// freeAddr returns a loopback address with a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// grpcurlLines returns the grpcurl command lines of the grpc example's documentation.
func grpcurlLines(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("grpc/main.go")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(src), "\n") {
		if cmd, ok := strings.CutPrefix(l, "//\tgrpcurl "); ok {
			lines = append(lines, "grpcurl "+cmd)
		}
	}
	return lines
}

// shellSplit splits a command line into words, honouring single quotes.
func shellSplit(line string) []string {
	var (
		words []string
		cur   strings.Builder
		quote bool
		word  bool
	)
	for _, r := range line {
		switch {
		case r == '\'':
			quote, word = !quote, true
		case r == ' ' && !quote:
			if word {
				words = append(words, cur.String())
				cur.Reset()
				word = false
			}
		default:
			cur.WriteRune(r)
			word = true
		}
	}
	if word {
		words = append(words, cur.String())
	}
	return words
}

// grpcurl does what grpcurl does with args (the flags -plaintext, -d, -import-path and
// -proto; then the address and list, describe SYMBOL or SERVICE/METHOD) and returns its
// answer as JSON or names.
func grpcurl(ctx context.Context, t *testing.T, args []string) (string, error) {
	var (
		data    string
		imports []string
		protos  []string
	)
	args = args[1:]
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-plaintext":
			args = args[1:]
			continue
		case "-d":
			data = args[1]
		case "-import-path":
			imports = append(imports, args[1])
		case "-proto":
			protos = append(protos, args[1])
		default:
			return "", fmt.Errorf("flag %s: not one grpcurl takes here", args[0])
		}
		args = args[2:]
	}
	if len(args) < 2 {
		return "", fmt.Errorf("want an address and a verb, got %q", args)
	}
	conn, err := grpc.NewClient(args[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if args[1] == "list" {
		return listServices(ctx, conn)
	}
	var files *protoregistry.Files
	var symbol string
	switch {
	case args[1] == "describe":
		symbol = args[2]
	default:
		symbol = strings.ReplaceAll(args[1], "/", ".")
	}
	if len(protos) > 0 {
		files, err = protocFiles(t, imports, protos)
	} else {
		files, err = reflectedFiles(ctx, conn, symbol)
	}
	if err != nil {
		return "", err
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(symbol))
	if err != nil {
		return "", err
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return "", fmt.Errorf("%s is a %T, want a method", symbol, d)
	}
	if args[1] == "describe" {
		return string(md.FullName()), nil
	}
	req := dynamicpb.NewMessage(md.Input())
	if err := protojson.Unmarshal([]byte(data), req); err != nil {
		return "", err
	}
	resp := dynamicpb.NewMessage(md.Output())
	if err := conn.Invoke(ctx, "/"+string(md.Parent().FullName())+"/"+string(md.Name()), req, resp); err != nil {
		return "", err
	}
	b, err := protojson.Marshal(resp)
	return strings.ReplaceAll(string(b), " ", ""), err
}

// listServices lists the services of the server at conn through reflection.
func listServices(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	resp, err := reflectCall(ctx, conn, &rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
	if err != nil {
		return "", err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return strings.Join(names, " "), nil
}

// reflectedFiles returns the files that define symbol and its dependencies, as the
// server's reflection service sends them.
func reflectedFiles(ctx context.Context, conn *grpc.ClientConn, symbol string) (*protoregistry.Files, error) {
	resp, err := reflectCall(ctx, conn, &rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}})
	if err != nil {
		return nil, err
	}
	set := new(descriptorpb.FileDescriptorSet)
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(b, fd); err != nil {
			return nil, err
		}
		set.File = append(set.File, fd)
	}
	return protodesc.NewFiles(set)
}

// reflectCall makes one request of the server reflection service.
func reflectCall(ctx context.Context, conn *grpc.ClientConn, req *rpb.ServerReflectionRequest) (*rpb.ServerReflectionResponse, error) {
	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	defer stream.CloseSend()
	if err := stream.Send(req); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if e := resp.GetErrorResponse(); e != nil {
		return nil, fmt.Errorf("reflection: %s", e.GetErrorMessage())
	}
	return resp, nil
}

// protocFiles compiles protos with protoc, from the module's root, with the import
// paths given, as grpcurl's -import-path and -proto do.
func protocFiles(t *testing.T, imports, protos []string) (*protoregistry.Files, error) {
	out := filepath.Join(t.TempDir(), "set.pb")
	args := []string{"--include_imports", "-o", out}
	for _, p := range imports {
		args = append(args, "-I", p)
	}
	cmd := exec.Command("protoc", append(args, protos...)...)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("protoc: %v: %s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	set := new(descriptorpb.FileDescriptorSet)
	if err := proto.Unmarshal(b, set); err != nil {
		return nil, err
	}
	return protodesc.NewFiles(set)
}
