package httpguard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// BenchmarkRoute compares one ServeMux route served on loopback without and with the
// lock, as middleware's BenchmarkRoute does for Echo: the difference is the lock's cost,
// two Redis round trips per request (redis-rt/op) and the allocations per request.
func BenchmarkRoute(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	counter := redistest.NewCounter()
	rdb.AddHook(counter)
	locker, err := guard.New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = locker.Close() })

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux := http.NewServeMux()
	mux.Handle("POST /unlocked/orders/{id}/pay", handler)
	mux.Handle("POST /locked/orders/{id}/pay", httpguard.Lock(locker, "order:{path.id}")(handler))
	base := serveHTTP(b, mux)
	client := newClient(b, nil)

	post := func(url string) error {
		resp, err := client.Post(url, "", nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	for _, route := range []string{"unlocked", "locked"} {
		b.Run(route, func(b *testing.B) {
			url := base + "/" + route + "/orders/1/pay"
			if err := post(url); err != nil { // warms the connection and the scripts
				b.Fatal(err)
			}
			counter.Reset()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := post(url); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(counter.RoundTrips())/float64(b.N), "redis-rt/op")
		})
		b.Run(route+"/parallel", func(b *testing.B) {
			var next atomic.Int64
			counter.Reset()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				url := base + "/" + route + "/orders/p" + strconv.FormatInt(next.Add(1), 10) + "/pay"
				for pb.Next() {
					if err := post(url); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(counter.RoundTrips())/float64(b.N), "redis-rt/op")
		})
	}
}

// BenchmarkTransport measures what the Transport adds to a request: signing the owner
// and copying the request to carry the header (with owner), or nothing (without).
func BenchmarkTransport(b *testing.B) {
	signer := mustSigner(b, "k1", "0123456789abcdef0123456789abcdef")
	ok := &http.Response{StatusCode: http.StatusNoContent, Body: http.NoBody}
	tr := httpguard.NewTransport(signer, roundTripFunc(func(*http.Request) (*http.Response, error) { return ok, nil }))
	owned, _ := ctxid.Ensure(context.Background())
	for name, ctx := range map[string]context.Context{"owner": owned, "none": context.Background()} {
		b.Run(name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "http://b.internal/orders/1", nil).WithContext(ctx)
			b.ReportAllocs()
			for range b.N {
				if _, err := tr.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
