package guard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestSetHoldsEveryKey: AcquireAll holds each key under one section, in canonical order
// whatever order the caller gives, with a token per key; Release frees them all.
func TestSetHoldsEveryKey(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)

	le, err := l.AcquireAll(ctx, []string{"acct:b", "acct:a", "acct:c", "acct:a"})
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	keys := le.Keys()
	if len(keys) != 3 {
		t.Fatalf("Keys = %q, want 3 keys without the duplicate", keys)
	}
	if !slices.Equal(keys, canonicalOrder(keys)) {
		t.Fatalf("Keys = %q, not in canonical order", keys)
	}
	tokens := le.Tokens()
	for i, k := range keys {
		if got := lockHolder(t, c, lockName(k)); got != string(le.Owner()) {
			t.Fatalf("holder of %s = %q, want the set's section %q", k, got, le.Owner())
		}
		if tokens[i] <= 0 {
			t.Fatalf("token of %s = %d", k, tokens[i])
		}
	}
	if le.Token() != tokens[0] || le.Key() != keys[0] {
		t.Fatalf("Key/Token = %s/%d, want the first key's %s/%d", le.Key(), le.Token(), keys[0], tokens[0])
	}
	label, _ := c.HGet(ctx, lockName(keys[1]), "#l").Result()
	if want := "set of 3 keys"; !containsText(label, want) {
		t.Fatalf("label of %s = %q, want it to say %q", keys[1], label, want)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, k := range keys {
		if got := lockHolder(t, c, lockName(k)); got != "" {
			t.Fatalf("%s still held by %q after Release", k, got)
		}
	}
}

// TestSetAllOrNothing: when one key stays busy, AcquireAll fails with a *LockedError
// naming it, and the keys it took before are free again in Redis.
func TestSetAllOrNothing(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	other, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)

	keys := canonicalOrder([]string{"x:1", "x:2", "x:3"})
	busy := mustAcquire(t, other, ctx, keys[2])
	defer mustRelease(t, busy)

	_, err := l.AcquireAll(ctx, keys, guard.Retry(guard.MaxWait(300*time.Millisecond, nil)))
	var le *guard.LockedError
	if !errors.As(err, &le) || le.Key != keys[2] {
		t.Fatalf("AcquireAll = %v, want a *LockedError naming %s", err, keys[2])
	}
	for _, k := range keys[:2] {
		if got := lockHolder(t, c, lockName(k)); got != "" {
			t.Fatalf("%s left held by %q after the set failed", k, got)
		}
	}

	// TryAcquireAll fails at once the same way.
	start := time.Now()
	if _, err := l.TryAcquireAll(ctx, keys); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("TryAcquireAll = %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("TryAcquireAll took %v", d)
	}
	for _, k := range keys[:2] {
		if got := lockHolder(t, c, lockName(k)); got != "" {
			t.Fatalf("%s left held by %q after TryAcquireAll failed", k, got)
		}
	}
}

// TestSetCancelledMidAcquisition: a context that ends while the set waits for a key
// leaves no key held.
func TestSetCancelledMidAcquisition(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	other, _ := newLocker(t, srv)
	keys := canonicalOrder([]string{"m:1", "m:2", "m:3", "m:4"})
	busy := mustAcquire(t, other, ctxTimeout(t, 5*time.Second), keys[3])
	defer mustRelease(t, busy)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := l.AcquireAll(ctx, keys)
	if !errors.Is(err, guard.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireAll = %v, want ErrLocked with the context's error", err)
	}
	for _, k := range keys[:3] {
		if got := lockHolder(t, c, lockName(k)); got != "" {
			t.Fatalf("%s left held by %q", k, got)
		}
	}
}

