package guard_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// BenchmarkLabel: uncontended acquire + release, one key per goroutine, without and with
// Label; server-µs/op is the time Redis spent in the scripts per pair (INFO commandstats).
func BenchmarkLabel(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []guard.Option
	}{{"off", nil}, {"on", []guard.Option{guard.Label("")}}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			c := srv.Client(b)
			l := lockerOn(b, c, bc.opts...)
			ctx := context.Background()
			mustRelease(b, mustAcquire(b, l, ctx, "warm-up"))
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
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
			b.StopTimer()
			b.ReportMetric(scriptUsec(b, c)/float64(b.N), "server-µs/op")
		})
	}
}

// scriptUsec is the time Redis spent in EVALSHA and EVAL since its stats were reset, in µs.
func scriptUsec(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				sum += n
			}
		}
	}
	return sum
}
