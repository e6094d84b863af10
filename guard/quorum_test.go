package guard_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
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
		if lockHolder(t, c, lockName(key)) != "" {
			n++
		}
		_ = c.Close()
	}
	return n
}

// holdersOn returns how many of the servers numbered idx hold key's lock.
func (r *quorumRig) holdersOn(t *testing.T, key string, idx ...int) int {
	t.Helper()
	n := 0
	for _, i := range idx {
		c := r.servers[i].Client(t)
		if lockHolder(t, c, lockName(key)) != "" {
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
	// Acquire returns on the majority's grants; the last server's comes when it comes.
	waitUntil(t, 2*time.Second, "the lock held on all 3 servers", func() bool { return r.holders(t, "basics") == 3 })
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
		w, err := b.Acquire(ctx, "basics", guard.Retry(guard.MaxWait(-1, guard.Fixed(10*time.Second, 10*time.Second))))
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
	// Release returns on the majority's answers and goes on to the last server.
	waitUntil(t, 2*time.Second, "the lock released on every server", func() bool { return r.holders(t, "basics") == 0 })
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
		{"zero reply budget", cs, []guard.Option{guard.ReplyBudget(0)}, "ReplyBudget"},
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
	for field, opt := range map[string]guard.Option{"RestartDelay": guard.RestartDelay(time.Second), "ReplyBudget": guard.ReplyBudget(time.Second)} {
		t.Run(field+" on New", func(t *testing.T) {
			_, err := guard.New(cs[0], opt)
			var ce *guard.ConfigError
			if !errors.As(err, &ce) || ce.Field != field {
				t.Fatalf("New: %v, want a *ConfigError on %s", err, field)
			}
		})
	}
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

// TestQuorumExclusionUnderFaults runs 3 Lockers taking one key in turn on 3 and on 5
// servers while a minority of the servers (1 of 3, 2 of 5) is killed, paused for longer
// than the TTL, restarted empty, or reached through a slow proxy: no two holds overlap
// and tokens rise in the order the holds began.
func TestQuorumExclusionUnderFaults(t *testing.T) {
	faults := []struct {
		name    string
		proxies bool
		apply   func(t *testing.T, r *quorumRig, victims []int)
	}{
		{"killed", false, func(t *testing.T, r *quorumRig, victims []int) {
			for _, v := range victims {
				r.servers[v].Kill(t)
			}
			time.Sleep(time.Second)
		}},
		{"paused", false, func(t *testing.T, r *quorumRig, victims []int) {
			for _, v := range victims {
				r.servers[v].Pause(t)
			}
			time.Sleep(1500 * time.Millisecond) // beyond the TTL
			for _, v := range victims {
				r.servers[v].Resume(t)
			}
		}},
		{"restarted empty", false, func(t *testing.T, r *quorumRig, victims []int) {
			for _, v := range victims {
				r.servers[v].Restart(t)
			}
			time.Sleep(1500 * time.Millisecond)
		}},
		{"slow proxy", true, func(t *testing.T, r *quorumRig, victims []int) {
			for _, v := range victims {
				r.proxies[v].SetLatency(40 * time.Millisecond)
			}
			time.Sleep(time.Second)
			for _, v := range victims {
				r.proxies[v].SetLatency(0)
			}
		}},
	}
	for _, n := range []int{3, 5} {
		for _, f := range faults {
			t.Run(f.name+"/"+strconv.Itoa(n), func(t *testing.T) {
				r := startQuorum(t, n, f.proxies)
				var victims []int
				for i := range (n - 1) / 2 {
					victims = append(victims, i)
				}
				var lockers []*guard.Locker
				for range 3 {
					lockers = append(lockers, r.locker(t, guard.TTL(time.Second), guard.RestartDelay(time.Second),
						guard.Retry(guard.MaxWait(-1, guard.Fixed(20*time.Millisecond, 50*time.Millisecond)))))
				}
				// The servers have just started: they grant once up for the restart delay.
				iv := quorumSweep(t, lockers, "faults", 3, 15, func() {
					time.Sleep(1500 * time.Millisecond)
					f.apply(t, r, victims)
				})
				if len(iv) < 60 {
					t.Errorf("only %d holds completed", len(iv))
				}
				checkIntervals(t, iv)
			})
		}
	}
}

// holdOn makes a plain Locker on one server hold key there for another owner, as a
// quorum Locker's hold on that server looks; it returns the lease.
func holdOn(t *testing.T, srv *redistest.Server, key string) *guard.Lease {
	t.Helper()
	l, _ := newLocker(t, srv, guard.TTL(5*time.Second))
	return mustAcquire(t, l, ctxTimeout(t, 5*time.Second), key)
}

// TestQuorumRestartedEmpty shows what RestartDelay guards against, both ways. A holds
// the lock on servers 0 and 1 of 3 (another owner held it on server 2 when A acquired
// it, and has released it since); 0 restarts empty; B asks. Without the check, 0 (which
// forgot A) and 2 grant B the lock A holds. With it, 0 grants nothing until it has been
// up for the delay, and B is refused.
func TestQuorumRestartedEmpty(t *testing.T) {
	for _, check := range []bool{false, true} {
		name := "unchecked"
		if check {
			name = "checked"
		}
		t.Run(name, func(t *testing.T) {
			r := startQuorum(t, 3, false)
			delay := guard.RestartDelay(0)
			if check {
				delay = guard.RestartDelay(3 * time.Second)
			}
			// Without the check, TTL 30s: A's first renewal comes 10 s after its grant, after
			// B's attempt below however long the restart takes on a loaded machine; a renewal
			// before it would take A's hold back on the restarted server (see
			// TestQuorumRepair), and B would be refused. With the check, TTL 3s: a fresh
			// server waits for the longer of RestartDelay and the TTL before its first grant,
			// and B is refused whether or not a renewal came first.
			ttl := guard.TTL(30 * time.Second)
			if check {
				ttl = guard.TTL(3 * time.Second)
			}
			a := r.locker(t, ttl, delay)
			b := r.locker(t, ttl, delay)
			ctx := ctxTimeout(t, 30*time.Second)

			foreign := holdOn(t, r.servers[2], "restart")
			// Fresh servers: with the check, the first grant waits until they have been up
			// for the delay.
			le := mustAcquire(t, a, ctx, "restart")
			// A's attempt won on servers 0 and 1; wait until server 2 has answered it busy
			// (which marks the lock waited for, #w) before the foreign hold ends there: on a
			// loaded machine the call could reach server 2 after that, find the lock free,
			// and join A's hold, which B could then not outvote.
			waitUntil(t, 5*time.Second, "A's attempt answered busy on server 2", func() bool {
				return r.servers[2].Client(t).HExists(ctx, lockName("restart"), "#w").Val()
			})
			mustRelease(t, foreign)
			r.servers[0].Restart(t)

			lb, err := b.TryAcquire(ctx, "restart")
			if !check {
				if err != nil {
					t.Fatalf("without the check, B was refused (%v): this test no longer shows the double grant it guards against", err)
				}
				if le.Err() != nil {
					t.Fatalf("A's lease ended: %v", le.Err())
				}
				t.Logf("without RestartDelay: A (token %d) and B (token %d) hold the lock at once", le.Token(), lb.Token())
				mustRelease(t, lb)
				_ = le.Release(context.Background())
				return
			}
			if !errors.Is(err, guard.ErrLocked) {
				t.Fatalf("with the check, B's attempt: %v, want ErrLocked", err)
			}
			var locked *guard.LockedError
			if errors.As(err, &locked) && locked.RetryAfter <= 0 {
				t.Errorf("RetryAfter %s, want the restarted server's time left", locked.RetryAfter)
			}
			// A's hold is left on one server of three: its next renewal finds it lost.
			_ = le.Release(context.Background())
		})
	}
}

// TestQuorumLossAnnounced: a lease whose majority is gone is lost — at once when the
// servers say the lock is gone there, by its validity when they do not answer.
// lostOrBack waits until le is lost (true) or its lock is back on one of cs (false, a
// repair), and fails t when neither happens within 3s.
func lostOrBack(t *testing.T, le *guard.Lease, cs []*redis.Client) bool {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		select {
		case <-le.Context().Done():
			return true
		default:
		}
		for _, c := range cs {
			if lockHolder(t, c, lockName("loss")) != "" {
				return false
			}
		}
	}
	t.Fatal("lease not lost 3s after its lock was deleted on 2 of 3 servers")
	return false
}

func TestQuorumLossAnnounced(t *testing.T) {
	t.Run("deleted on a majority", func(t *testing.T) {
		r := startQuorum(t, 3, false)
		l := r.locker(t, guard.TTL(3*time.Second), guard.RestartDelay(0))
		le := mustAcquire(t, l, ctxTimeout(t, 10*time.Second), "loss")
		cs := []*redis.Client{r.servers[0].Client(t), r.servers[1].Client(t)}
		var deleted time.Time
		for try := 1; ; try++ {
			// Both at once. A renewal that reaches one server before its deletion and the
			// other after it finds the hold gone on one server only, and takes it back
			// there (repair), as it should: the hold is then back on a server, and the
			// deletion is made again.
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = c.Del(context.Background(), lockName("loss")).Err()
				}()
			}
			wg.Wait()
			deleted = time.Now()
			if lostOrBack(t, le, cs) {
				break
			}
			if try == 5 {
				t.Fatal("a renewal took the hold back after each of 5 deletions on 2 of 3 servers")
			}
			t.Logf("try %d: a renewal ran between the deletions and took the hold back", try)
		}
		if d := time.Since(deleted); d > 1500*time.Millisecond {
			t.Errorf("loss announced %s after the deletion, want by the next renewal (1s)", d)
		}
		if !errors.Is(context.Cause(le.Context()), guard.ErrLeaseLost) {
			t.Errorf("cause %v, want ErrLeaseLost", context.Cause(le.Context()))
		}
	})
	t.Run("majority paused", func(t *testing.T) {
		r := startQuorum(t, 3, false)
		l := r.locker(t, guard.TTL(time.Second), guard.RestartDelay(0))
		le := mustAcquire(t, l, ctxTimeout(t, 10*time.Second), "loss")
		valid := le.ValidUntil()
		r.servers[0].Pause(t)
		r.servers[1].Pause(t)
		defer r.servers[0].Resume(t)
		defer r.servers[1].Resume(t)
		select {
		case <-le.Context().Done():
		case <-time.After(3 * time.Second):
			t.Fatal("lease not lost 3s after 2 of 3 servers stopped answering")
		}
		if lost := time.Now(); lost.After(valid.Add(200 * time.Millisecond)) {
			t.Errorf("lost at %s, after its validity (%s)", lost.Format(time.StampMilli), valid.Format(time.StampMilli))
		}
		if !errors.Is(context.Cause(le.Context()), guard.ErrLeaseLost) {
			t.Errorf("cause %v, want ErrLeaseLost", context.Cause(le.Context()))
		}
	})
	t.Run("one deleted", func(t *testing.T) {
		r := startQuorum(t, 3, false)
		l := r.locker(t, guard.TTL(900*time.Millisecond), guard.RestartDelay(0))
		le := mustAcquire(t, l, ctxTimeout(t, 10*time.Second), "loss")
		c := r.servers[0].Client(t)
		_ = c.Del(context.Background(), lockName("loss")).Err()
		_ = c.Close()
		time.Sleep(2 * time.Second) // several renewals
		if err := le.Err(); err != nil {
			t.Fatalf("lease lost with 2 of 3 servers still holding it: %v", err)
		}
		mustRelease(t, le)
	})
	t.Run("majority down", func(t *testing.T) {
		r := startQuorum(t, 3, false)
		l := r.locker(t, guard.TTL(time.Second), guard.RestartDelay(0))
		le := mustAcquire(t, l, ctxTimeout(t, 10*time.Second), "loss")
		valid := le.ValidUntil()
		r.servers[0].Kill(t)
		r.servers[1].Kill(t)
		select {
		case <-le.Context().Done():
		case <-time.After(3 * time.Second):
			t.Fatal("lease not lost 3s after 2 of 3 servers went away")
		}
		if lost := time.Now(); lost.After(valid.Add(time.Second)) {
			t.Errorf("lost at %s, long after its validity (%s)", lost.Format(time.StampMilli), valid.Format(time.StampMilli))
		}
		var lle *guard.LeaseLostError
		if !errors.As(context.Cause(le.Context()), &lle) || lle.Err == nil {
			t.Fatalf("cause %v, want a *LeaseLostError with the renewals' error", context.Cause(le.Context()))
		}
		if op, _, ok := guard.QuorumFailure(lle.Err); !ok || op != "renew" {
			t.Errorf("renewal error %v, want a quorum failure of the renewal", lle.Err)
		}
		err := le.Release(context.Background())
		if _, _, ok := guard.QuorumFailure(err); !ok || !errors.Is(err, guard.ErrUnavailable) {
			t.Errorf("Release with 2 of 3 servers gone: %v, want ErrUnavailable with a quorum failure", err)
		}
	})
}