// TestSetLostAsOne: losing one key ends the set's context with a *LeaseLostError that
// names that key, and Release frees the others.
func TestSetLostAsOne(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv, guard.TTL(time.Second))
	ctx := ctxTimeout(t, 10*time.Second)
	keys := canonicalOrder([]string{"l:1", "l:2", "l:3"})
	le, err := l.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	lctx := le.Context()
	if err := c.Del(ctx, lockName(keys[1])).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the set's context did not end after one of its keys vanished")
	}
	var lost *guard.LeaseLostError
	if !errors.As(context.Cause(lctx), &lost) || lost.Key != keys[1] {
		t.Fatalf("cause = %v, want a *LeaseLostError naming %s", context.Cause(lctx), keys[1])
	}
	if err := le.Release(ctx); !errors.Is(err, guard.ErrLeaseLost) {
		t.Fatalf("Release = %v, want ErrLeaseLost", err)
	}
	for _, k := range keys {
		if got := lockHolder(t, c, lockName(k)); got != "" {
			t.Fatalf("%s still held by %q", k, got)
		}
	}
}

// TestSetReentry: inside a set's context, a call for one of its keys reenters, and a
// call for a superset takes only the key the set lacks.
func TestSetReentry(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	le, err := l.AcquireAll(ctx, []string{"r:a", "r:b"})
	if err != nil {
		t.Fatal(err)
	}
	defer mustRelease(t, le)
	in := le.Context()

	one := mustAcquire(t, l, in, "r:b")
	if !one.Reentrant() || one.Owner() != le.Owner() {
		t.Fatalf("reentry of r:b: reentrant %v, owner %q; want the set's %q", one.Reentrant(), one.Owner(), le.Owner())
	}
	mustRelease(t, one)

	sup, err := l.AcquireAll(in, []string{"r:c", "r:a", "r:b"})
	if err != nil {
		t.Fatalf("superset: %v", err)
	}
	if sup.Reentrant() {
		t.Fatal("a superset with a new key reports itself reentrant")
	}
	tokens, outer := sup.Tokens(), le.Tokens()
	for i, k := range sup.Keys() {
		if j := slices.Index(le.Keys(), k); j >= 0 && tokens[i] != outer[j] {
			t.Fatalf("reentered %s has token %d, want the set's %d", k, tokens[i], outer[j])
		}
	}
	if err := sup.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := lockHolder(t, c, lockName("r:c")); got != "" {
		t.Fatalf("r:c still held by %q after the superset's release", got)
	}
	for _, k := range []string{"r:a", "r:b"} {
		if got := lockHolder(t, c, lockName(k)); got != string(le.Owner()) {
			t.Fatalf("%s held by %q after the inner release, want the outer set's %q", k, got, le.Owner())
		}
	}
}

