package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// hashTag returns the part of a Redis key that Redis Cluster hashes.
func hashTag(k string) string {
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			return k[i+1 : i+1+j]
		}
	}
	return k
}

func TestHostileKeys(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv, guard.MaxKeyLen(2<<20))
	ctx := ctxTimeout(t, 10*time.Second)
	keys := []string{
		"{", "}", "{}", "}{", "a{b}c", "%7D", "%", "\x00", "nul\x00in", "line\nbreak", "tab\t",
		"emoji 🔒", "ünïcödé", "\xff\xfe invalid utf-8", " ", strings.Repeat("k", 1<<20),
	}
	seen := map[string]string{}
	for _, k := range keys {
		le, err := l.Acquire(ctx, k)
		if err != nil {
			t.Fatalf("Acquire(%.20q): %v", k, err)
		}
		if le.Key() != k {
			t.Fatalf("Key() = %.20q, want %.20q", le.Key(), k)
		}
		names, _ := c.Keys(ctx, "guard:*").Result()
		var lock string
		fresh := 0
		for _, n := range names {
			if _, old := seen[n]; !old {
				lock = n
				fresh++
			}
		}
		if fresh != 1 {
			t.Fatalf("key %.20q: %d new keys among %d, want its lock hash alone", k, fresh, len(names))
		}
		if hashTag(lock+":queue") != hashTag(lock) || hashTag(lock+":release") != hashTag(lock) || !strings.HasPrefix(lock, "guard:{") {
			t.Fatalf("key %.20q: lock %.40q and its queue and channel do not share one hash tag", k, lock)
		}
		seen[lock] = k
		other, err := l.TryAcquire(context.Background(), k)
		if !errors.Is(err, guard.ErrLocked) {
			t.Fatalf("key %.20q not exclusive: %v %v", k, other, err)
		}
		mustRelease(t, le)
		if h := lockHolder(t, c, lock); h != "" {
			t.Fatalf("key %.20q left its lock held", k)
		}
	}
}

func TestInvalidKeys(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	for _, k := range []string{"", strings.Repeat("x", 1025), strings.Repeat("x", 1<<20)} {
		_, err := l.Acquire(context.Background(), k)
		key, n, ok := guard.InvalidKey(err)
		if !errors.Is(err, guard.ErrInvalidKey) || !ok || n != len(k) || len(key) > 64 {
			t.Fatalf("Acquire(len %d) = %v, want a key error", len(k), err)
		}
	}
	if n := counter.RoundTrips(); n != 0 {
		t.Fatalf("invalid keys made %d Redis calls, want 0", n)
	}
	le, err := l.Acquire(context.Background(), strings.Repeat("x", 1024))
	if err != nil {
		t.Fatalf("a key of exactly MaxKeyLen: %v", err)
	}
	mustRelease(t, le)
}