// TestQuorumPartialUndone: an attempt that a minority granted is undone there.
func TestQuorumPartialUndone(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			r := startQuorum(t, n, false)
			// Other owners hold the lock on a majority, one server each.
			for _, s := range r.servers[:n/2+1] {
				defer mustRelease(t, holdOn(t, s, "partial"))
			}
			l := r.locker(t, guard.RestartDelay(0))
			_, err := l.TryAcquire(ctxTimeout(t, 5*time.Second), "partial")
			if !errors.Is(err, guard.ErrLocked) {
				t.Fatalf("TryAcquire: %v, want ErrLocked", err)
			}
			for _, s := range r.servers[n/2+1:] {
				c := s.Client(t)
				waitUntil(t, 2*time.Second, "the minority's grant undone on "+s.String(), func() bool {
					return lockHolder(t, c, lockName("partial")) == ""
				})
				_ = c.Close()
			}
		})
	}
}

// TestQuorumTokensRise: tokens rise strictly from one hold to the next while the
// majority that grants them changes — even when one server's counter runs far ahead of
// the others' (the write-back carries it to every later majority) — and across servers
// restarting empty (the restart delay outlasts any earlier token drawn from a clock).
func TestQuorumTokensRise(t *testing.T) {
	t.Run("changing majorities", func(t *testing.T) {
		r := startQuorum(t, 5, false)
		l := r.locker(t, guard.TTL(time.Second), guard.RestartDelay(0))
		ctx := ctxTimeout(t, 60*time.Second)
		// Server 4's counter is an hour ahead.
		c := r.servers[4].Client(t)
		ahead := time.Now().Add(time.Hour).UnixMicro()
		if err := setFence(ctx, c, "rise", ahead); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		var last int64
		for round := range 10 {
			// Another owner holds the lock on two servers, a different pair each round:
			// the quorum's majority is the other three.
			p1, p2 := round%5, (round+2)%5
			f1, f2 := holdOn(t, r.servers[p1], "rise"), holdOn(t, r.servers[p2], "rise")
			le := mustAcquire(t, l, ctx, "rise")
			tok := le.Token()
			mustRelease(t, le)
			mustRelease(t, f1)
			mustRelease(t, f2)
			if round == 0 && tok <= ahead {
				t.Fatalf("first token %d below server 4's counter %d", tok, ahead)
			}
			if round > 0 && tok <= last {
				t.Fatalf("round %d (servers %d and %d held by another owner): token %d after %d", round, p1, p2, tok, last)
			}
			last = tok
		}
	})
	t.Run("restarts", func(t *testing.T) {
		r := startQuorum(t, 3, false)
		time.Sleep(time.Second) // fresh servers: up for the delay first
		l := r.locker(t, guard.TTL(500*time.Millisecond), guard.RestartDelay(time.Second))
		ctx := ctxTimeout(t, 60*time.Second)
		var last int64
		for round := range 6 {
			if round > 0 {
				r.servers[round%3].Restart(t)
			}
			le := mustAcquire(t, l, ctx, "rise")
			tok := le.Token()
			mustRelease(t, le)
			if round > 0 && tok <= last {
				t.Fatalf("round %d (server %d restarted empty): token %d after %d", round, round%3, tok, last)
			}
			last = tok
		}
	})
}