// TestSetOppositeOrders: callers listing the same keys in opposite orders never
// deadlock and never overlap on a key (in-process; the two-process version is
// TestSetOppositeOrdersProcesses).
func TestSetOppositeOrders(t *testing.T) {
	srv := redistest.Start(t)
	l1, _ := newLocker(t, srv)
	l2, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 60*time.Second)
	var inA, inB atomic.Int32
	rounds := envInt("GUARD_SET_ROUNDS", 200)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, l := range []*guard.Locker{l1, l2} {
		keys := []string{"o:a", "o:b"}
		if i == 1 {
			keys = []string{"o:b", "o:a"}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				le, err := l.AcquireAll(ctx, keys, guard.Retry(guard.MaxWait(10*time.Second, nil)))
				if err != nil {
					errs <- err
					return
				}
				if inA.Add(1) != 1 || inB.Add(1) != 1 {
					errs <- fmt.Errorf("two holders at once")
					return
				}
				inA.Add(-1)
				inB.Add(-1)
				if err := le.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestSetInvalid: an empty list and a bad key fail before any Redis call.
func TestSetInvalid(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	for _, keys := range [][]string{nil, {"ok", ""}} {
		if _, err := l.AcquireAll(ctx, keys); !errors.Is(err, guard.ErrInvalidKey) {
			t.Fatalf("AcquireAll(%q) = %v, want ErrInvalidKey", keys, err)
		}
	}
}

// canonicalOrder returns keys sorted as AcquireAll takes them: by the hash slot of
// their lock hash, then by key.
func canonicalOrder(keys []string) []string {
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b string) int {
		if sa, sb := redistest.Slot(lockName(a)), redistest.Slot(lockName(b)); sa != sb {
			return sa - sb
		}
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	return slices.Compact(out)
}

func containsText(s, sub string) bool {
	return strings.Contains(s, sub)
}

// TestSetWrapDoRun: the Keys and RawKeys options make Wrap, Do and Run take their keys as
// one lock; the function's context carries the set's lease.
func TestSetWrapDoRun(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	type transfer struct{ From, To string }

	check := func(ctx context.Context, want ...string) error {
		le, ok := guard.LeaseFromContext(ctx)
		if !ok {
			return errors.New("no lease in the function's context")
		}
		if got := le.Keys(); !slices.Equal(got, canonicalOrder(want)) {
			return fmt.Errorf("lease keys %q, want %q", got, canonicalOrder(want))
		}
		for _, k := range want {
			if lockHolder(t, c, lockName(k)) == "" {
				return fmt.Errorf("%s not held inside the function", k)
			}
		}
		return nil
	}
	move := guard.Wrap(func(ctx context.Context, req transfer) (int, error) {
		return 7, check(ctx, "acct:"+req.From, "acct:"+req.To)
	}, guard.Use(l), guard.Keys("acct:{req.From}", "acct:{req.To}"))
	if n, err := move(ctx, transfer{From: "9", To: "3"}); err != nil || n != 7 {
		t.Fatalf("wrapped call = %d, %v", n, err)
	}
	// A transfer to the same account is one lock.
	if _, err := move(ctx, transfer{From: "5", To: "5"}); err != nil {
		t.Fatalf("same account: %v", err)
	}
	if err := guard.Do(ctx, func(ctx context.Context) error { return check(ctx, "bin:1", "bin:2") },
		guard.Use(l), guard.RawKeys("bin:2", "bin:1")); err != nil {
		t.Fatalf("Do: %v", err)
	}
	ran, err := l.Run(ctx, func(ctx context.Context) error { return check(ctx, "job:x", "job:y") }, guard.Keys("job:y", "job:x"))
	if !ran || err != nil {
		t.Fatalf("Run = %v, %v", ran, err)
	}
	for _, k := range []string{"acct:9", "acct:3", "bin:1", "bin:2", "job:x", "job:y"} {
		if got := lockHolder(t, c, lockName(k)); got != "" {
			t.Fatalf("%s still held by %q", k, got)
		}
	}
	if _, err := guard.WrapE(func(context.Context, transfer) (int, error) { return 0, nil }, guard.Use(l), guard.Keys()); !errors.Is(err, guard.ErrInvalidConfig) {
		t.Fatalf("Keys() = %v, want ErrInvalidConfig", err)
	}
	if _, err := guard.WrapE(func(context.Context, transfer) (int, error) { return 0, nil }, guard.Use(l), guard.Keys("a:{req.Nope}", "b")); !errors.Is(err, guard.ErrInvalidConfig) {
		t.Fatalf("a bad template = %v, want ErrInvalidConfig", err)
	}
}

// TestSetRoundTrips: on one server, AcquireAll of 10 free keys is one round trip (one
// script call), the lease's renewals are one round trip per interval, not per key, and
// its release is one round trip.
func TestSetRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(t, c, guard.TTL(900*time.Millisecond), guard.Renewal(300*time.Millisecond, 0))
	ctx := ctxTimeout(t, 10*time.Second)
	warmUp(t, l, c, ctx)
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("rt:%d", i)
	}
	// The script is loaded by a first call (NOSCRIPT, then EVAL): count the second.
	le, err := l.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, le)

	counter.Reset()
	le, err = l.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.RoundTrips(); n != 1 {
		t.Fatalf("AcquireAll of 10 free keys took %d round trips, want 1", n)
	}
	counter.Reset()
	time.Sleep(1050 * time.Millisecond) // three renewal intervals, a little more
	n := counter.RoundTrips()
	if err := le.Err(); err != nil {
		t.Fatalf("lease lost while held: %v", err)
	}
	if n < 2 || n > 4 {
		t.Fatalf("%d round trips in about three renewal intervals of a 10-key lease, want one per interval (3)", n)
	}
	counter.Reset()
	mustRelease(t, le)
	if n := counter.RoundTrips(); n != 1 {
		t.Fatalf("the release of a 10-key set took %d round trips, want 1", n)
	}
	for _, k := range keys {
		if got := lockHolder(t, c, lockName(k)); got != "" {
			t.Fatalf("%s still held by %q after the set's release", k, got)
		}
	}
}