func TestInvalidOwner(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	for _, o := range []ctxid.ID{"#t", "a#b", ctxid.ID(strings.Repeat("o", 300))} {
		_, err := l.Acquire(ctxid.NewContext(context.Background(), o), "k")
		if !errors.Is(err, ctxid.ErrInvalid) {
			t.Fatalf("owner %.20q: %v, want ctxid.ErrInvalid", o, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	cases := []struct {
		field string
		opts  []guard.Option
	}{
		{"TTL", []guard.Option{guard.TTL(0)}},
		{"TTL", []guard.Option{guard.TTL(-time.Second)}},
		{"TTL", []guard.Option{guard.TTL(3 * time.Millisecond)}},
		{"TTL", []guard.Option{guard.TTL(3 * time.Millisecond), guard.Renewal(0, 0)}},
		{"Renewal", []guard.Option{guard.TTL(time.Second), guard.Renewal(time.Second, 0)}},
		{"Renewal", []guard.Option{guard.Renewal(-time.Millisecond, 0)}},
		{"Renewal", []guard.Option{guard.TTL(time.Second), guard.Renewal(2*time.Second, 0)}},
		{"Renewal", []guard.Option{guard.Renewal(0, -time.Millisecond)}},
		{"Renewal", []guard.Option{guard.TTL(time.Second), guard.Renewal(0, time.Second)}},
		{"Renewal", []guard.Option{guard.TTL(time.Second), guard.Renewal(500*time.Millisecond, 600*time.Millisecond)}},
		{"MaxKeyLen", []guard.Option{guard.MaxKeyLen(0)}},
		{"Prefix", []guard.Option{guard.Prefix("app{")}},
		{"ReleaseTimeout", []guard.Option{guard.ReleaseTimeout(0)}},
		{"MaxHold", []guard.Option{guard.MaxHold(-1)}},
		{"FenceRetention", []guard.Option{guard.FenceRetention(time.Millisecond)}},
		{"Retry", []guard.Option{guard.Retry(guard.MaxWait(0, nil))}},
		{"Retry", []guard.Option{guard.Retry(guard.MaxWait(-1, guard.Fixed(0, 0)))}},
	}
	for _, tc := range cases {
		_, err := guard.New(c, tc.opts...)
		var ce *guard.ConfigError
		if !errors.Is(err, guard.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%s case) = %v, want a *ConfigError naming %s", tc.field, err, tc.field)
		}
	}
	// A negative MaxWait is valid: it waits until the context ends.
	if l, err := guard.New(c, guard.Retry(guard.MaxWait(-time.Second, nil))); err != nil {
		t.Errorf("New with MaxWait(-1s): %v, want it accepted", err)
	} else {
		_ = l.Close()
	}
	if _, err := guard.New(nil); !errors.Is(err, guard.ErrInvalidConfig) {
		t.Errorf("New(nil) = %v", err)
	}

	l := lockerOn(t, c)
	_, err := l.Acquire(context.Background(), "k", guard.Prefix("other:"))
	var ce *guard.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Prefix" {
		t.Errorf("Acquire with a Locker-only option = %v, want a *ConfigError naming Prefix", err)
	}
	if _, err := l.Acquire(context.Background(), "k", guard.TTL(0)); !errors.As(err, &ce) || ce.Field != "TTL" {
		t.Errorf("Acquire with TTL(0) = %v", err)
	}
}

// TestRenewalZeros: 0 for Renewal's every or margin leaves it as it was, the default on
// New and the Locker's on a call; each refusal names Renewal and the value at fault.
func TestRenewalZeros(t *testing.T) {
	c := redistest.Start(t).Client(t)
	for _, opts := range [][]guard.Option{
		{guard.Renewal(0, 0)},
		{guard.TTL(time.Second), guard.Renewal(0, 0)},
		{guard.TTL(time.Second), guard.Renewal(0, 600*time.Millisecond)}, // every TTL/3 < 400ms
		{guard.TTL(time.Second), guard.Renewal(900*time.Millisecond, 0)}, // margin 12ms
	} {
		l, err := guard.New(c, opts...)
		if err != nil {
			t.Fatalf("New(%d options) = %v, want a Locker", len(opts), err)
		}
		_ = l.Close()
	}
	for _, tc := range []struct {
		opts []guard.Option
		want string
	}{
		{[]guard.Option{guard.Renewal(-time.Second, 0)}, "every must be > 0"},
		{[]guard.Option{guard.Renewal(0, -time.Second)}, "margin must be ≥ 0"},
		{[]guard.Option{guard.TTL(time.Second), guard.Renewal(0, time.Second)}, "margin must be ≥ 0 (0 for the default, TTL/100 + 2ms) and < TTL (1s), got 1s"},
		{[]guard.Option{guard.TTL(time.Second), guard.Renewal(time.Second, 0)}, "every must be > 0 and < TTL − margin (1s − 12ms), got 1s"},
	} {
		_, err := guard.New(c, tc.opts...)
		var ce *guard.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Renewal" || !strings.Contains(ce.Reason, tc.want) {
			t.Errorf("New = %v, want a *ConfigError naming Renewal: %s", err, tc.want)
		}
	}
	// On a call, 0 keeps the Locker's setting: its every of 500ms no longer fits the
	// margin of 600ms the call sets (TTL/3 would).
	l := lockerOn(t, c, guard.TTL(time.Second), guard.Renewal(500*time.Millisecond, 0))
	var ce *guard.ConfigError
	if _, err := l.Acquire(context.Background(), "k", guard.Renewal(0, 600*time.Millisecond)); !errors.As(err, &ce) || ce.Field != "Renewal" {
		t.Errorf("Acquire with Renewal(0, 600ms) on a Locker renewing every 500ms = %v, want a *ConfigError naming Renewal", err)
	}
	le, err := l.Acquire(context.Background(), "k", guard.Renewal(0, 100*time.Millisecond))
	if err != nil {
		t.Fatalf("Acquire with Renewal(0, 100ms) = %v", err)
	}
	mustRelease(t, le)
}

func TestPerCallTTL(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	le := mustAcquire(t, l, ctx, "short", guard.TTL(2*time.Second))
	defer mustRelease(t, le)
	if left := leaseLeft(t, c, "short"); left <= 0 || left > 2*time.Second {
		t.Fatalf("lease left in Redis = %s, want ≤ 2s", left)
	}
}
