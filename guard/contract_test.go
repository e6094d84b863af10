package guard_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestInvalidKeyEverywhere: an empty or too long key is ErrInvalidKey, never
// ErrInvalidConfig, whichever entry point it reaches and however it was given, and no
// Redis call is made for it.
func TestInvalidKeyEverywhere(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	counter := redistest.NewCounter()
	c.AddHook(counter)
	l := lockerOn(t, c, guard.MaxKeyLen(16))
	ctx := ctxTimeout(t, 5*time.Second)
	long := strings.Repeat("k", 17)
	fn := func(context.Context, transferReq) (receipt, error) { return receipt{}, nil }
	wrapped := func(opts ...guard.Option) func(context.Context, transferReq) (receipt, error) {
		w, err := guard.WrapE(fn, append([]guard.Option{guard.Use(l)}, opts...)...)
		if err != nil {
			t.Fatalf("WrapE: %v", err)
		}
		return w
	}
	do := func(key string) error {
		return guard.Do(ctx, func(context.Context) error { return nil }, guard.Use(l), guard.RawKey(key))
	}
	call := func(f func(context.Context, transferReq) (receipt, error), req transferReq) error {
		_, err := f(ctx, req)
		return err
	}
	_, wrapEmptyRaw := guard.WrapE(fn, guard.Use(l), guard.RawKey(""))
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"Acquire empty", second(l.Acquire(ctx, ""))},
		{"Acquire too long", second(l.Acquire(ctx, long))},
		{"TryAcquire empty", second(l.TryAcquire(ctx, ""))},
		{"TryAcquire too long", second(l.TryAcquire(ctx, long))},
		{"Do RawKey empty", do("")},
		{"Do RawKey too long", do(long)},
		{"WrapE RawKey empty", wrapEmptyRaw},
		{"Wrap RawKey too long", call(wrapped(guard.RawKey(long)), transferReq{})},
		{"Wrap template renders empty", call(wrapped(guard.Key("{req.From}")), transferReq{From: ""})},
		{"Wrap template renders too long", call(wrapped(guard.Key("{req.From}")), transferReq{From: long})},
		{"Wrap KeyFunc returns empty", call(wrapped(guard.KeyFunc(func(context.Context, transferReq) (string, error) { return "", nil })), transferReq{})},
		{"Wrap KeyFunc fails", call(wrapped(guard.KeyFunc(func(context.Context, transferReq) (string, error) { return "", errors.New("no tenant") })), transferReq{})},
	} {
		if !errors.Is(tc.err, guard.ErrInvalidKey) || errors.Is(tc.err, guard.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidKey and not ErrInvalidConfig", tc.name, tc.err)
		}
	}
	if n := counter.Calls("evalsha") + counter.Calls("eval"); n != 0 {
		t.Errorf("invalid keys made %d script calls, want none", n)
	}
	defer func() {
		if p, _ := recover().(error); !errors.Is(p, guard.ErrInvalidKey) {
			t.Errorf("Wrap(RawKey(\"\")) panicked with %v, want ErrInvalidKey", p)
		}
	}()
	guard.Wrap(fn, guard.Use(l), guard.RawKey(""))
}

func second[T any](_ T, err error) error { return err }

// TestSyncReplicasConfig: SyncReplicas' bad values fail in New, naming the option.
func TestSyncReplicasConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = c.Close() })
	for _, o := range []guard.Option{
		guard.SyncReplicas(-1, time.Second),
		guard.SyncReplicas(1, 0),
		guard.SyncReplicas(1, 30*time.Second), // not below TTL − drift margin
	} {
		var ce *guard.ConfigError
		if _, err := guard.New(c, o); !errors.As(err, &ce) || ce.Field != "SyncReplicas" {
			t.Errorf("New(%v) = %v, want a *ConfigError naming SyncReplicas", o, err)
		}
	}
}

