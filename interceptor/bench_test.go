package interceptor_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/interceptor/lockpb"
	"github.com/guardkit/guardkit/internal/redistest"
)

// BenchmarkUnary compares a unary RPC on loopback TCP without the interceptor, with it
// on a method that has no rule, and guarded by a lock (acquire and release on a real
// Redis per RPC) declared by a rule or by the method's (guardkit.v1.lock) option,
// sequentially and in parallel on distinct keys. The option's rule is built once, at
// construction, so "annotated" should cost what "guarded" does.
func BenchmarkUnary(b *testing.B) {
	srv := redistest.Start(b)
	locker, _ := newLocker(b, srv)
	handler := func(context.Context, *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		return wrapperspb.Int64(1), nil
	}
	sd := service(map[string]unaryFunc{"Hold": handler, "Plain": handler}, nil)
	rules := interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"})
	bare := dial(b, serve(b, sd))
	guarded := dial(b, serve(b, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered, rules))))
	files := annotate(b, map[string]*lockpb.Lock{"Hold": {Key: "account:{from_account}"}})
	annotated := dial(b, serve(b, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
		interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files)))))
	ctx := context.Background()

	for _, bc := range []struct {
		name   string
		conn   *grpc.ClientConn
		method string
	}{
		{"unguarded", bare, mHold},
		{"no-rule", guarded, mPlain},
		{"guarded", guarded, mHold},
		{"annotated", annotated, mHold},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := transfer("bench")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := invoke(ctx, bc.conn, bc.method, req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			var n atomicCounter
			b.RunParallel(func(pb *testing.PB) {
				req := transfer("p" + n.next()) // a key per goroutine: no contention
				for pb.Next() {
					if _, err := invoke(ctx, bc.conn, bc.method, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
