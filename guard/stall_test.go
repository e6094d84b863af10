package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// budgetSlack is how far past its budget a call may return: the budget's grace for the
// attempt in flight at the deadline, and the scheduler.
const budgetSlack = 500 * time.Millisecond

// TestBudgetWhileFrozen: a wait budget bounds the whole call while Redis is frozen
// (SIGSTOP: connections are accepted, nothing is answered), whatever the client's own
// timeouts and retries — for Do, Acquire and Wrap, with and without
// ContextTimeoutEnabled, with a context that has no deadline. The call fails with
// ErrUnavailable, fn is not run, and the caller's context is not blamed.
func TestBudgetWhileFrozen(t *testing.T) {
	srv := redistest.Start(t)
	const budget = 2 * time.Second
	for _, deadlines := range []bool{false, true} {
		c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = deadlines })
		l := lockerOn(t, c)
		mustRelease(t, mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "warm-up"))
		calls := map[string]func(ctx context.Context) error{
			"Do": func(ctx context.Context) error {
				return guard.Do(ctx, func(context.Context) error {
					return errors.New("fn ran while Redis was frozen")
				}, guard.Use(l), guard.RawKey("budget-do"), guard.Retry(guard.MaxWait(budget, nil)))
			},
			"Acquire": func(ctx context.Context) error {
				le, err := l.Acquire(ctx, "budget-acquire", guard.Retry(guard.MaxWait(budget, nil)))
				if err == nil {
					_ = le.Release(ctx)
					return errors.New("acquired while Redis was frozen")
				}
				return err
			},
			"Wrap": func(ctx context.Context) error {
				f := guard.Wrap(func(context.Context, int) (int, error) { return 0, errors.New("fn ran") },
					guard.Use(l), guard.RawKey("budget-wrap"), guard.Retry(guard.MaxWait(budget, nil)))
				_, err := f(ctx, 1)
				return err
			},
		}
		for name, call := range calls {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%t", name, deadlines), func(t *testing.T) {
				srv.Pause(t)
				resumed := false
				defer func() {
					if !resumed {
						srv.Resume(t)
					}
				}()
				start := time.Now()
				err := call(context.Background())
				took := time.Since(start)
				srv.Resume(t)
				resumed = true
				if took > budget+budgetSlack {
					t.Errorf("returned after %s, want within the budget %s + %s", took, budget, budgetSlack)
				}
				if !errors.Is(err, guard.ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v, want ErrUnavailable, and no context error: the caller's context did not end", err)
				}
			})
		}
	}
}

// TestNoGhostAfterFreeze: a caller told that its acquisition failed while Redis was
// frozen never leaves a hold behind. The attempt written into the frozen server's socket
// runs when the server wakes, after its caller gave up; it must be refused or undone
// promptly — for a freeze shorter than the TTL and one longer — with and without
// ContextTimeoutEnabled.
func TestNoGhostAfterFreeze(t *testing.T) {
	t.Parallel() // each freeze mostly waits: with the other freeze tests, at once
	for _, freeze := range []time.Duration{15 * time.Second, 45 * time.Second} {
		for _, deadlines := range []bool{false, true} {
			t.Run(fmt.Sprintf("freeze=%s/ContextTimeoutEnabled=%t", freeze, deadlines), func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = deadlines })
				l := lockerOn(t, c)
				mustRelease(t, mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "warm-up"))
				const key = "ghost"
				srv.Pause(t)
				paused := time.Now()
				err := guard.Do(context.Background(), func(context.Context) error {
					return errors.New("fn ran while Redis was frozen")
				}, guard.Use(l), guard.RawKey(key), guard.Retry(guard.MaxWait(2*time.Second, nil)))
				if !errors.Is(err, guard.ErrUnavailable) {
					srv.Resume(t)
					t.Fatalf("Do on a frozen Redis = %v, want ErrUnavailable", err)
				}
				time.Sleep(time.Until(paused.Add(freeze)))
				srv.Resume(t)
				time.Sleep(2 * time.Second)
				st, err := l.Inspect(ctxTimeout(t, 5*time.Second), key)
				if err != nil {
					t.Fatalf("Inspect: %v", err)
				}
				if len(st.Holders) > 0 {
					t.Fatalf("2s after a %s freeze the lock has holders %+v, though the only caller was told it failed", freeze, st.Holders)
				}
			})
		}
	}
}