// TestQuorumWriteBack: a fresh hold's token is written back to the granting servers only
// when their tokens differ. When every server takes the attempt's proposed token, each
// runs one script for the acquisition, the attempt: no write-back round trip. When one
// server's counter is ahead (its token is its own, above the proposal), the hold takes
// the highest token and every granting server is told it, so that a later hold granted
// by the other servers alone still gets a higher token.
func TestQuorumWriteBack(t *testing.T) {
	r := startQuorum(t, 3, false)
	l, counters := countedQuorum(t, r)
	ctx := ctxTimeout(t, 30*time.Second)
	mustRelease(t, mustAcquire(t, l, ctx, "warm-up")) // the servers load the scripts

	t.Run("agree", func(t *testing.T) {
		le := mustAcquire(t, l, ctx, "agree")
		r.waitCarried(t, "agree", le.Token(), false)
		for i, c := range counters {
			if n := c.calls(lockName("agree")); n != 1 {
				t.Errorf("server %d ran %d scripts for the acquisition, want 1 (the attempt, no write-back)", i, n)
			}
		}
		mustRelease(t, le)
	})

	t.Run("differ", func(t *testing.T) {
		// Another owner holds the lock on server 2, so that servers 0 and 1 grant it, and
		// server 0's counter is an hour ahead: its token is its own, above the proposal.
		c0 := r.servers[0].Client(t)
		ahead := time.Now().Add(time.Hour).UnixMicro()
		if err := setFence(ctx, c0, "differ", ahead); err != nil {
			t.Fatal(err)
		}
		_ = c0.Close()
		other := holdOn(t, r.servers[2], "differ")
		le := mustAcquire(t, l, ctx, "differ")
		if le.Token() <= ahead {
			t.Fatalf("token %d, want above server 0's counter %d", le.Token(), ahead)
		}
		for i := range 2 {
			if n := counters[i].calls(lockName("differ")); n != 2 {
				t.Errorf("server %d ran %d scripts for the acquisition, want 2 (the attempt and the write-back)", i, n)
			}
		}
		mustRelease(t, le)
		mustRelease(t, other)
		// Now another owner holds it on server 0: the next hold is granted by 1 and 2, and
		// gets a higher token only if the write-back raised server 1's counter.
		other = holdOn(t, r.servers[0], "differ")
		next := mustAcquire(t, l, ctx, "differ")
		if next.Token() <= le.Token() {
			t.Fatalf("token %d granted by servers 1 and 2 after %d: the write-back did not reach server 1", next.Token(), le.Token())
		}
		mustRelease(t, next)
		mustRelease(t, other)
	})

	t.Run("one permit", func(t *testing.T) {
		// A one-permit semaphore keeps each holder's token in '<holder>#t', as a reader
		// does: its servers take the proposal too, and need no write-back; Inspect shows
		// the lease's token on every server.
		le := mustAcquire(t, l, ctx, "permit", guard.Permits(1))
		hash, field := lockName("permit")+":sem", string(le.Owner())+"#t"
		tok := strconv.FormatInt(le.Token(), 10)
		for _, s := range r.servers {
			c := s.Client(t)
			waitUntil(t, 2*time.Second, "the permit's token on "+s.String(), func() bool {
				return c.HGet(context.Background(), hash, field).Val() == tok
			})
			_ = c.Close()
		}
		for i, c := range counters {
			if n := c.calls(hash); n != 1 {
				t.Errorf("server %d ran %d scripts for the permit, want 1 (the attempt, no write-back)", i, n)
			}
		}
		st, err := l.Inspect(ctx, "permit", guard.Permits(1))
		if err != nil || len(st.Holders) != 1 || st.Holders[0].Token != le.Token() {
			t.Fatalf("Inspect: %+v, %v; want the one holder with token %d", st, err, le.Token())
		}
		for _, v := range st.Servers {
			if len(v.Holders) != 1 || v.Holders[0].Token != le.Token() {
				t.Errorf("server %s shows %+v, want token %d", v.Server, v.Holders, le.Token())
			}
		}
		mustRelease(t, le)
	})
}