// TestSetFrozenRedis: a set's budget holds while Redis is frozen, and the set's script
// call, written into the frozen server's socket and run when it wakes after the caller
// gave up, leaves no key held — with and without ContextTimeoutEnabled. The same when
// the first keys were taken before the freeze and a later one is waited for.
func TestSetFrozenRedis(t *testing.T) {
	srv := redistest.Start(t)
	const budget = time.Second
	for _, deadlines := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%t", deadlines), func(t *testing.T) {
			c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = deadlines })
			l := lockerOn(t, c)
			mustRelease(t, mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "warm-up"))
			keys := []string{fmt.Sprintf("fz%t:a", deadlines), fmt.Sprintf("fz%t:b", deadlines), fmt.Sprintf("fz%t:c", deadlines)}
			mustRelease(t, must(l.AcquireAll(ctxTimeout(t, 5*time.Second), keys))) // loads the script

			srv.Pause(t)
			start := time.Now()
			_, err := l.AcquireAll(context.Background(), keys, guard.Retry(guard.MaxWait(budget, nil)))
			took := time.Since(start)
			time.Sleep(2 * time.Second) // the call lies in the frozen server's socket
			srv.Resume(t)
			if !errors.Is(err, guard.ErrUnavailable) || took > budget+budgetSlack {
				t.Fatalf("AcquireAll on a frozen Redis = %v after %s, want ErrUnavailable within %s", err, took, budget+budgetSlack)
			}
			for _, k := range keys {
				waitUntil(t, 5*time.Second, k+" free after the freeze", func() bool { return lockHolder(t, c, lockName(k)) == "" })
			}

			// A later key busy: the first ones are taken, then Redis freezes during the wait.
			other := lockerOn(t, srv.Client(t))
			busy := mustAcquire(t, other, ctxTimeout(t, 5*time.Second), keys[2])
			done := make(chan error, 1)
			start = time.Now()
			go func() {
				_, err := l.AcquireAll(context.Background(), keys, guard.Retry(guard.MaxWait(budget, nil)))
				done <- err
			}()
			waitQueued(t, c, keys[2], l)
			srv.Pause(t)
			err = <-done
			if took := time.Since(start); took > budget+budgetSlack {
				t.Errorf("AcquireAll returned %s after it began, past its budget", took)
			}
			time.Sleep(time.Second)
			srv.Resume(t)
			if !errors.Is(err, guard.ErrLocked) && !errors.Is(err, guard.ErrUnavailable) {
				t.Fatalf("AcquireAll = %v, want ErrLocked or ErrUnavailable", err)
			}
			mustRelease(t, busy)
			for _, k := range keys {
				waitUntil(t, 10*time.Second, k+" free", func() bool { return lockHolder(t, c, lockName(k)) == "" })
			}
		})
	}
}

// must returns le, failing the test on err.
func must(le *guard.Lease, err error) *guard.Lease {
	if err != nil {
		panic(err)
	}
	return le
}

