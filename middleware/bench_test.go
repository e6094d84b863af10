package middleware_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// BenchmarkRoute compares one route served on loopback without and with the lock. The
// difference is the lock's cost: two Redis round trips (acquire, release) per request,
// reported as redis-rt/op.
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

	handler := func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }
	e := newEcho(nil)
	e.POST("/unlocked/orders/:id/pay", handler)
	e.POST("/locked/orders/:id/pay", handler, middleware.Lock(locker, "order:{param.id}"))
	base := serveHTTPTest(b, e)
	client := newClient(b)

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
			b.ResetTimer()
			for range b.N {
				if err := post(url); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(counter.RoundTrips())/float64(b.N), "redis-rt/op")
		})
		// Each goroutine its own order: no contention, only the lock's overhead.
		b.Run(route+"/parallel", func(b *testing.B) {
			var next atomic.Int64
			counter.Reset()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				url := base + "/" + route + "/orders/p" + strconv.FormatInt(next.Add(1), 10) + "/pay"
				for pb.Next() {
					if err := post(url); err != nil {
						b.Error(err) // not Fatal: this is not the benchmark's goroutine
						return
					}
				}
			})
			b.ReportMetric(float64(counter.RoundTrips())/float64(b.N), "redis-rt/op")
		})
	}
}
