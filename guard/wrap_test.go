package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/keyfunc"
)

type transferReq struct {
	From   string `json:"from_account"`
	To     string
	Amount int64
	Payer  *payer
}

type payer struct{ Tenant string }

type receipt struct {
	Token int64
	Key   string
}

// fastRetry waits for a busy lock without long backoff sleeps.
var fastRetry = guard.Retry(guard.MaxWait(-1, guard.Fixed(10*time.Millisecond, 10*time.Millisecond)))

// intervalLog records the critical sections of a service method.
type intervalLog struct {
	mu     sync.Mutex
	spans  []interval
	inside atomic.Int32
	max    atomic.Int32
}

// transfer returns a service method that logs its critical section, which lasts hold.
func (lg *intervalLog) transfer(hold time.Duration) func(context.Context, transferReq) (receipt, error) {
	return func(ctx context.Context, req transferReq) (receipt, error) {
		n := lg.inside.Add(1)
		for m := lg.max.Load(); n > m && !lg.max.CompareAndSwap(m, n); m = lg.max.Load() {
		}
		enter := time.Now()
		time.Sleep(hold)
		exit := time.Now()
		lg.inside.Add(-1)
		tok, _ := tokenIn(ctx)
		lg.mu.Lock()
		lg.spans = append(lg.spans, interval{enter, exit, tok})
		lg.mu.Unlock()
		return receipt{Token: tok}, ctx.Err()
	}
}