// countedQuorum returns a quorum Locker on r's servers, closed at cleanup, whose clients
// count the scripts they run, one counter per server.
func countedQuorum(t *testing.T, r *quorumRig) (*guard.Locker, []*keyScripts) {
	t.Helper()
	cs := r.clients(t)
	counters := make([]*keyScripts, len(cs))
	for i, c := range cs {
		counters[i] = &keyScripts{}
		c.AddHook(counters[i])
	}
	l, err := guard.NewQuorum(cs, guard.RestartDelay(0), guard.TTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, counters
}

// waitCarried waits until every server's hold of key carries token, as confirmed by a
// write-back when confirmed is set.
func (r *quorumRig) waitCarried(t *testing.T, key string, token int64, confirmed bool) {
	t.Helper()
	tok := strconv.FormatInt(token, 10)
	for _, s := range r.servers {
		c := s.Client(t)
		waitUntil(t, 2*time.Second, "the hold's token on "+s.String(), func() bool {
			v := c.HMGet(context.Background(), lockName(key), "#t", "#tq").Val()
			return len(v) == 2 && v[0] == tok && (!confirmed || v[1] == tok)
		})
		_ = c.Close()
	}
}

// keyScripts is a go-redis hook that counts the scripts a client ran (EVALSHA and EVAL,
// alone or in a pipeline; not a call the server answered NOSCRIPT), by their first key.
type keyScripts struct {
	mu    sync.Mutex
	byKey map[string]int
}

func (s *keyScripts) calls(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byKey[key]
}

func (s *keyScripts) count(err error, cmds ...redis.Cmder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cmd := range cmds {
		e := cmd.Err()
		if e == nil && len(cmds) == 1 {
			e = err // the hook may run before the command records its error
		}
		noScript := e != nil && redis.HasErrorPrefix(e, "NOSCRIPT")
		if a := cmd.Args(); len(a) > 3 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") && !noScript {
			if s.byKey == nil {
				s.byKey = map[string]int{}
			}
			s.byKey[fmt.Sprint(a[3])]++
		}
	}
}

func (s *keyScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *keyScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		s.count(err, cmd)
		return err
	}
}