// TestEntryPointDefaultWait: without a Retry option, the entry points that serve
// requests give up after DefaultMaxWait, Acquire waits until its context ends, and a
// Retry given to the call or to New wins.
func TestEntryPointDefaultWait(t *testing.T) {
	srv := redistest.Start(t)
	holder, c := newLocker(t, srv)
	for _, k := range []string{"busy-wrap", "busy-do", "busy-nr", "busy-att", "busy-acq"} {
		le := mustAcquire(t, holder, ctxTimeout(t, 5*time.Second), k)
		t.Cleanup(func() { _ = le.Release(context.Background()) })
	}
	l := lockerOn(t, c)
	failFast := lockerOn(t, c, guard.Retry(guard.NoRetry()))
	fn := func(context.Context, transferReq) (receipt, error) { return receipt{}, nil }
	bound := guard.DefaultMaxWait + 10*time.Second // generous: a hang fails the test

	// busyAfter runs call with a context that has no deadline and reports how the wait
	// ended and how long it took.
	busyAfter := func(t *testing.T, call func(ctx context.Context) error) (*guard.LockedError, time.Duration) {
		t.Helper()
		errc := make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		go func() { errc <- call(ctx) }()
		select {
		case err := <-errc:
			var le *guard.LockedError
			if !errors.As(err, &le) || le.Err != nil {
				t.Fatalf("got %v, want a *LockedError ended by the retry policy", err)
			}
			return le, time.Since(start)
		case <-time.After(bound):
			t.Fatalf("still waiting after %s: the default wait is unbounded", bound)
		}
		return nil, 0
	}
	t.Run("Wrap", func(t *testing.T) {
		t.Parallel()
		w := guard.Wrap(fn, guard.Use(l), guard.RawKey("busy-wrap"))
		le, took := busyAfter(t, func(ctx context.Context) error { _, err := w(ctx, transferReq{}); return err })
		if le.Attempts < 2 || took < guard.DefaultMaxWait {
			t.Fatalf("gave up after %d attempts in %s, want a wait of DefaultMaxWait (%s)", le.Attempts, took, guard.DefaultMaxWait)
		}
	})
	t.Run("Do", func(t *testing.T) {
		t.Parallel()
		le, took := busyAfter(t, func(ctx context.Context) error {
			return guard.Do(ctx, func(context.Context) error { return nil }, guard.Use(l), guard.RawKey("busy-do"))
		})
		if le.Attempts < 2 || took < guard.DefaultMaxWait {
			t.Fatalf("gave up after %d attempts in %s, want a wait of DefaultMaxWait (%s)", le.Attempts, took, guard.DefaultMaxWait)
		}
	})
	t.Run("Wrap with the Locker's Retry", func(t *testing.T) {
		t.Parallel()
		w := guard.Wrap(fn, guard.Use(failFast), guard.RawKey("busy-nr"))
		if le, _ := busyAfter(t, func(ctx context.Context) error { _, err := w(ctx, transferReq{}); return err }); le.Attempts != 1 {
			t.Fatalf("made %d attempts, want the Locker's NoRetry", le.Attempts)
		}
	})
	t.Run("Wrap with its own Retry", func(t *testing.T) {
		t.Parallel()
		w := guard.Wrap(fn, guard.Use(l), guard.RawKey("busy-att"), guard.Retry(guard.Attempts(2, guard.Fixed(time.Millisecond, 0))))
		if le, _ := busyAfter(t, func(ctx context.Context) error { _, err := w(ctx, transferReq{}); return err }); le.Attempts != 2 {
			t.Fatalf("made %d attempts, want Attempts(2)", le.Attempts)
		}
	})
	t.Run("Acquire waits until ctx ends", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), guard.DefaultMaxWait+time.Second)
		defer cancel()
		_, err := l.Acquire(ctx, "busy-acq")
		var le *guard.LockedError
		if !errors.As(err, &le) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v, want a *LockedError ended by ctx's deadline, past DefaultMaxWait", err)
		}
	})
}

// acquireLua is the exclusive lock's acquire script as it is sent: linked with the
// fragments' functions it calls.
var acquireLua = script.Acquire.Body()

// scriptCounter counts the calls of one Lua script a client makes, in either of its
// forms: with the "#!lua" line that Redis 7 is sent, or without it.
type scriptCounter struct {
	forms map[any]bool // SHA1s and sources
	n     atomic.Int64
}

// newScriptCounter counts the calls of src, a script without flags.
func newScriptCounter(src string) *scriptCounter {
	s := &scriptCounter{forms: map[any]bool{}}
	for _, form := range []string{src, "#!lua\n" + src} {
		sum := sha1.Sum([]byte(form))
		s.forms[hex.EncodeToString(sum[:])], s.forms[form] = true, true
	}
	return s
}

func (s *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.count(cmd)
		return next(ctx, cmd)
	}
}

