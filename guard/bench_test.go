package guard_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

func reportRoundTrips(b *testing.B, c *redistest.Counter, per int) {
	b.ReportMetric(float64(c.RoundTrips())/float64(per), "roundtrips/op")
}

// BenchmarkAcquireRelease: uncontended acquire + release, one key per goroutine.
func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(b, c)
	ctx := context.Background()
	mustRelease(b, mustAcquire(b, l, ctx, "warm-up"))
	var id atomic.Int64
	b.ReportAllocs()
	counter.Reset()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "bench:" + strconv.FormatInt(id.Add(1), 10)
		for pb.Next() {
			le, err := l.TryAcquire(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			if err := le.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportRoundTrips(b, counter, b.N)
}

// BenchmarkReentrantAcquire: nested acquisition of a lease this process holds.
func BenchmarkReentrantAcquire(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(b, c)
	outer := mustAcquire(b, l, context.Background(), "outer")
	defer mustRelease(b, outer)
	ctx := outer.Context()
	b.ReportAllocs()
	counter.Reset()
	b.ResetTimer()
	for b.Loop() {
		le, err := l.Acquire(ctx, "outer")
		if err != nil {
			b.Fatal(err)
		}
		_ = le.Release(ctx)
	}
	reportRoundTrips(b, counter, b.N)
}

// BenchmarkContendedHandoff: 8 goroutines in each of two Lockers take turns on one key.
// handoff-µs is the mean gap between one holder's release and the next holder's entry.
func BenchmarkContendedHandoff(b *testing.B) {
	srv := redistest.Start(b)
	counter := redistest.NewCounter()
	var lockers []*guard.Locker
	for range 2 {
		c := srv.Client(b)
		c.AddHook(counter)
		lockers = append(lockers, lockerOn(b, c))
	}
	ctx := context.Background()
	var (
		mu       sync.Mutex
		lastExit time.Time
		gaps     time.Duration
		handoffs int
		left     atomic.Int64
		wg       sync.WaitGroup
	)
	left.Store(int64(b.N))
	b.ReportAllocs()
	counter.Reset()
	b.ResetTimer()
	for _, l := range lockers {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				octx, _ := ctxid.Fork(ctx)
				for left.Add(-1) >= 0 {
					le, err := l.Acquire(octx, "hot")
					if err != nil {
						b.Error(err)
						return
					}
					now := time.Now()
					mu.Lock()
					if !lastExit.IsZero() {
						gaps += now.Sub(lastExit)
						handoffs++
					}
					mu.Unlock()
					mu.Lock()
					lastExit = time.Now()
					mu.Unlock()
					if err := le.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	b.StopTimer()
	reportRoundTrips(b, counter, b.N)
	if handoffs > 0 {
		b.ReportMetric(float64(gaps.Microseconds())/float64(handoffs), "handoff-µs")
	}
}

// BenchmarkRawSetNX is the physical reference for BenchmarkAcquireRelease: SET NX PX and
// a compare-and-delete script, with no reentrancy, renewal or fencing.
func BenchmarkRawSetNX(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	del := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	ctx := context.Background()
	_ = del.Load(ctx, c).Err()
	var id atomic.Int64
	b.ReportAllocs()
	counter.Reset()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "raw:" + strconv.FormatInt(id.Add(1), 10)
		for pb.Next() {
			owner := string(ctxid.New())
			ok, err := c.SetNX(ctx, key, owner, 30*time.Second).Result()
			if err != nil || !ok {
				b.Errorf("SET NX: %v %v", ok, err)
				return
			}
			if err := del.Run(ctx, c, []string{key}, owner).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportRoundTrips(b, counter, b.N)
}

// BenchmarkAcquireReleaseTelemetry is BenchmarkAcquireRelease with the OpenTelemetry SDK
// recording every span and metric, to compare with the default no-op providers.
func BenchmarkAcquireReleaseTelemetry(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
	l := lockerOn(b, c, guard.Telemetry(tp, mp))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		le, err := l.TryAcquire(ctx, "bench", guard.Name("bench"))
		if err != nil {
			b.Fatal(err)
		}
		if err := le.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireReleaseContextTimeout is BenchmarkAcquireRelease with a client built
// with ContextTimeoutEnabled and a cancellable context, as a request would have: calls
// then run inline, the client enforcing deadlines itself.
func BenchmarkAcquireReleaseContextTimeout(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	l := lockerOn(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	mustRelease(b, mustAcquire(b, l, ctx, "warm-up"))
	var id atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := "bench:" + strconv.FormatInt(id.Add(1), 10)
		for pb.Next() {
			le, err := l.TryAcquire(ctx, key)
			if err != nil {
				b.Error(err)
				return
			}
			if err := le.Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkSyncReplicas: the price of SyncReplicas(1, …) on an uncontended acquire +
// release, against the same pair without it, on a primary with one replica.
func BenchmarkSyncReplicas(b *testing.B) {
	primary := redistest.Start(b)
	replica := redistest.Start(b, redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(portOf(b, primary.Addr()))))
	rc := replica.Client(b)
	waitUntil(b, 10*time.Second, "the replica's link", func() bool {
		info, _ := rc.Info(context.Background(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	c := primary.Client(b)
	for _, bc := range []struct {
		name string
		opts []guard.Option
	}{
		{"plain", nil},
		{"SyncReplicas=1", []guard.Option{guard.SyncReplicas(1, time.Second)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := lockerOn(b, c, bc.opts...)
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				le, err := l.TryAcquire(ctx, "sync-bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := le.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func portOf(tb testing.TB, addr string) int {
	tb.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	if err != nil || n == 0 {
		tb.Fatalf("bad address %q", addr)
	}
	return n
}

// BenchmarkAcquireAll: uncontended AcquireAll → Release of K keys on one server, beside
// K nested TryAcquires of the same keys released in reverse.
func BenchmarkAcquireAll(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(b, c)
	ctx := context.Background()
	for _, k := range []int{2, 10} {
		keys := make([]string, k)
		for i := range keys {
			keys[i] = "set-bench:" + strconv.Itoa(i)
		}
		mustRelease(b, must(l.AcquireAll(ctx, keys)))
		b.Run("K="+strconv.Itoa(k)+"/set", func(b *testing.B) {
			b.ReportAllocs()
			counter.Reset()
			for range b.N {
				le, err := l.AcquireAll(ctx, keys)
				if err != nil {
					b.Fatal(err)
				}
				if err := le.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			reportRoundTrips(b, counter, b.N)
		})
		b.Run("K="+strconv.Itoa(k)+"/nested", func(b *testing.B) {
			b.ReportAllocs()
			counter.Reset()
			held := make([]*guard.Lease, k)
			for range b.N {
				inner := ctx
				for i, key := range keys {
					le, err := l.TryAcquire(inner, key)
					if err != nil {
						b.Fatal(err)
					}
					held[i], inner = le, le.Context()
				}
				for i := k - 1; i >= 0; i-- {
					if err := held[i].Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportRoundTrips(b, counter, b.N)
		})
	}
}