// TestWrapSerializesSameKey: concurrent calls of methods wrapped on two Lockers (two
// processes) with the same key never overlap, and their tokens rise in lock order.
func TestWrapSerializesSameKey(t *testing.T) {
	srv := redistest.Start(t)
	a, _ := newLocker(t, srv)
	b, _ := newLocker(t, srv)
	var lg intervalLog
	calls := []func(context.Context, transferReq) (receipt, error){
		guard.Wrap(lg.transfer(2*time.Millisecond), guard.Use(a), guard.Key("account:{req.From}"), fastRetry),
		guard.Wrap(lg.transfer(2*time.Millisecond), guard.Use(b), guard.Key("account:{req.From}"), fastRetry),
	}
	ctx := ctxTimeout(t, 30*time.Second)
	const perLocker, rounds = 8, 4
	var wg sync.WaitGroup
	for i := range 2 * perLocker {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				req := transferReq{From: "acct-1", To: fmt.Sprintf("acct-%d-%d", i, r)}
				if _, err := calls[i%2](ctx, req); err != nil {
					t.Errorf("transfer: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(lg.spans) != 2*perLocker*rounds || lg.max.Load() != 1 {
		t.Fatalf("%d calls, at most %d inside at once; want %d and 1", len(lg.spans), lg.max.Load(), 2*perLocker*rounds)
	}
	sort.Slice(lg.spans, func(i, j int) bool { return lg.spans[i].enter.Before(lg.spans[j].enter) })
	for i := 1; i < len(lg.spans); i++ {
		p, c := lg.spans[i-1], lg.spans[i]
		if c.enter.Before(p.exit) || c.token <= p.token {
			t.Fatalf("calls %d and %d: [%v, %v] token %d then [%v, %v] token %d", i-1, i,
				p.enter.Format(time.StampMicro), p.exit.Format(time.StampMicro), p.token,
				c.enter.Format(time.StampMicro), c.exit.Format(time.StampMicro), c.token)
		}
	}
}

// TestWrapParallelDifferentKeys: two calls with different keys are inside at the same
// time. Each waits inside for the other to arrive, so serializing them would time out.
func TestWrapParallelDifferentKeys(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	var arrived sync.WaitGroup
	arrived.Add(2)
	var lg intervalLog
	record := lg.transfer(0)
	transfer := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		arrived.Done()
		if !waitGroupWithin(&arrived, 5*time.Second) {
			return receipt{}, errors.New("the other call never got in")
		}
		return record(ctx, req)
	}, guard.Use(l), guard.Key("account:{req.From}"), fastRetry)
	ctx := ctxTimeout(t, 10*time.Second)
	errs := make(chan error, 2)
	for _, from := range []string{"acct-1", "acct-2"} {
		go func() {
			_, err := transfer(ctx, transferReq{From: from})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if lg.spans[0].token == lg.spans[1].token {
		t.Fatal("two keys share a fencing token")
	}
}

func waitGroupWithin(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestWrapNestedReentry: Wrap → Wrap on the same key with fn's context completes with no
// Redis round trip and the same token; the same nesting with a different owner (what a
// lock without reentrancy would see) stays blocked until its deadline.
func TestWrapNestedReentry(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(t, c)
	other, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	warmUp(t, l, c, ctx) // the force listening is open before round trips are counted

	var innerTok int64
	debit := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		innerTok, _ = tokenIn(ctx)
		le, _ := guard.LeaseFromContext(ctx)
		if !le.Reentrant() {
			return receipt{}, errors.New("inner lease not reentrant")
		}
		return receipt{Token: innerTok}, nil
	}, guard.Use(l), guard.Key("account:{req.From}"))
	credit := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		if _, err := other.TryAcquire(context.Background(), "account:"+req.To); !errors.Is(err, guard.ErrLocked) {
			return receipt{}, fmt.Errorf("second key not held inside the nested call: %v", err)
		}
		return receipt{}, nil
	}, guard.Use(l), guard.Key("account:{req.To}"))

	var outerTok int64
	var nestedTrips int64
	transfer := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		outerTok, _ = tokenIn(ctx)
		counter.Reset()
		if _, err := debit(ctx, req); err != nil {
			return receipt{}, err
		}
		nestedTrips = counter.RoundTrips()

		// Without reentrancy the nested call is just another owner: it blocks.
		forked, _ := ctxid.Fork(ctx)
		forked, cancel := context.WithTimeout(forked, 200*time.Millisecond)
		defer cancel()
		if _, err := debit(forked, req); !errors.Is(err, guard.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
			return receipt{}, fmt.Errorf("nested call by another owner = %v, want ErrLocked after its deadline", err)
		}
		return credit(ctx, req)
	}, guard.Use(l), guard.Key("account:{req.From}"), fastRetry)

	done := make(chan error, 1)
	go func() {
		_, err := transfer(ctx, transferReq{From: "acct-1", To: "acct-2"})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nested guarded call on the same key deadlocked")
	}
	if nestedTrips != 0 {
		t.Fatalf("nested reentrant call made %d round trips, want 0", nestedTrips)
	}
	if outerTok <= 0 || innerTok != outerTok {
		t.Fatalf("tokens: outer %d, inner %d; want equal and > 0", outerTok, innerTok)
	}
	for _, k := range []string{"account:acct-1", "account:acct-2"} {
		if lockHolder(t, c, lockName(k)) != "" {
			t.Fatalf("%s left in Redis", k)
		}
	}
}

func TestWrapFencingToken(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	transfer := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		tok, ok := tokenIn(ctx)
		le, _ := guard.LeaseFromContext(ctx)
		if !ok || le.Token() != tok || le.Key() != "account:"+req.From {
			return receipt{}, fmt.Errorf("token %d/%v, lease %v", tok, ok, le)
		}
		return receipt{Token: tok, Key: le.Key()}, nil
	}, guard.Use(l), guard.Key("account:{req.From}"))
	first, err := transfer(ctx, transferReq{From: "acct-1"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := transfer(ctx, transferReq{From: "acct-1"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Token <= 0 || second.Token <= first.Token {
		t.Fatalf("tokens %d then %d, want rising", first.Token, second.Token)
	}
}

// TestWrapPanicReleases: a panic in fn frees the lock and reaches the caller unchanged.
func TestWrapPanicReleases(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	other, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	var fnCtx context.Context
	boom := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		fnCtx = ctx
		panic("boom")
	}, guard.Use(l), guard.Key("account:{req.From}"))

	got := func() (v any) {
		defer func() { v = recover() }()
		_, _ = boom(ctx, transferReq{From: "acct-1"})
		return nil
	}()
	if got != "boom" {
		t.Fatalf("recovered %v, want the panic value \"boom\"", got)
	}
	if lockHolder(t, c, lockName("account:acct-1")) != "" {
		t.Fatal("lock left in Redis after a panic")
	}
	mustRelease(t, mustAcquire(t, other, ctx, "account:acct-1", guard.Retry(guard.NoRetry())))
	if fnCtx.Err() == nil {
		t.Fatal("fn's context still alive after the call")
	}
}

func TestWrapReleasesOnError(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	errFunds := errors.New("insufficient funds")
	transfer := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		return receipt{Key: "partial"}, errFunds
	}, guard.Use(l), guard.Key("account:{req.From}"))
	r, err := transfer(ctx, transferReq{From: "acct-1"})
	if err != errFunds || r.Key != "partial" {
		t.Fatalf("got %+v, %v; want fn's own result and error", r, err)
	}
	if lockHolder(t, c, lockName("account:acct-1")) != "" {
		t.Fatal("lock left in Redis after fn failed")
	}
}