func (s *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			s.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (s *scriptCounter) count(cmd redis.Cmder) {
	if args := cmd.Args(); len(args) > 1 && s.forms[args[1]] {
		s.n.Add(1)
	}
}

// TestLateGrantCountsAsAttempt: a grant whose reply arrives after the lease's validity
// is undone, and counts as an attempt: TryAcquire makes exactly one and Attempts(n) at
// most n, and the call fails with ErrUnavailable rather than looping.
func TestLateGrantCountsAsAttempt(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	acquires := newScriptCounter(acquireLua)
	c.AddHook(acquires)
	const ttl = 100 * time.Millisecond
	l := lockerOn(t, c, guard.TTL(ttl))
	// Load the scripts first, then make every reply come after the validity of the grant
	// it carries.
	mustRelease(t, mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "warm-up"))
	proxy.SetLatency(2 * ttl)
	for _, tc := range []struct {
		name string
		max  int64
		call func(ctx context.Context) error
	}{
		{"TryAcquire", 1, func(ctx context.Context) error { return second(l.TryAcquire(ctx, "late")) }},
		{"Attempts(3)", 3, func(ctx context.Context) error {
			return second(l.Acquire(ctx, "late", guard.Retry(guard.Attempts(3, guard.Fixed(time.Millisecond, 0)))))
		}},
		{"MaxWait", 0, func(ctx context.Context) error {
			return second(l.Acquire(ctx, "late", guard.Retry(guard.MaxWait(ttl, guard.Fixed(time.Millisecond, 0)))))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acquires.n.Store(0)
			ctx := ctxTimeout(t, 10*time.Second)
			err := tc.call(ctx)
			n := acquires.n.Load()
			if !errors.Is(err, guard.ErrUnavailable) || ctx.Err() != nil {
				t.Fatalf("got %v after %d attempts, want ErrUnavailable from the policy, not the context", err, n)
			}
			if tc.max > 0 && n > tc.max || n < 1 {
				t.Fatalf("made %d attempts, want 1..%d", n, tc.max)
			}
			if tc.max == 0 && n > 3 { // MaxWait(ttl) with 2·ttl per attempt: one, maybe two
				t.Fatalf("made %d attempts within MaxWait(%s) at %s per reply", n, ttl, 2*ttl)
			}
		})
	}
	proxy.SetLatency(0)
	// The undone grants left nothing behind.
	le, err := l.TryAcquire(ctxTimeout(t, 5*time.Second), "late")
	if err != nil {
		t.Fatalf("the lock is not free after undone grants: %v", err)
	}
	mustRelease(t, le)
}

// TestReleaseReplyLostWakes: when the reply of a release that freed the lock is lost,
// this process's waiters are woken all the same, not left to sleep until their backoff.
func TestReleaseReplyLostWakes(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	l := lockerOn(t, c)
	ctx := ctxTimeout(t, 20*time.Second)
	warmUp(t, l, srv.Client(t), ctx) // the scripts are loaded: one reply per call
	holder := mustAcquire(t, l, ctx, "lost-reply")

	const backoff = 30 * time.Second // far beyond the test: only a wake-up can end the wait
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		le, err := l.Acquire(wctx, "lost-reply", guard.Retry(guard.MaxWait(-1, guard.Fixed(backoff, 0))))
		if err == nil {
			err = le.Release(context.Background())
		}
		got <- err
	}()
	// The waiter has queued this Locker in Redis: the release will find it first.
	direct := srv.Client(t)
	waitUntil(t, 5*time.Second, "the waiter to queue and subscribe", func() bool {
		n, _ := direct.LLen(context.Background(), lockName("lost-reply")+":queue").Result()
		subs, _ := direct.PubSubNumSub(context.Background(), lockName("lost-reply")+":release").Result()
		return n == 1 && subs[lockName("lost-reply")+":release"] == 1
	})
	time.Sleep(50 * time.Millisecond) // the subscription's confirmation is read
	proxy.DropNextReply()
	if err := holder.Release(context.Background()); !errors.Is(err, guard.ErrUnavailable) {
		t.Fatalf("release with its reply dropped = %v, want ErrUnavailable", err)
	}
	if lockHolder(t, direct, lockName("lost-reply")) != "" {
		t.Fatal("the release did not run: the dropped reply was not the script's")
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter was not woken by a release whose reply was lost: %v", err)
	}
}

// TestCloseDuringSameOwnerAcquisitions runs Close while goroutines of one owner
// acquire, reenter, read and release the same keys, for the race detector: every field
// of a hold is touched under the mutex that guards it.
func TestCloseDuringSameOwnerAcquisitions(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	for round := 0; round < 5; round++ {
		l, err := guard.New(c, guard.TTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxid.NewContext(ctxTimeout(t, 5*time.Second), ctxid.New())
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					key := []string{"a", "b"}[(g+i)%2]
					le, err := l.Acquire(ctx, key, guard.Retry(guard.MaxWait(100*time.Millisecond, nil)))
					if err != nil {
						if !errors.Is(err, guard.ErrClosed) && !errors.Is(err, guard.ErrLocked) {
							t.Errorf("Acquire: %v", err)
						}
						return
					}
					_ = le.ValidUntil()
					_ = le.Err()
					_ = le.Release(context.Background())
				}
			}()
		}
		time.Sleep(time.Duration(round) * 5 * time.Millisecond)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}
