package guard_test

import (
	"context"
	"testing"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// BenchmarkWrapOverhead compares a wrapped call with the same lock taken by hand, on one
// Redis, one after the other. "direct" and "wrap" each make the acquire and release round
// trips (2 per op); their difference is what Wrap adds: rendering the key, binding fn's
// context, the release bookkeeping. The "reentrant" pair makes no round trip, so it shows
// that difference in CPU time without Redis's noise.
func BenchmarkWrapOverhead(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(b, c)
	ctx := context.Background()
	mustRelease(b, mustAcquire(b, l, ctx, "warm-up"))
	req := transferReq{From: "acct-1", To: "acct-2", Amount: 5}
	work := func(ctx context.Context, req transferReq) (receipt, error) { return receipt{}, nil }
	transfer := guard.Wrap(work, guard.Use(l), guard.Key("account:{req.From}"))

	direct := func(b *testing.B, ctx context.Context) {
		for range b.N {
			le, err := l.Acquire(ctx, "account:acct-1")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := work(le.Context(), req); err != nil {
				b.Fatal(err)
			}
			if err := le.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	wrapped := func(b *testing.B, ctx context.Context) {
		for range b.N {
			if _, err := transfer(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	}
	run := func(name string, loop func(*testing.B, context.Context), reentrant bool) {
		b.Run(name, func(b *testing.B) {
			ctx := ctx
			if reentrant {
				outer := mustAcquire(b, l, ctx, "account:acct-1")
				defer mustRelease(b, outer)
				ctx = outer.Context()
			}
			b.ReportAllocs()
			counter.Reset()
			b.ResetTimer()
			loop(b, ctx)
			b.StopTimer()
			reportRoundTrips(b, counter, b.N)
		})
	}
	run("direct", direct, false)
	run("wrap", wrapped, false)
	run("direct-reentrant", direct, true)
	run("wrap-reentrant", wrapped, true)
}

// BenchmarkWrapKey measures rendering the key of a wrapped call, alone.
func BenchmarkWrapKey(b *testing.B) {
	req := transferReq{From: "acct-1", To: "acct-2", Payer: &payer{Tenant: "acme"}}
	for _, bc := range []struct {
		name string
		key  guard.Option
	}{
		{"raw", guard.RawKey("report:daily")},
		{"one-field", guard.Key("account:{req.From}")},
		{"json-tag", guard.Key("account:{req.from_account}")},
		{"two-fields-nested", guard.Key("tenant:{req.Payer.Tenant}:account:{req.From}")},
		{"keyfunc", guard.KeyFunc(func(_ context.Context, r transferReq) (string, error) { return "account:" + r.From, nil })},
	} {
		b.Run(bc.name, func(b *testing.B) {
			key, err := guard.KeyFor[transferReq](bc.key)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for range b.N {
				if _, err := key(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