// TestSetInspect: Inspect shows each key of a set held by the set's one section, with a
// label that says it is part of a set of that many keys (after the caller's own label).
func TestSetInspect(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	le, err := l.AcquireAll(ctx, []string{"in:a", "in:b"}, guard.Label("transfer 17"))
	if err != nil {
		t.Fatal(err)
	}
	defer mustRelease(t, le)
	for _, k := range le.Keys() {
		st, err := l.Inspect(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Holders) != 1 || st.Holders[0].Owner != le.Owner() || st.Holders[0].Label != "transfer 17 (set of 2 keys)" {
			t.Fatalf("Inspect(%s) holders = %+v, want the set's section labelled %q", k, st.Holders, "transfer 17 (set of 2 keys)")
		}
	}
}

// TestSetKinds: the kind applies to every key of a set: two sets of read locks on the
// same keys are held at once, and a set of write locks waits for both.
func TestSetKinds(t *testing.T) {
	srv := redistest.Start(t)
	l1, _ := newLocker(t, srv)
	l2, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	keys := []string{"rwset:a", "rwset:b"}
	r1, err := l1.AcquireAll(ctx, keys, guard.Read())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l2.AcquireAll(ctx, []string{"rwset:b", "rwset:a"}, guard.Read())
	if err != nil {
		t.Fatalf("a second set of readers: %v", err)
	}
	if _, err := l2.TryAcquireAll(ctx, keys, guard.Write()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("a set of writers beside readers = %v, want ErrLocked", err)
	}
	mustRelease(t, r1)
	mustRelease(t, r2)
	w, err := l2.TryAcquireAll(ctx, keys, guard.Write())
	if err != nil {
		t.Fatalf("a set of writers once the readers left: %v", err)
	}
	if w.Kind() != guard.KindWrite {
		t.Fatalf("Kind = %v", w.Kind())
	}
	mustRelease(t, w)
}

// TestSetDeadlockWithNestedCaller: a set waiting for a key held by a caller that takes
// the set's keys one by one in the other order forms a real cycle with another owner:
// deadlock detection ends it with one ErrDeadlock, and the other side completes.
func TestSetDeadlockWithNestedCaller(t *testing.T) {
	srv := redistest.Start(t)
	l1, _ := newLocker(t, srv, guard.DeadlockDetection(200*time.Millisecond))
	l2, _ := newLocker(t, srv, guard.DeadlockDetection(200*time.Millisecond))
	ctx := ctxTimeout(t, 30*time.Second)
	keys := canonicalOrder([]string{"dl:a", "dl:b"})
	first, second := keys[0], keys[1]

	probe := srv.Client(t)
	// The nested caller holds the second key and will ask for the first inside it.
	outer := mustAcquire(t, l2, ctx, second)
	inSet := make(chan struct{})
	setErr := make(chan error, 1)
	go func() {
		le, err := l1.AcquireAll(ctx, keys, guard.Retry(guard.MaxWait(10*time.Second, nil)))
		if err == nil {
			err = le.Release(ctx)
		}
		setErr <- err
	}()
	go func() {
		waitUntil(t, 10*time.Second, "the set to hold "+first, func() bool {
			h, err := redistest.ReadHolder(ctx, probe, lockName(first))
			return err == nil && h != ""
		})
		close(inSet)
	}()
	<-inSet
	inner, nestedErr := l2.Acquire(outer.Context(), first, guard.Retry(guard.MaxWait(10*time.Second, nil)))
	if nestedErr == nil {
		mustRelease(t, inner)
	}
	mustRelease(t, outer)
	err := <-setErr
	deadlocks := 0
	for _, e := range []error{nestedErr, err} {
		if errors.Is(e, guard.ErrDeadlock) {
			deadlocks++
		} else if e != nil {
			t.Fatalf("unexpected error: %v", e)
		}
	}
	if deadlocks != 1 {
		t.Fatalf("nested: %v; set: %v; want exactly one ErrDeadlock", nestedErr, err)
	}
}