func (s *keyScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		s.count(nil, cmds...)
		return err
	}
}

// TestQuorumWakeWithServerDown: with one server dead, a waiter is still woken by the
// release (the others announce it) and makes few attempts.
func TestQuorumWakeWithServerDown(t *testing.T) {
	r := startQuorum(t, 3, false)
	a := r.locker(t, guard.RestartDelay(0))
	b := r.locker(t, guard.RestartDelay(0))
	ctx := ctxTimeout(t, 20*time.Second)
	r.servers[0].Kill(t)
	le := mustAcquire(t, a, ctx, "wake")
	type res struct {
		le       *guard.Lease
		attempts int
		err      error
	}
	got := make(chan res, 1)
	go func() {
		w, err := b.Acquire(ctx, "wake", guard.Retry(guard.MaxWait(-1, guard.Fixed(10*time.Second, 10*time.Second))))
		got <- res{le: w, err: err}
	}()
	time.Sleep(500 * time.Millisecond)
	released := time.Now()
	mustRelease(t, le)
	w := <-got
	if w.err != nil {
		t.Fatalf("waiter: %v", w.err)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Fatalf("waiter took %s after the release, want a notification from a live server", d)
	}
	mustRelease(t, w.le)
}

// TestQuorumReadWrite: the read-write lock on a quorum — readers share it, a writer
// excludes them, a reader's reentry through another Locker keeps its token, and tokens
// rise from the readers to the writer.
func TestQuorumReadWrite(t *testing.T) {
	r := startQuorum(t, 3, false)
	a := r.locker(t, guard.RestartDelay(0), guard.TTL(2*time.Second))
	b := r.locker(t, guard.RestartDelay(0), guard.TTL(2*time.Second))
	ctx := ctxTimeout(t, 20*time.Second)

	r1 := mustAcquire(t, a, ctx, "rw", guard.Read())
	r2 := mustAcquire(t, b, ctx, "rw", guard.Read())
	in := mustAcquire(t, b, r1.Context(), "rw", guard.Read()) // r1's owner, through b
	if !in.Reentrant() || in.Token() != r1.Token() {
		t.Fatalf("reader's reentry through another Locker: reentrant %v, token %d, want true and %d", in.Reentrant(), in.Token(), r1.Token())
	}
	mustRelease(t, in)
	if _, err := b.TryAcquire(ctx, "rw", guard.Write()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("writer while two readers hold: %v, want ErrLocked", err)
	}
	got := make(chan *guard.Lease, 1)
	go func() {
		w, err := b.Acquire(ctx, "rw", guard.Write())
		if err != nil {
			t.Errorf("writer: %v", err)
		}
		got <- w
	}()
	time.Sleep(100 * time.Millisecond)
	mustRelease(t, r1)
	mustRelease(t, r2)
	w := <-got
	if w == nil {
		return
	}
	if w.Token() <= max(r1.Token(), r2.Token()) {
		t.Fatalf("writer's token %d not above the readers' %d and %d", w.Token(), r1.Token(), r2.Token())
	}
	if _, err := a.TryAcquire(ctx, "rw", guard.Read()); !errors.Is(err, guard.ErrLocked) {
		t.Fatalf("reader while the writer holds: %v, want ErrLocked", err)
	}
	mustRelease(t, w)
}

