package guard_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// quorumRig is n independent servers and the clients of a quorum Locker's process.
type quorumRig struct {
	servers []*redistest.Server
	proxies []*redistest.Proxy // one per server when made with proxies, else nil
}

func startQuorum(t *testing.T, n int, proxies bool) *quorumRig {
	t.Helper()
	r := &quorumRig{servers: redistest.StartN(t, n)}
	if proxies {
		for _, s := range r.servers {
			r.proxies = append(r.proxies, redistest.NewProxy(t, s.Addr()))
		}
	}
	return r
}

// clients returns one new client per server (through its proxy, when there are proxies).
func (r *quorumRig) clients(t *testing.T) []redis.UniversalClient {
	t.Helper()
	var cs []redis.UniversalClient
	for i, s := range r.servers {
		addr := s.Addr()
		if r.proxies != nil {
			addr = r.proxies[i].Addr()
		}
		c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Second, WriteTimeout: time.Second, DialTimeout: time.Second, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// locker returns a quorum Locker of its own process (own clients), closed at cleanup.
func (r *quorumRig) locker(t *testing.T, opts ...guard.Option) *guard.Locker {
	t.Helper()
	l, err := guard.NewQuorum(r.clients(t), opts...)
	if err != nil {
		t.Fatalf("NewQuorum: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// holders returns how many servers hold key's lock.
func (r *quorumRig) holders(t *testing.T, key string) int {
	t.Helper()
	n := 0
	for _, s := range r.servers {
		c := s.Client(t)
		if c.Exists(context.Background(), lockName(key)).Val() == 1 {
			n++
		}
		_ = c.Close()
	}
	return n
}

func TestQuorumBasics(t *testing.T) {
	r := startQuorum(t, 3, false)
	a := r.locker(t, guard.RestartDelay(0), guard.TTL(2*time.Second))
	b := r.locker(t, guard.RestartDelay(0), guard.TTL(2*time.Second))
	ctx := ctxTimeout(t, 20*time.Second)

	le := mustAcquire(t, a, ctx, "basics")
	if got := r.holders(t, "basics"); got != 3 {
		t.Fatalf("lock held on %d servers, want 3", got)
	}
	// Every server carries the lease's token after the write-back (a server that
	// answered after the majority is told it just after).
	for _, s := range r.servers {
		c := s.Client(t)
		waitUntil(t, 2*time.Second, "the lease's token on "+s.String(), func() bool {
			tok, err := c.HGet(ctx, lockName("basics"), "#t").Int64()
			return err == nil && tok == le.Token()
		})
		_ = c.Close()
	}
	if _, err := b.TryAcquire(ctx, "basics"); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("TryAcquire of a held lock: %v, want ErrLocked", err)
	}
	// Reentry through Redis (another Locker, same owner) gets the same token.
	inner := mustAcquire(t, b, le.Context(), "basics")
	if inner.Token() != le.Token() {
		t.Fatalf("reentry token %d, want %d", inner.Token(), le.Token())
	}
	mustRelease(t, inner)

	// A waiter is woken by the release.
	got := make(chan *guard.Lease, 1)
	go func() {
		w, err := b.Acquire(ctx, "basics", guard.Retry(guard.UntilCanceled(guard.Fixed(10*time.Second, 10*time.Second))))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- w
	}()
	time.Sleep(200 * time.Millisecond)
	released := time.Now()
	mustRelease(t, le)
	w := <-got
	if w == nil {
		return
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Fatalf("waiter woke %s after the release, want a notification, not its 10s backoff", d)
	}
	if w.Token() <= le.Token() {
		t.Fatalf("next token %d not above %d", w.Token(), le.Token())
	}
	mustRelease(t, w)
	if got := r.holders(t, "basics"); got != 0 {
		t.Fatalf("lock left on %d servers after release", got)
	}
}

func TestQuorumConfig(t *testing.T) {
	r := startQuorum(t, 3, false)
	cs := r.clients(t)
	cases := []struct {
		name    string
		clients []redis.UniversalClient
		opts    []guard.Option
		field   string
	}{
		{"two servers", cs[:2], nil, "clients"},
		{"nil client", []redis.UniversalClient{cs[0], nil, cs[2]}, nil, "clients[1]"},
		{"same server twice", []redis.UniversalClient{cs[0], cs[1], r.clients(t)[0]}, nil, "clients[2]"},
		{"fair", cs, []guard.Option{guard.Fair()}, "Fair"},
		{"permits", cs, []guard.Option{guard.Permits(3)}, "Permits"},
		{"sync replicas", cs, []guard.Option{guard.SyncReplicas(1, time.Second)}, "SyncReplicas"},
		{"negative delay", cs, []guard.Option{guard.RestartDelay(-time.Second)}, "RestartDelay"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := guard.NewQuorum(c.clients, c.opts...)
			var ce *guard.ConfigError
			if !errors.As(err, &ce) || ce.Field != c.field {
				t.Fatalf("NewQuorum: %v, want a *ConfigError on %s", err, c.field)
			}
		})
	}
	t.Run("RestartDelay on New", func(t *testing.T) {
		_, err := guard.New(cs[0], guard.RestartDelay(time.Second))
		var ce *guard.ConfigError
		if !errors.As(err, &ce) || ce.Field != "RestartDelay" {
			t.Fatalf("New: %v, want a *ConfigError on RestartDelay", err)
		}
	})
	t.Run("per call", func(t *testing.T) {
		l := r.locker(t, guard.RestartDelay(0))
		_, err := l.Acquire(ctxTimeout(t, 5*time.Second), "k", guard.Fair())
		var ce *guard.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Fair" {
			t.Fatalf("Acquire with Fair: %v, want a *ConfigError on Fair", err)
		}
	})
}

// quorumSweep runs goroutines on lockers taking key in turn, with a non-atomic
// read-modify-write of a counter kept in process, and reports the intervals held.
func quorumSweep(t *testing.T, lockers []*guard.Locker, key string, perLocker, rounds int, during func()) []interval {
	t.Helper()
	ctx := ctxTimeout(t, 90*time.Second)
	var (
		mu        sync.Mutex
		intervals []interval
		wg        sync.WaitGroup
		count     int
	)
	stop := make(chan struct{})
	if during != nil {
		go func() {
			during()
			close(stop)
		}()
	} else {
		close(stop)
	}
	for _, l := range lockers {
		for range perLocker {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					le, err := l.Acquire(ctx, key)
					if err != nil {
						if errors.Is(err, guard.ErrUnavailable) {
							time.Sleep(20 * time.Millisecond)
							continue
						}
						t.Errorf("Acquire: %v", err)
						return
					}
					enter := time.Now()
					mu.Lock()
					n := count
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
					mu.Lock()
					count = n + 1
					mu.Unlock()
					exit := time.Now()
					lost := le.Err() != nil
					_ = le.Release(context.Background())
					if !lost {
						mu.Lock()
						intervals = append(intervals, interval{enter: enter, exit: exit, token: le.Token()})
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	<-stop
	return intervals
}

// checkIntervals fails the test when two holds overlap or tokens do not rise in the
// order the holds began.
func checkIntervals(t *testing.T, iv []interval) {
	t.Helper()
	sort.Slice(iv, func(i, j int) bool { return iv[i].enter.Before(iv[j].enter) })
	for i := 1; i < len(iv); i++ {
		if iv[i].enter.Before(iv[i-1].exit) {
			t.Errorf("holds overlap: %v–%v and %v–%v", iv[i-1].enter, iv[i-1].exit, iv[i].enter, iv[i].exit)
		}
		if iv[i].token <= iv[i-1].token {
			t.Errorf("token %d after %d: not rising", iv[i].token, iv[i-1].token)
		}
	}
}

var _ = ctxid.New
