package connectguard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/guardkit/guardkit/connectguard"
	"github.com/guardkit/guardkit/examples/grpc/shoppb"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// BenchmarkUnary compares one connect procedure served on loopback (HTTP/1.1, the
// Connect protocol, as the Echo benchmark's route) without and with the lock: the
// difference is the lock's cost, two Redis round trips per call (redis-rt/op) and
// the allocations per call.
func BenchmarkUnary(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	counter := redistest.NewCounter()
	rdb.AddHook(counter)
	locker, err := guard.New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = locker.Close() })
	handler := func(ctx context.Context, req *connect.Request[shoppb.RefundRequest]) (*connect.Response[shoppb.RefundReply], error) {
		return connect.NewResponse(&shoppb.RefundReply{}), nil
	}
	guarded := connect.WithInterceptors(connectguard.NewInterceptor(locker, interceptor.WithRules(
		interceptor.Rule{Method: refundProc, Key: "order:{req.order_id}"})))
	locked := http.NewServeMux()
	locked.Handle(refundProc, connect.NewUnaryHandler(refundProc, handler, guarded))
	unlocked := http.NewServeMux()
	unlocked.Handle(refundProc, connect.NewUnaryHandler(refundProc, handler))

	for _, tc := range []struct {
		name string
		mux  *http.ServeMux
	}{{"unlocked", unlocked}, {"locked", locked}} {
		s := httptest.NewServer(tc.mux)
		b.Cleanup(s.Close)
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		b.Cleanup(tr.CloseIdleConnections)
		client := connect.NewClient[shoppb.RefundRequest, shoppb.RefundReply](&http.Client{Transport: tr}, s.URL+refundProc)
		call := func(order string) error {
			_, err := client.CallUnary(context.Background(), connect.NewRequest(&shoppb.RefundRequest{OrderId: order}))
			return err
		}
		b.Run(tc.name, func(b *testing.B) {
			if err := call("1"); err != nil { // warms the connection and the scripts
				b.Fatal(err)
			}
			counter.Reset()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := call("1"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(counter.RoundTrips())/float64(b.N), "redis-rt/op")
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			var next atomic.Int64
			counter.Reset()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				order := "p" + strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					if err := call(order); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(counter.RoundTrips())/float64(b.N), "redis-rt/op")
		})
	}
}