// TestQuorumNoStrayGrants: a process that takes and releases one key over and over on a
// quorum is never refused. A server whose copy of an attempt arrives after the hold's
// release (the release decided by the other servers first) would otherwise keep a stray
// hold for the whole TTL, and two of them refuse the key to everyone.
func TestQuorumNoStrayGrants(t *testing.T) {
	r := startQuorum(t, 3, false)
	l := r.locker(t, guard.RestartDelay(0), guard.TTL(10*time.Second))
	ctx := ctxTimeout(t, 60*time.Second)
	refused := 0
	for range 2000 {
		le, err := l.TryAcquire(ctx, "loop")
		if err != nil {
			if refused++; refused == 1 {
				t.Errorf("TryAcquire of a key this process released: %v", err)
			}
			continue
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if refused > 0 {
		t.Errorf("%d of 2000 acquisitions refused", refused)
	}
	waitUntil(t, 2*time.Second, "no lock left on any server", func() bool { return r.holders(t, "loop") == 0 })
}

// TestQuorumCancelledLeavesNothing: an acquisition whose context ends while every
// server's reply is still on its way fails with the context's error, and the grants the
// servers make after it are undone at once, not left for their TTL.
func TestQuorumCancelledLeavesNothing(t *testing.T) {
	r := startQuorum(t, 3, true)
	l := r.locker(t, guard.RestartDelay(0), guard.TTL(10*time.Second))
	// Connections dialled first, so that the attempts reach the servers at once.
	mustRelease(t, mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "warm-up"))
	for _, p := range r.proxies {
		p.SetLatency(300 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := l.Acquire(ctx, "cancelled")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want the context's deadline in the chain", err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := r.holders(t, "cancelled"); n < 2 {
		// (A server whose connection is still being dialled gets the attempt later.)
		t.Fatalf("%d servers granted the abandoned attempt, want a majority at least: the test shows nothing", n)
	}
	for _, p := range r.proxies {
		p.SetLatency(0)
	}
	waitUntil(t, 3*time.Second, "the late grants undone on every server (TTL 10s)", func() bool {
		return r.holders(t, "cancelled") == 0
	})
}

// TestQuorumReentryWhileConfirmationInFlight: a hold whose write-back has reached only a
// minority of its servers — here server 1 still carries its own drawn token, unconfirmed,
// as when its grant answered after the majority and the late write-back is on its way —
// and whose other server that carries the token stops answering. A reentry through
// another Locker finds the owner's hold on a majority (servers 0 and 1) but the token
// carried by one only: confirmed there by a write-back (raise.lua), or taken there as the
// attempt's proposal (acquire.lua). It is still a reentry: it must get the lease's token
// and leave that token on the servers, not draw a fresh one over the holder's (the fault
// suite saw that happen).
func TestQuorumReentryWhileConfirmationInFlight(t *testing.T) {
	for _, carried := range []string{"confirmed", "proposed"} {
		t.Run(carried, func(t *testing.T) {
			r := startQuorum(t, 3, false)
			a := r.locker(t, guard.RestartDelay(0), guard.TTL(5*time.Second))
			b := r.locker(t, guard.RestartDelay(0), guard.TTL(5*time.Second))
			ctx := ctxTimeout(t, 20*time.Second)
			key := "inflight-" + carried
			le := mustAcquire(t, a, ctx, key)
			tok := strconv.FormatInt(le.Token(), 10)
			for _, s := range r.servers {
				c := s.Client(t)
				waitUntil(t, 2*time.Second, "the lease's token on "+s.String(), func() bool {
					return c.HGet(ctx, lockName(key), "#t").Val() == tok
				})
				_ = c.Close()
			}
			// Server 0 carries the token as confirmed or as proposed, not both.
			c0 := r.servers[0].Client(t)
			if err := c0.HDel(ctx, lockName(key), "#tq", "#tp").Err(); err != nil {
				t.Fatal(err)
			}
			field := map[string]string{"confirmed": "#tq", "proposed": "#tp"}[carried]
			if err := c0.HSet(ctx, lockName(key), field, tok).Err(); err != nil {
				t.Fatal(err)
			}
			_ = c0.Close()
			// Server 1 as before its late write-back: its own, higher token, neither
			// confirmed nor proposed.
			c1 := r.servers[1].Client(t)
			own := strconv.FormatInt(le.Token()+4000, 10)
			if err := c1.HSet(ctx, lockName(key), "#t", own).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c1.HDel(ctx, lockName(key), "#tq", "#tp").Err(); err != nil {
				t.Fatal(err)
			}
			_ = c1.Close()
			r.servers[2].Pause(t)

			inner, err := b.Acquire(le.Context(), key, guard.Retry(guard.Attempts(20, guard.Fixed(50*time.Millisecond, 0))))
			if err != nil {
				t.Fatalf("reentry: %v", err)
			}
			if !inner.Reentrant() || inner.Token() != le.Token() {
				t.Fatalf("reentry: reentrant %v, token %d; want the lease's %d", inner.Reentrant(), inner.Token(), le.Token())
			}
			for _, s := range r.servers[:2] {
				c := s.Client(t)
				if got := c.HGet(ctx, lockName(key), "#t").Val(); got != tok {
					t.Fatalf("%s carries token %s for the hold, want the lease's %s", s, got, tok)
				}
				_ = c.Close()
			}
			mustRelease(t, inner)
			r.servers[2].Resume(t)
			mustRelease(t, le)
		})
	}
}

// TestQuorumPausedServer: with one of three servers paused (SIGSTOP), two Lockers that
// TryAcquire a free key at the same moment split the live servers' votes; each answers
// within its reply budget (not after its lease's validity, as it did) and leaves nothing
// granted on the live servers. Lockers that contend for the key keep getting it while
// the server is paused, and a majority paused fails an attempt with ErrUnavailable
// after the round's patience (1s here), not the lease's validity.
func TestQuorumPausedServer(t *testing.T) {
	r := startQuorum(t, 3, false)
	const budget = 50 * time.Millisecond
	a := r.locker(t, guard.ReplyBudget(budget), guard.RestartDelay(0), guard.TTL(2*time.Second))
	b := r.locker(t, guard.ReplyBudget(budget), guard.RestartDelay(0), guard.TTL(2*time.Second))
	ctx := ctxTimeout(t, 30*time.Second)
	mustRelease(t, mustAcquire(t, a, ctx, "warm"))
	mustRelease(t, mustAcquire(t, b, ctx, "warm"))
	r.servers[2].Pause(t)
	defer r.servers[2].Resume(t)

	// Split votes: each Locker's TryAcquire answers within the budget plus scheduling.
	slowest := time.Duration(0)
	for i := range 20 {
		key := "split-" + strconv.Itoa(i)
		var wg sync.WaitGroup
		took := make([]time.Duration, 2)
		errs := make([]error, 2)
		for j, l := range []*guard.Locker{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				le, err := l.TryAcquire(ctx, key)
				took[j], errs[j] = time.Since(start), err
				if err == nil {
					mustRelease(t, le)
				}
			}()
		}
		wg.Wait()
		for j := range errs {
			if errs[j] != nil && !errors.Is(errs[j], guard.ErrLocked) {
				t.Fatalf("TryAcquire with a server paused: %v, want a grant or ErrLocked", errs[j])
			}
			slowest = max(slowest, took[j])
		}
	}
	t.Logf("slowest TryAcquire with a server paused: %s (reply budget %s)", slowest, budget)
	if slowest > time.Second {
		t.Fatalf("a TryAcquire with a server paused took %s: it waited for the paused server, not its budget of %s", slowest, budget)
	}
	waitUntil(t, 2*time.Second, "split grants undone on the live servers", func() bool {
		for i := range 20 {
			if r.holdersOn(t, "split-"+strconv.Itoa(i), 0, 1) != 0 {
				return false
			}
		}
		return true
	})

	// Contention: two Lockers take turns on one key while the server stays paused. Each
	// split vote used to wait for the paused server until the lease's validity (about
	// 2s here): at most one grant per 2s.
	var grants atomic.Int64
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range []*guard.Locker{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				le, err := l.Acquire(cctx, "contended", guard.Retry(guard.MaxWait(time.Second, guard.Fixed(time.Millisecond, 0))))
				if err != nil {
					continue
				}
				grants.Add(1)
				mustRelease(t, le)
			}
		}()
	}
	wg.Wait()
	t.Logf("grants in 2s of contention with a server paused: %d", grants.Load())
	if grants.Load() < 4 {
		t.Fatalf("%d grants in 2s of contention with a server paused: the quorum stalled", grants.Load())
	}

	// A majority paused: an attempt fails with ErrUnavailable within the budget.
	r.servers[1].Pause(t)
	start := time.Now()
	_, err := a.TryAcquire(ctx, "majority")
	took := time.Since(start)
	r.servers[1].Resume(t)
	if !errors.Is(err, guard.ErrUnavailable) {
		t.Fatalf("TryAcquire with a majority paused: %v, want ErrUnavailable", err)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("TryAcquire with a majority paused took %s, want about its patience (1s)", took)
	}
}

