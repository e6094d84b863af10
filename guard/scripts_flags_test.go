package guard

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestScriptsPlainFallback: a server that cannot parse the "#!lua" line (Redis 6.2; here
// miniredis, which cannot either) gets the plain scripts, for acquisitions, renewals and
// releases alike, and the Locker remembers it.
func TestScriptsPlainFallback(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	l, err := New(c, TTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	le, err := l.Acquire(ctx, "plain")
	if err != nil {
		t.Fatalf("Acquire on a server without script flags: %v", err)
	}
	if !l.one().Legacy() {
		t.Fatal("the Locker did not fall back to the plain scripts")
	}
	time.Sleep(500 * time.Millisecond) // renewals, every TTL/3
	if err := le.Err(); err != nil {
		t.Fatalf("lease lost on a server without script flags: %v", err)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release on a server without script flags: %v", err)
	}
}