// TestLeaseReadsItsDeadline: once ValidUntil has passed, Err and the lease's context
// report the loss at every instant — also while the loss is being announced on another
// goroutine (the validity timer's lose, which tells the handles last). Goroutines spin on
// the checks across the deadline of a lease ended by MaxHold, many times.
func TestLeaseReadsItsDeadline(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, time.Minute)
	rounds := envInt("GUARD_DEADLINE_ROUNDS", 100)
	for i := range rounds {
		le := mustAcquire(t, l, ctx, fmt.Sprintf("deadline-%d", i), guard.MaxHold(20*time.Millisecond))
		lctx := le.Context()
		until := le.ValidUntil()
		var bad atomic.Value
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(until.Add(5 * time.Millisecond)) {
					now := time.Now()
					errL, errC := le.Err(), lctx.Err()
					if now.After(until) && (errL == nil || errC == nil) {
						bad.Store(fmt.Sprintf("%s after ValidUntil: Err() = %v, Context().Err() = %v", now.Sub(until), errL, errC))
						return
					}
				}
			}()
		}
		wg.Wait()
		if b := bad.Load(); b != nil {
			t.Fatalf("round %d: %s", i, b)
		}
		if err := le.Err(); !errors.Is(err, guard.ErrLeaseLost) {
			t.Fatalf("round %d: Err() = %v after the hold limit, want ErrLeaseLost", i, err)
		}
		_ = le.Release(ctx)
	}
}

// TestQuorumBudgetAndGhosts: on a quorum of three, a wait budget bounds an Acquire while
// a majority is frozen, and no hold is left behind 2 s after the servers wake — with a
// majority frozen (the attempt fails) and with a minority frozen (the attempt is granted
// by the others and released: the frozen server's copy must not take the lock when it
// wakes).
func TestQuorumBudgetAndGhosts(t *testing.T) {
	t.Parallel()
	const budget = 2 * time.Second
	for _, frozen := range []int{2, 1} {
		t.Run(fmt.Sprintf("frozen=%d/3", frozen), func(t *testing.T) {
			t.Parallel()
			r := startQuorum(t, 3, false)
			l := r.locker(t, guard.RestartDelay(0))
			ctx := ctxTimeout(t, time.Minute)
			mustRelease(t, mustAcquire(t, l, ctx, "warm-up"))
			for _, s := range r.servers[:frozen] {
				s.Pause(t)
			}
			start := time.Now()
			le, err := l.Acquire(context.Background(), "ghost", guard.Retry(guard.MaxWait(budget, nil)))
			took := time.Since(start)
			if frozen == 1 {
				if err != nil {
					t.Fatalf("Acquire with one server of three frozen: %v", err)
				}
				mustRelease(t, le)
			} else {
				if took > budget+budgetSlack {
					t.Errorf("Acquire returned after %s, want within the budget %s + %s", took, budget, budgetSlack)
				}
				if !errors.Is(err, guard.ErrUnavailable) {
					t.Errorf("Acquire = %v, want ErrUnavailable", err)
				}
			}
			time.Sleep(time.Until(start.Add(15 * time.Second)))
			for _, s := range r.servers[:frozen] {
				s.Resume(t)
			}
			time.Sleep(2 * time.Second)
			if n := r.holders(t, "ghost"); n != 0 {
				t.Fatalf("2s after a 15s freeze of %d server(s), %d server(s) hold the lock; nobody believes it holds it", frozen, n)
			}
		})
	}
}

// TestClusterNoGhostAfterFreeze: the same on a Cluster primary: a caller whose budget ran
// out while the lock's primary was frozen leaves no hold once it wakes.
func TestClusterNoGhostAfterFreeze(t *testing.T) {
	t.Parallel()
	// A Cluster of its own, without replicas: the freeze outlasts the shared one's node
	// timeout, and no failover may end it.
	c := redistest.StartCluster(t, redistest.ClusterPrimaries(3), redistest.ClusterReplicas(0), redistest.ClusterNodeTimeout(time.Minute))
	l := lockerOn(t, c.Client(t))
	p := c.Primaries()[0]
	key := keyOn(t, c, p, "ghost")
	mustRelease(t, mustAcquire(t, l, ctxTimeout(t, 10*time.Second), key))
	p.Pause(t)
	start := time.Now()
	err := guard.Do(context.Background(), func(context.Context) error {
		return errors.New("fn ran while the primary was frozen")
	}, guard.Use(l), guard.RawKey(key), guard.Retry(guard.MaxWait(2*time.Second, nil)))
	took := time.Since(start)
	time.Sleep(time.Until(start.Add(15 * time.Second)))
	p.Resume(t)
	if took > 2*time.Second+budgetSlack || !errors.Is(err, guard.ErrUnavailable) {
		t.Fatalf("Do with the lock's primary frozen = %v after %s, want ErrUnavailable within the budget", err, took)
	}
	time.Sleep(2 * time.Second)
	st, err := l.Inspect(ctxTimeout(t, 5*time.Second), key)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	if len(st.Holders) > 0 {
		t.Fatalf("2s after the primary woke the lock has holders %+v, though the only caller was told it failed", st.Holders)
	}
}