// TestWrapLeaseLost: the lock is deleted while fn runs; fn's context ends with
// ErrLeaseLost and the call reports it, with fn's own error kept in the chain.
func TestWrapLeaseLost(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv, guard.TTL(time.Second))
	ctx := ctxTimeout(t, 10*time.Second)
	errAborted := errors.New("transfer aborted")
	for _, fnErr := range []error{nil, errAborted} {
		var cause error
		transfer := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
			c.Del(context.Background(), lockName("account:"+req.From))
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
			case <-time.After(5 * time.Second):
				return receipt{}, errors.New("fn's context not cancelled 5s after the lock was deleted")
			}
			return receipt{Key: "done"}, fnErr
		}, guard.Use(l), guard.Key("account:{req.From}"))

		r, err := transfer(ctx, transferReq{From: "acct-1"})
		var lost *guard.LeaseLostError
		if !errors.Is(cause, guard.ErrLeaseLost) {
			t.Fatalf("fn's context cause = %v, want ErrLeaseLost", cause)
		}
		if !errors.Is(err, guard.ErrLeaseLost) || !errors.As(err, &lost) || lost.Key != "account:acct-1" {
			t.Fatalf("fn error %v: call returned %v, want ErrLeaseLost", fnErr, err)
		}
		if fnErr != nil && !errors.Is(err, fnErr) {
			t.Fatalf("call returned %v, want fn's error %v in the chain", err, fnErr)
		}
		if r.Key != "done" {
			t.Fatalf("resp = %+v, want fn's", r)
		}
	}
}

// TestWrapExpiredAtRelease: a lock that vanishes from Redis during a call too short for
// any renewal to notice is reported as lost by the release.
func TestWrapExpiredAtRelease(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	transfer := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		return receipt{}, c.Del(ctx, lockName("account:"+req.From)).Err()
	}, guard.Use(l), guard.Key("account:{req.From}"))
	_, err := transfer(ctx, transferReq{From: "acct-1"})
	var lost *guard.LeaseLostError
	if !errors.As(err, &lost) || errors.Is(err, guard.ErrExpired) {
		t.Fatalf("call returned %v, want a *LeaseLostError only", err)
	}
}

func TestWrapBusy(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	other, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	holder := mustAcquire(t, other, ctx, "account:acct-1")
	defer mustRelease(t, holder)
	called := false
	fn := func(context.Context, transferReq) (receipt, error) { called = true; return receipt{}, nil }
	req := transferReq{From: "acct-1"}

	_, err := guard.Wrap(fn, guard.Use(l), guard.Key("account:{req.From}"), guard.Retry(guard.NoRetry()))(ctx, req)
	var locked *guard.LockedError
	if !errors.As(err, &locked) || locked.RetryAfter <= 0 || locked.Key != "account:acct-1" || locked.Err != nil {
		t.Fatalf("fail fast: %v (%+v), want a *LockedError with RetryAfter", err, locked)
	}

	_, err = guard.Wrap(fn, guard.Use(l), guard.Key("account:{req.From}"),
		guard.Retry(guard.MaxWait(50*time.Millisecond, guard.Fixed(10*time.Millisecond, 0))))(ctx, req)
	if !errors.As(err, &locked) || locked.Attempts < 2 {
		t.Fatalf("bounded wait: %v, want a *LockedError after several attempts", err)
	}

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = guard.Wrap(fn, guard.Use(l), guard.Key("account:{req.From}"))(short, req)
	if !errors.Is(err, guard.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait until the deadline: %v, want ErrLocked wrapping DeadlineExceeded", err)
	}
	if called {
		t.Fatal("fn ran without the lock")
	}
}