// TestQuorumRepair: a hold lost on one server (expired there while the server was slow,
// or the server restarted empty) is taken back there at the lease's next renewal, with
// the lease's token, so that losing a second server afterwards does not cost the lease
// its majority. Without the repair, the pause below leaves one server of three holding
// and the lease is lost at its validity deadline.
func TestQuorumRepair(t *testing.T) {
	r := startQuorum(t, 3, false)
	l := r.locker(t, guard.RestartDelay(0), guard.TTL(time.Second))
	ctx := ctxTimeout(t, 20*time.Second)
	le := mustAcquire(t, l, ctx, "repair")
	defer func() { _ = le.Release(ctx) }()
	c0 := r.servers[0].Client(t)
	defer c0.Close()
	if err := c0.Del(ctx, lockName("repair")).Err(); err != nil {
		t.Fatal(err)
	}
	token := strconv.FormatInt(le.Token(), 10)
	waitUntil(t, 3*time.Second, "the hold taken back on the server that lost it", func() bool {
		return c0.HGet(ctx, lockName("repair"), "#t").Val() == token &&
			holdCount(t, c0, "repair", string(le.Owner())) == 1
	})
	r.servers[1].Pause(t)
	time.Sleep(2500 * time.Millisecond) // 2.5 TTLs on servers 0 and 2 alone
	r.servers[1].Resume(t)
	if err := le.Err(); err != nil {
		t.Fatalf("lease after a second server paused past the TTL: %v, want it held on the repaired server and the third", err)
	}
}

// BenchmarkQuorumAcquireRelease: uncontended TryAcquire + Release on a quorum of 3, one
// key per goroutine (G of them), with the round trips each pair makes to the servers (a
// pipeline counts once) and the scripts it runs there.
func BenchmarkQuorumAcquireRelease(b *testing.B) {
	servers := redistest.StartN(b, 3)
	counter := redistest.NewCounter()
	var cs []redis.UniversalClient
	for _, s := range servers {
		c := s.Client(b, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
		c.AddHook(counter)
		cs = append(cs, c)
	}
	l, err := guard.NewQuorum(cs, guard.RestartDelay(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	mustRelease(b, mustAcquire(b, l, ctx, "warm-up"))
	var id atomic.Int64
	for _, g := range []int{1, 16} {
		b.Run("G="+strconv.Itoa(g), func(b *testing.B) {
			b.ReportAllocs()
			counter.Reset()
			pair := func(key string) bool {
				le, err := l.TryAcquire(ctx, key)
				if err == nil {
					err = le.Release(ctx)
				}
				if err != nil {
					b.Error(err)
				}
				return err == nil
			}
			b.ResetTimer()
			if g == 1 {
				for i := 0; i < b.N && pair("bench:1"); i++ {
				}
			} else {
				b.SetParallelism((g + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					key := "bench:" + strconv.FormatInt(id.Add(1), 10)
					for pb.Next() && pair(key) {
					}
				})
			}
			b.StopTimer()
			reportRoundTrips(b, counter, b.N)
			b.ReportMetric(float64(counter.Calls("evalsha"))/float64(b.N), "evalsha/op")
		})
	}
}

// TestQuorumAttemptCutByContext: an attempt whose caller's context ends before the
// servers decided it fails with the context's error (a *RedisError, ErrUnavailable),
// as a call to one server that does not return in time does — not with ErrLocked when
// one server says another owner holds the lock while the owner's own servers have not
// answered. Here the owner holds the lock on servers 0 and 1, server 2 has a leftover
// hold of another owner (a release that has not reached it yet, on a loaded machine),
// server 1 is paused, and a reentry through another Locker ends its context within the
// reply budget: one reentry grant, one busy, one silent server — undecided. (The other
// owner takes server 2 first: a Del of the owner's hold there raced the owner's watchdog,
// which restores it, on a loaded machine; and the reply budget is set well above the
// context's time, which a derived budget of 20 ms was not when timers ran late.)
func TestQuorumAttemptCutByContext(t *testing.T) {
	r := startQuorum(t, 3, false)
	a := r.locker(t, guard.TTL(10*time.Second), guard.RestartDelay(0))
	// B's clients give up at their context's deadline: its attempts run on the caller's
	// goroutine, which waits for the round (a Locker whose clients do not returns at the
	// deadline with a *RedisError whatever the round does).
	var cs []redis.UniversalClient
	for _, s := range r.servers {
		cs = append(cs, s.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }))
	}
	b, err := guard.NewQuorum(cs, guard.TTL(10*time.Second), guard.RestartDelay(0), guard.ReplyBudget(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := ctxTimeout(t, 10*time.Second)
	other := holdOn(t, r.servers[2], "cut")
	defer func() { _ = other.Release(context.Background()) }()
	le := mustAcquire(t, a, ctx, "cut") // on servers 0 and 1
	defer func() { _ = le.Release(context.Background()) }()
	r.servers[1].Pause(t)
	defer r.servers[1].Resume(t)

	// Within the reply budget: the silent server is not yet counted as failed.
	cctx, cancel := context.WithTimeout(le.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = b.TryAcquire(cctx, "cut")
	var re *guard.RedisError
	if errors.Is(err, guard.ErrLocked) || !errors.As(err, &re) || !errors.Is(err, guard.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reentry cut by its context: %v, want a *RedisError (ErrUnavailable) with context.DeadlineExceeded, not ErrLocked", err)
	}
	if err := le.Err(); err != nil {
		t.Fatalf("the outer lease: %v", err)
	}
}

// TestQuorumPoliteReentryThroughQueuedLocker: a reentry through a Locker whose own
// goroutines queue for the key goes out polite (it must leave a free lock to that
// queue), and still reenters the owner's hold on a quorum at once — also when one server
// still shows another owner's hold (a previous holder's release not there yet).
func TestQuorumPoliteReentryThroughQueuedLocker(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale=%v", stale), func(t *testing.T) {
			r := startQuorum(t, 3, false)
			a := r.locker(t, guard.RestartDelay(0), guard.TTL(5*time.Second))
			b := r.locker(t, guard.RestartDelay(0), guard.TTL(5*time.Second))
			ctx := ctxTimeout(t, 20*time.Second)
			key := fmt.Sprintf("polite-%v", stale)
			le := mustAcquire(t, a, ctx, key)
			if stale {
				c0 := r.servers[0].Client(t)
				if err := c0.HSet(ctx, lockName(key), "#o", "someone-else", "#n", "1").Err(); err != nil {
					t.Fatal(err)
				}
				_ = c0.Close()
			}
			wctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if w, err := b.Acquire(wctx, key); err == nil {
						mustRelease(t, w)
					}
				}()
			}
			time.Sleep(300 * time.Millisecond) // b's goroutines found the lock busy and queue
			start := time.Now()
			inner, err := b.Acquire(le.Context(), key, guard.Retry(guard.MaxWait(2*time.Second, guard.Fixed(5*time.Millisecond, 0))))
			if err != nil {
				t.Fatalf("reentry through a Locker that queues for the key: %v", err)
			}
			if !inner.Reentrant() || inner.Token() != le.Token() {
				t.Fatalf("reentry: reentrant %v, token %d; want the lease's %d", inner.Reentrant(), inner.Token(), le.Token())
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("reentry took %s", d)
			}
			mustRelease(t, inner)
			cancel()
			mustRelease(t, le)
			wg.Wait()
		})
	}
}

