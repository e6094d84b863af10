package guard_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestSetClusterPrimaryKilled: a set whose keys live on three Cluster primaries is lost
// as one when one primary is killed mid-hold — its context ends with a *LeaseLostError
// naming a key of the set — and after Release and the TTL no key is held.
func TestSetClusterPrimaryKilled(t *testing.T) {
	c := cluster.Get(t)
	l := lockerOn(t, c.Client(t), guard.TTL(600*time.Millisecond))
	ctx := ctxTimeout(t, 90*time.Second)
	ps := c.Primaries()
	keys := []string{keyOn(t, c, ps[2], "set-k"), keyOn(t, c, ps[0], "set-k"), keyOn(t, c, ps[1], "set-k")}

	le, err := l.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	if got, want := le.Keys(), canonicalOrder(keys); !slices.Equal(got, want) {
		t.Fatalf("Keys = %q, want the slot order %q", got, want)
	}
	cc := c.Client(t)
	for _, k := range keys {
		if got := lockHolder(t, cc, lockName(k)); got != string(le.Owner()) {
			t.Fatalf("%s held by %q, want the set's %q", k, got, le.Owner())
		}
	}
	lctx := le.Context()
	ps[0].Kill(t)
	select {
	case <-lctx.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the set's lease was not lost after the primary of one of its keys was killed")
	}
	// The cause names the key whose validity ran out first. The set's renewals share one
	// Cluster pipeline, which waits for its slowest node: the dead primary holds up the
	// renewals of the keys on the others as well, and with them aligned, either may be
	// the one named.
	var lost *guard.LeaseLostError
	if !errors.As(context.Cause(lctx), &lost) || !slices.Contains(keys, lost.Key) {
		t.Fatalf("cause = %v, want a *LeaseLostError naming a key of the set", context.Cause(lctx))
	}
	if err := le.Err(); !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", err)
	}
	_ = le.Release(ctx) // frees the keys on the live primaries
	c.WaitHealthy(t, 30*time.Second)
	time.Sleep(700 * time.Millisecond) // the TTL of a hold the release could not reach
	fresh := c.Client(t)               // one that knows the new primary
	for _, k := range keys {
		waitUntil(t, 10*time.Second, k+" free", func() bool {
			h, err := redistest.ReadHolder(ctx, fresh, lockName(k))
			return err == nil && h == ""
		})
	}
}

// TestSetQuorum: on a quorum of three servers a set is held on every server; with one
// server killed it stays held as one on the others; with a second killed it is lost as
// one, and after Release and the TTL the last server holds none of its keys.
func TestSetQuorum(t *testing.T) {
	r := startQuorum(t, 3, false)
	l := r.locker(t, guard.TTL(time.Second), guard.RestartDelay(0))
	ctx := ctxTimeout(t, 60*time.Second)
	keys := []string{"q:b", "q:a", "q:c"}
	le, err := l.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	for _, k := range keys {
		// AcquireAll returns on the majority's grants; the last server's comes when it comes.
		waitUntil(t, 2*time.Second, k+" held on all 3 servers", func() bool { return r.holders(t, k) == 3 })
	}
	lctx := le.Context()
	r.servers[0].Kill(t)
	time.Sleep(2500 * time.Millisecond) // more than two TTLs: the renewals reach a majority
	if err := le.Err(); err != nil {
		t.Fatalf("the set was lost with one server of three down: %v", err)
	}
	for _, k := range keys {
		if n := r.holdersOn(t, k, 1, 2); n != 2 {
			t.Fatalf("%s held on %d of the two live servers", k, n)
		}
	}
	r.servers[1].Kill(t)
	select {
	case <-lctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the set was not lost with two servers of three down")
	}
	var lost *guard.LeaseLostError
	if !errors.As(context.Cause(lctx), &lost) || !slices.Contains(keys, lost.Key) {
		t.Fatalf("cause = %v, want a *LeaseLostError naming one of the set's keys", context.Cause(lctx))
	}
	_ = le.Release(ctx)
	time.Sleep(1100 * time.Millisecond)
	for _, k := range keys {
		if n := r.holdersOn(t, k, 2); n != 0 {
			t.Fatalf("%s still held on the last server", k)
		}
	}
}

// TestSetKilledHolderFreesAtTTL: a process killed while it holds a set leaves every key
// to expire at its TTL, when another process takes the set.
func TestSetKilledHolderFreesAtTTL(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	keys := []string{"kh:a", "kh:b", "kh:c"}
	p := startHolder(t, srv, keys[0], holderSpec{TTL: time.Second, Set: keys})
	p.await(t, 10*time.Second)
	p.kill(t)
	killed := time.Now()
	ctx := ctxTimeout(t, 20*time.Second)
	le, err := l.AcquireAll(ctx, keys, guard.Retry(guard.MaxWait(10*time.Second, nil)))
	if err != nil {
		t.Fatalf("AcquireAll after the holder was killed: %v", err)
	}
	if d := time.Since(killed); d > 3*time.Second {
		t.Fatalf("the set was taken %s after the kill, want about the TTL (1s)", d)
	}
	mustRelease(t, le)
}

// TestSetAutoPipelinedCluster: on go-redis's auto-pipelining client over a Cluster, whose
// keys one script call cannot take across slots, a set is taken key by key, in order.
func TestSetAutoPipelinedCluster(t *testing.T) {
	c := cluster.Get(t)
	ap, err := c.Client(t).AutoPipeline()
	if err != nil {
		t.Fatal(err)
	}
	l := lockerOn(t, ap)
	ctx := ctxTimeout(t, 30*time.Second)
	ps := c.Primaries()
	keys := []string{keyOn(t, c, ps[0], "ap-set"), keyOn(t, c, ps[1], "ap-set"), keyOn(t, c, ps[2], "ap-set")}
	le, err := l.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	cc := c.Client(t)
	for _, k := range keys {
		if got := lockHolder(t, cc, lockName(k)); got != string(le.Owner()) {
			t.Fatalf("%s held by %q, want the set's %q", k, got, le.Owner())
		}
	}
	mustRelease(t, le)
	for _, k := range keys {
		if got := lockHolder(t, cc, lockName(k)); got != "" {
			t.Fatalf("%s still held by %q", k, got)
		}
	}
}