func TestWrapSkipIf(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(t, c)
	ctx := ctxTimeout(t, 5*time.Second)
	transfer := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		_, locked := guard.LeaseFromContext(ctx)
		return receipt{Key: fmt.Sprint(locked)}, nil
	}, guard.Use(l), guard.Key("account:{req.From}"),
		guard.SkipIf(func(_ context.Context, req transferReq) bool { return req.Amount == 0 }))

	r, err := transfer(ctx, transferReq{From: "acct-1"})
	if err != nil || r.Key != "false" || counter.RoundTrips() != 0 {
		t.Fatalf("skipped call: %+v, %v, %d round trips; want no lock and none", r, err, counter.RoundTrips())
	}
	if r, err = transfer(ctx, transferReq{From: "acct-1", Amount: 5}); err != nil || r.Key != "true" {
		t.Fatalf("guarded call: %+v, %v; want it locked", r, err)
	}
}

// TestWrapMinHold: the call returns at once; the lock stays held until acquisition +
// MinHold, then is released in the background, leaving no goroutine behind.
func TestWrapMinHold(t *testing.T) {
	srv := redistest.Start(t)
	// A short TTL makes the watchdog, idle after the release, end soon.
	l, c := newLocker(t, srv, guard.TTL(300*time.Millisecond))
	other, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	warm := mustAcquire(t, l, ctx, "warm-up")
	waitForceListening(t, c) // the Locker's listening goroutines exist before the snapshot
	mustRelease(t, warm)
	before := goleak.IgnoreCurrent()

	const minHold = 300 * time.Millisecond
	var acquired time.Time
	job := guard.Wrap(func(ctx context.Context, _ struct{}) (struct{}, error) {
		acquired = time.Now()
		return struct{}{}, nil
	}, guard.Use(l), guard.Key("job:report"), guard.MinHold(minHold))
	if _, err := job(ctx, struct{}{}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx, "job:report"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("right after the call: %v, want the lock still held", err)
	}
	waitUntil(t, 3*time.Second, "the min-hold release", func() bool {
		return lockHolder(t, c, lockName("job:report")) == ""
	})
	if held := time.Since(acquired); held < minHold {
		t.Fatalf("lock released %s after acquisition, before MinHold %s", held, minHold)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines left after the min-hold release: %v", err)
	}

	// Close releases a pending min-hold lock at once, and waits for that release.
	hourly := guard.Wrap(func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil },
		guard.Use(l), guard.Key("job:hourly"), guard.MinHold(time.Hour))
	if _, err := hourly(ctx, struct{}{}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for MinHold instead of releasing at once")
	}
	if lockHolder(t, c, lockName("job:hourly")) != "" {
		t.Fatal("min-hold lock left in Redis after Close")
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("goroutines left after Close: %v", err)
	}
}

func TestWrapRenderErrors(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	called := false
	transfer := guard.Wrap(func(context.Context, transferReq) (receipt, error) {
		called = true
		return receipt{}, nil
	}, guard.Use(l), guard.Key("tenant:{req.Payer.Tenant}:account:{req.From}"))
	for _, tc := range []struct {
		req  transferReq
		want error
	}{
		{transferReq{From: "acct-1"}, keyfunc.ErrMissing},
		{transferReq{Payer: &payer{Tenant: "acme"}}, keyfunc.ErrEmpty},
	} {
		_, err := transfer(ctx, tc.req)
		var re *keyfunc.RenderError
		if !errors.Is(err, guard.ErrInvalidKey) || !errors.Is(err, tc.want) || !errors.As(err, &re) {
			t.Fatalf("%+v: %v, want ErrInvalidKey and %v", tc.req, err, tc.want)
		}
	}
	errNoUser := errors.New("no user")
	byUser := guard.Wrap(func(context.Context, transferReq) (receipt, error) { called = true; return receipt{}, nil },
		guard.Use(l), guard.KeyFunc(func(context.Context, transferReq) (string, error) { return "", errNoUser }))
	if _, err := byUser(ctx, transferReq{}); !errors.Is(err, guard.ErrInvalidKey) || !errors.Is(err, errNoUser) {
		t.Fatalf("KeyFunc error: %v", err)
	}
	if called {
		t.Fatal("fn ran without a key")
	}
}

