package guard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// A hold's life runs on its own mutex, apart from the Locker's table: reentries of one
// section, acquisitions by sibling sections, losses (the lock deleted in Redis under its
// holder, which its renewal finds) and releases all race here, with Close at the end.
// Every call returns, a reentry carries its section's token, and losses are seen
// (-race checks the rest).
func TestHoldLifeRaces(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv, guard.TTL(300*time.Millisecond), guard.Renewal(10*time.Millisecond, 0))
	ctx := ctxTimeout(t, 60*time.Second)
	root := ctxid.NewContext(ctx, ctxid.New())
	var losses, grants atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				wctx, cancel := context.WithTimeout(root, 200*time.Millisecond)
				le, err := l.Acquire(wctx, "life")
				if err != nil {
					cancel()
					if !errors.Is(err, guard.ErrLocked) && !errors.Is(err, guard.ErrUnavailable) {
						t.Errorf("goroutine %d: %v", g, err)
						return
					}
					continue
				}
				grants.Add(1)
				time.Sleep(30 * time.Millisecond) // a few renewals: one finds the lock gone
				// A nested acquisition inside the section reenters at once.
				in, err := l.Acquire(le.Context(), "life")
				if err == nil {
					if in.Token() != le.Token() {
						t.Errorf("reentry token %d, want the section's %d", in.Token(), le.Token())
					}
					_ = in.Release(context.Background())
				} else if !errors.Is(err, guard.ErrLeaseLost) && !errors.Is(err, guard.ErrLocked) && le.Err() == nil {
					t.Errorf("reentry of a held lease: %v", err)
				}
				if le.Err() != nil {
					losses.Add(1)
				}
				_ = le.Release(context.Background())
				cancel()
			}
		}()
	}
	// The lock vanishes under its holders now and then: their leases are lost.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(7 * time.Millisecond):
				c.Del(context.Background(), lockName("life"))
			}
		}
	}()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d grants, %d lost", grants.Load(), losses.Load())
	if grants.Load() == 0 || losses.Load() == 0 {
		t.Fatalf("%d grants and %d losses: the race needs both", grants.Load(), losses.Load())
	}
}