// TestReleaseWithinValidityReadsNoClock: a release sent while the lease is valid by the
// engine's clock tells the server so, which then reads no clock and leaves the lock
// hash's TTL alone (its grant made it live the fence retention and more): on one server
// no TIME at all; on a quorum of 3 none on the servers that granted the hold in the
// round its validity counts from, a majority at least, so one TIME at most (a server
// whose grant came after the majority's reads its clock). The hash still lives the fence
// retention on every server after the release.
func TestReleaseWithinValidityReadsNoClock(t *testing.T) {
	const retention = time.Minute
	check := func(t *testing.T, l *guard.Locker, srvs []*redistest.Server, most int64) {
		t.Helper()
		ctx := ctxTimeout(t, 10*time.Second)
		var cs []*redis.Client
		for _, s := range srvs {
			cs = append(cs, s.Client(t))
		}
		for round := range 5 {
			key := fmt.Sprintf("clockless-%d", round)
			le := mustAcquire(t, l, ctx, key)
			// A quorum's acquire returns on the majority's grants and goes on to the
			// last server, whose script reads TIME too: wait for the grant on every
			// server before counting, or a late grant counts as the release's read.
			for _, c := range cs {
				waitUntil(t, 2*time.Second, "the grant on every server", func() bool {
					o, err := c.HGet(ctx, lockName(key), "#o").Result()
					return err == nil && o != ""
				})
			}
			before := make([]int64, len(srvs))
			for i, s := range srvs {
				before[i] = s.CommandCalls(t)["time"]
			}
			mustRelease(t, le)
			var read int64
			for i, c := range cs {
				// A quorum's release goes on to the last server past the majority's
				// answers; wait for it there before counting.
				waitUntil(t, 2*time.Second, "the release on every server", func() bool {
					o, err := c.HGet(ctx, lockName(key), "#o").Result()
					return err == redis.Nil || err == nil && o == ""
				})
				read += srvs[i].CommandCalls(t)["time"] - before[i]
				if ttl := c.PTTL(ctx, lockName(key)).Val(); ttl < retention {
					t.Fatalf("round %d, server %d: the lock hash lives %s after the release, want the fence retention %s at least", round, i, ttl, retention)
				}
			}
			if read > most {
				t.Fatalf("round %d: the release read the clock %d times, want %d at most", round, read, most)
			}
		}
	}
	opts := []guard.Option{guard.TTL(30 * time.Second), guard.FenceRetention(retention)}
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		l, _ := newLocker(t, srv, opts...)
		check(t, l, []*redistest.Server{srv}, 0)
	})
	t.Run("quorum", func(t *testing.T) {
		r := startQuorum(t, 3, false)
		check(t, r.locker(t, append(opts, guard.RestartDelay(0))...), r.servers, 1)
	})
}