func TestWrapKeyFunc(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	transfer := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		le, _ := guard.LeaseFromContext(ctx)
		return receipt{Key: le.Key()}, nil
	}, guard.Use(l), guard.KeyFunc(func(_ context.Context, req transferReq) (string, error) {
		return fmt.Sprintf("pair:%s:%s", min(req.From, req.To), max(req.From, req.To)), nil
	}))
	r, err := transfer(ctx, transferReq{From: "b", To: "a"})
	if err != nil || r.Key != "pair:a:b" {
		t.Fatalf("got %+v, %v", r, err)
	}
}

func TestWrapConfigErrors(t *testing.T) {
	fn := func(context.Context, transferReq) (receipt, error) { return receipt{}, nil }
	key := guard.Key("account:{req.From}")
	for _, tc := range []struct {
		name  string
		opts  []guard.Option
		field string
		cause error // in the chain too, when set
	}{
		{"no key", nil, "Key", nil},
		{"empty template", []guard.Option{guard.Key("")}, "Key", keyfunc.ErrSyntax},
		{"malformed template", []guard.Option{guard.Key("account:{req.From")}, "Key", keyfunc.ErrSyntax},
		{"unknown field", []guard.Option{guard.Key("account:{req.Nope}")}, "Key", nil},
		{"unknown source", []guard.Option{guard.Key("account:{header.X}")}, "Key", keyfunc.ErrUnknownSource},
		{"bad TTL", []guard.Option{key, guard.TTL(0)}, "TTL", nil},
		{"bad retry", []guard.Option{key, guard.Retry(guard.MaxWait(0, nil))}, "Retry", nil},
		{"locker-only option", []guard.Option{key, guard.Prefix("app:")}, "Prefix", nil},
		{"negative MinHold", []guard.Option{key, guard.MinHold(-time.Second)}, "MinHold", nil},
		{"MinHold above MaxHold", []guard.Option{key, guard.MaxHold(time.Second), guard.MinHold(2 * time.Second)}, "MinHold", nil},
		{"KeyFunc for another request", []guard.Option{guard.KeyFunc(func(context.Context, int) (string, error) { return "", nil })}, "KeyFunc", nil},
		{"SkipIf for another request", []guard.Option{key, guard.SkipIf(func(context.Context, *transferReq) bool { return false })}, "SkipIf", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := guard.WrapE(fn, tc.opts...)
			var ce *guard.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, guard.ErrInvalidConfig) {
				t.Fatalf("WrapE = %v, want a *ConfigError for %s", err, tc.field)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Fatalf("WrapE = %v, want %v in the chain", err, tc.cause)
			}
			defer func() {
				if p := recover(); p == nil || p.(error).Error() != err.Error() {
					t.Fatalf("Wrap panicked with %v, want %v", p, err)
				}
			}()
			guard.Wrap(fn, tc.opts...)
		})
	}
	if _, err := guard.WrapE[transferReq, receipt](nil, key); !errors.Is(err, guard.ErrInvalidConfig) {
		t.Fatalf("WrapE(nil) = %v", err)
	}
	var bind *keyfunc.BindError
	if _, err := guard.WrapE(fn, guard.Key("account:{req.Nope}")); !errors.As(err, &bind) || bind.Placeholder != "req.Nope" {
		t.Fatalf("unknown field: %v, want the *keyfunc.BindError in the chain", err)
	}
}

