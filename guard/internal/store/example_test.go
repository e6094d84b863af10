package store_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// The engine's use of a store: describe a hold in plain values, make an attempt, read
// the typed grant, release.
func Example() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()

	var seq atomic.Int64
	nonce := func() string { return "locker-1." + strconv.FormatInt(seq.Add(1), 10) }
	done := make(chan struct{})
	defer close(done)
	s := store.NewSingle(c)
	if err := s.Configure(store.Config{ID: "locker-1", Prefix: "guard:", TTL: 30 * time.Second,
		Aside: func(fn func()) bool { go fn(); return true }, Done: done, Timeout: time.Second, Nonce: nonce}); err != nil {
		panic(err)
	}

	terms := &store.Terms{Spec: &store.Spec{Acquire: script.Acquire, Release: script.Release, Renew: script.Renew},
		TTL: 30 * time.Second, Validity: 29 * time.Second, Retention: time.Hour}
	terms.Fill()
	keys := store.Keys{Lock: "guard:{order:42}", Queue: "guard:{order:42}:queue"}
	hold := func(owner string) *store.Hold {
		h := &store.Hold{Keys: keys, Terms: terms, Section: owner}
		h.Box(owner, nil)
		return h
	}

	ctx := context.Background()
	mine, theirs := hold("req-1"), hold("req-2")
	g := s.Acquire(ctx, mine, nonce(), store.MannerTry, false)
	fmt.Println("acquired:", g.Acquired, "holds:", g.Holds, "token > 0:", g.Token > 0)
	g = s.Acquire(ctx, theirs, nonce(), store.MannerTry, false)
	fmt.Println("another owner acquired:", g.Acquired, "busy for about 30s:", g.PTTL > 29*time.Second)
	code, err := s.Release(ctx, mine, nonce(), false)
	fmt.Println("released:", code == script.Freed, err)
	// Output:
	// acquired: true holds: 1 token > 0: true
	// another owner acquired: false busy for about 30s: true
	// released: true <nil>
}