// TestDecoratorOptionsElsewhere: decorator options are refused by New and Acquire.
func TestDecoratorOptionsElsewhere(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	var ce *guard.ConfigError
	if _, err := guard.New(c, guard.Key("k")); !errors.As(err, &ce) || ce.Field != "Key" {
		t.Fatalf("New(Key) = %v", err)
	}
	if _, err := l.Acquire(context.Background(), "k", guard.Use(l)); !errors.As(err, &ce) || ce.Field != "Use" {
		t.Fatalf("Acquire(Use) = %v", err)
	}
}

func TestWrapDefaultLocker(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	short, _ := newLocker(t, srv, guard.TTL(300*time.Millisecond))
	t.Cleanup(func() { guard.SetDefault(nil) })
	guard.SetDefault(nil)
	ctx := ctxTimeout(t, 5*time.Second)
	transfer := guard.Wrap(func(ctx context.Context, req transferReq) (receipt, error) {
		tok, _ := tokenIn(ctx)
		return receipt{Token: tok}, nil
	}, guard.Key("account:{req.From}"), guard.Renewal(time.Second, 0))

	var ce *guard.ConfigError
	if _, err := transfer(ctx, transferReq{From: "acct-1"}); !errors.As(err, &ce) || ce.Field != "Locker" {
		t.Fatalf("call with no Locker: %v, want a *ConfigError naming Locker", err)
	}
	guard.SetDefault(l)
	if r, err := transfer(ctx, transferReq{From: "acct-1"}); err != nil || r.Token <= 0 {
		t.Fatalf("call with the default Locker: %+v, %v", r, err)
	}
	// A renewal period of 1s does not fit the new default's TTL of 300ms.
	guard.SetDefault(short)
	if _, err := transfer(ctx, transferReq{From: "acct-1"}); !errors.As(err, &ce) || ce.Field != "Renewal" {
		t.Fatalf("call with an incompatible default: %v, want a *ConfigError naming Renewal", err)
	}
}

func TestDo(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	other, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)

	// A raw key is used as it is: braces included.
	err := guard.Do(ctx, func(ctx context.Context) error {
		le, ok := guard.LeaseFromContext(ctx)
		if !ok || le.Key() != "order:{42}" {
			return fmt.Errorf("lease %v", le)
		}
		if _, err := other.TryAcquire(context.Background(), "order:{42}"); !errors.Is(err, guard.ErrLocked) {
			return fmt.Errorf("lock not held inside Do: %v", err)
		}
		// Nested Do on the same key reenters.
		return guard.Do(ctx, func(inner context.Context) error {
			if tok, _ := tokenIn(inner); tok != le.Token() {
				return fmt.Errorf("nested token %d, want %d", tok, le.Token())
			}
			return nil
		}, guard.Use(l), guard.RawKey("order:{42}"), guard.Retry(guard.NoRetry()))
	}, guard.Use(l), guard.RawKey("order:{42}"))
	if err != nil {
		t.Fatal(err)
	}
	if lockHolder(t, c, "guard:{order:%7B42%7D}") != "" {
		t.Fatal("lock left in Redis after Do")
	}

	errJob := errors.New("job failed")
	if err := guard.Do(ctx, func(context.Context) error { return errJob }, guard.Use(l), guard.Key("report:{{daily}}")); err != errJob {
		t.Fatalf("Do = %v, want fn's error", err)
	}

	var ce *guard.ConfigError
	for _, tc := range []struct {
		opts  []guard.Option
		field string
	}{
		{[]guard.Option{guard.Use(l)}, "Key"},
		{[]guard.Option{guard.Use(l), guard.Key("order:{req.ID}")}, "Key"},
		{[]guard.Option{guard.Use(l), guard.KeyFunc(func(context.Context, string) (string, error) { return "k", nil })}, "KeyFunc"},
		{[]guard.Option{guard.Use(l), guard.Key("k"), guard.SkipIf(func(context.Context, string) bool { return true })}, "SkipIf"},
		{[]guard.Option{guard.Use(l), guard.Key("k"), guard.TTL(-1)}, "TTL"},
	} {
		if err := guard.Do(ctx, func(context.Context) error { return nil }, tc.opts...); !errors.As(err, &ce) || ce.Field != tc.field {
			t.Fatalf("Do: %v, want a *ConfigError naming %s", err, tc.field)
		}
	}
}
