package watchdog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// lease is a test lease: its interval, and what its renewals answer.
type lease struct {
	name     string
	interval time.Duration
	e        Entry[*lease]
}

// recorder is a Dog's Config that records the batches sent and reported and answers
// each renewal with answer (a renewal with TTL 1 s and no error by default).
type recorder struct {
	mu       sync.Mutex
	sent     [][]string
	reported []map[string]bool // per batch: name → live
	answer   func(l *lease, n int) Result
	count    map[string]int
	block    chan struct{} // when set, Send waits for it
	inSend   chan struct{} // when set, Send signals its start
}

func (r *recorder) config() Config[*lease] {
	return Config[*lease]{
		Interval: func(l *lease) time.Duration { return l.interval },
		Send: func(batch []*lease, sent time.Time) []Result {
			if r.inSend != nil {
				r.inSend <- struct{}{}
			}
			if r.block != nil {
				<-r.block
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.count == nil {
				r.count = map[string]int{}
			}
			var names []string
			res := make([]Result, len(batch))
			for i, l := range batch {
				names = append(names, l.name)
				r.count[l.name]++
				res[i] = Result{TTL: time.Second}
				if r.answer != nil {
					res[i] = r.answer(l, r.count[l.name])
				}
			}
			r.sent = append(r.sent, names)
			return res
		},
		Report: func(batch []*lease, live []bool, _ time.Time, _ []Result) {
			r.mu.Lock()
			defer r.mu.Unlock()
			m := map[string]bool{}
			for i, l := range batch {
				m[l.name] = live[i]
			}
			r.reported = append(r.reported, m)
		},
	}
}

func (r *recorder) renewals(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[name]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A lease is renewed again and again until removed; after Remove no renewal of it is
// sent, and the others go on.
func TestRenewsUntilRemoved(t *testing.T) {
	r := &recorder{}
	d := New(r.config())
	defer d.Close()
	a := &lease{name: "a", interval: 5 * time.Millisecond}
	b := &lease{name: "b", interval: 5 * time.Millisecond}
	now := time.Now()
	d.Add(&a.e, a, now)
	d.Add(&b.e, b, now)
	waitFor(t, "three renewals of a", func() bool { return r.renewals("a") >= 3 })
	d.Remove(context.Background(), &a.e, true)
	n := r.renewals("a")
	m := r.renewals("b")
	waitFor(t, "three more renewals of b", func() bool { return r.renewals("b") >= m+3 })
	if got := r.renewals("a"); got != n {
		t.Errorf("a renewed %d times after Remove returned", got-n)
	}
}

// A lease lost, or whose renewal asked for no time, is not renewed again; one whose
// renewal failed for now is retried at a quarter interval, before its next period.
func TestOutcomesSchedule(t *testing.T) {
	errAway := errors.New("server away")
	r := &recorder{answer: func(l *lease, n int) Result {
		switch l.name {
		case "lost":
			return Result{TTL: time.Second, Lost: true, Err: errAway}
		case "limit":
			return Result{}
		case "flaky":
			if n == 1 {
				return Result{TTL: time.Second, Err: errAway}
			}
		}
		return Result{TTL: time.Second}
	}}
	d := New(r.config())
	defer d.Close()
	now := time.Now()
	lost := &lease{name: "lost", interval: 5 * time.Millisecond}
	limit := &lease{name: "limit", interval: 5 * time.Millisecond}
	// flaky is first due 10 ms from now and fails: retried a quarter interval later
	// (+110 ms), not a period later (+410 ms). witness is first due at +310 ms: flaky's
	// retry must come before it, or in the same batch when the machine stalled.
	flaky := &lease{name: "flaky", interval: 400 * time.Millisecond}
	witness := &lease{name: "witness", interval: 300 * time.Millisecond}
	d.Add(&lost.e, lost, now)
	d.Add(&limit.e, limit, now)
	d.Add(&flaky.e, flaky, now.Add(-390*time.Millisecond))
	d.Add(&witness.e, witness, now.Add(10*time.Millisecond))
	waitFor(t, "flaky's retry and witness's renewal", func() bool {
		return r.renewals("flaky") >= 2 && r.renewals("witness") >= 1
	})
	if n := r.renewals("lost"); n != 1 {
		t.Errorf("lost lease renewed %d times, want 1", n)
	}
	if n := r.renewals("limit"); n != 1 {
		t.Errorf("lease at its limit renewed %d times, want 1", n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	batchOf := func(name string, nth int) int {
		for i, names := range r.sent {
			for _, n := range names {
				if n == name {
					if nth--; nth == 0 {
						return i
					}
				}
			}
		}
		return -1
	}
	if retry, w := batchOf("flaky", 2), batchOf("witness", 1); retry > w {
		t.Errorf("flaky's retry came in batch %d, after witness's first renewal in batch %d: a failed renewal waited for its next period", retry, w)
	}
}

// Leases due within a few milliseconds of each other go in one batch.
func TestBatches(t *testing.T) {
	r := &recorder{}
	d := New(r.config())
	defer d.Close()
	// All three due at one instant, a little ahead: the first Add starts the Dog's
	// goroutine, which must not find "a" due before "b" and "c" are in (due at once, it
	// could send "a" alone: the test failed so on a loaded machine).
	due := time.Now().Add(-time.Hour + 300*time.Millisecond)
	var ls []*lease
	for _, name := range []string{"a", "b", "c"} {
		l := &lease{name: name, interval: time.Hour}
		ls = append(ls, l)
		d.Add(&l.e, l, due)
	}
	waitFor(t, "a renewal of each", func() bool {
		return r.renewals("a") == 1 && r.renewals("b") == 1 && r.renewals("c") == 1
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sent) != 1 || len(r.sent[0]) != 3 {
		t.Errorf("batches sent: %v, want one of three", r.sent)
	}
}

// Remove with wait waits for a renewal of the lease in flight (up to its bound), and a
// lease removed while its renewal was in flight is reported not live and not renewed
// again.
func TestRemoveInFlight(t *testing.T) {
	r := &recorder{block: make(chan struct{}), inSend: make(chan struct{}, 1)}
	d := New(r.config())
	defer d.Close()
	a := &lease{name: "a", interval: time.Millisecond}
	d.Add(&a.e, a, time.Now().Add(-time.Second))
	<-r.inSend
	removed := make(chan struct{})
	go func() {
		d.Remove(context.Background(), &a.e, true)
		close(removed)
	}()
	select {
	case <-removed:
		t.Fatal("Remove returned while the renewal was in flight, before its bound")
	case <-time.After(20 * time.Millisecond):
	}
	close(r.block)
	<-removed
	r.inSend = nil
	waitFor(t, "the batch's report", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.reported) == 1
	})
	r.mu.Lock()
	live := r.reported[0]["a"]
	r.mu.Unlock()
	if live {
		t.Error("a lease removed during its renewal was reported live")
	}
	time.Sleep(20 * time.Millisecond)
	if n := r.renewals("a"); n != 1 {
		t.Errorf("renewed %d times, want 1", n)
	}
}

// Remove with wait returns within ctx while a renewal stalls, and the Dog's goroutine
// ends with Close; after Close nothing is added.
func TestRemoveBoundedAndClose(t *testing.T) {
	r := &recorder{block: make(chan struct{}), inSend: make(chan struct{}, 1)}
	d := New(r.config())
	a := &lease{name: "a", interval: time.Millisecond}
	d.Add(&a.e, a, time.Now().Add(-time.Second))
	<-r.inSend
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d.Remove(ctx, &a.e, true) // returns at once: ctx is done
	close(r.block)
	d.Close()
	b := &lease{name: "b", interval: time.Millisecond}
	d.Add(&b.e, b, time.Now().Add(-time.Second))
	time.Sleep(10 * time.Millisecond)
	if n := r.renewals("b"); n != 0 {
		t.Errorf("a closed Dog renewed %d times", n)
	}
	d.Remove(context.Background(), &b.e, true)
}

// The goroutine ends by itself once no lease is left (goleak checks at TestMain), and
// starts again with the next lease.
func TestGoroutineLingersAndEnds(t *testing.T) {
	r := &recorder{}
	d := New(r.config())
	a := &lease{name: "a", interval: time.Millisecond}
	d.Add(&a.e, a, time.Now())
	waitFor(t, "a renewal", func() bool { return r.renewals("a") >= 1 })
	d.Remove(context.Background(), &a.e, false)
	waitFor(t, "the goroutine's end", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return !d.running
	})
	b := &lease{name: "b", interval: time.Millisecond}
	d.Add(&b.e, b, time.Now())
	waitFor(t, "b's renewal", func() bool { return r.renewals("b") >= 1 })
	d.Close()
}

// Remove of an entry that was never added leaves the queue alone.
func TestRemoveNeverAdded(t *testing.T) {
	r := &recorder{}
	d := New(r.config())
	defer d.Close()
	a := &lease{name: "a", interval: 2 * time.Millisecond}
	d.Add(&a.e, a, time.Now())
	var stray Entry[*lease]
	d.Remove(context.Background(), &stray, false)
	waitFor(t, "a's renewals", func() bool { return r.renewals("a") >= 2 })
}

// Soon renews a lease now, not at its time; one whose renewal is in flight when Soon is
// called is renewed once more as soon as that renewal is done; a removed one is not.
func TestSoon(t *testing.T) {
	r := &recorder{}
	d := New(r.config())
	defer d.Close()
	a := &lease{name: "a", interval: time.Hour}
	d.Add(&a.e, a, time.Now())
	d.Soon(&a.e)
	waitFor(t, "a's renewal after Soon, an hour early", func() bool { return r.renewals("a") == 1 })

	r2 := &recorder{block: make(chan struct{}), inSend: make(chan struct{}, 1)}
	d2 := New(r2.config())
	defer d2.Close()
	b := &lease{name: "b", interval: time.Hour}
	d2.Add(&b.e, b, time.Now().Add(-2*time.Hour)) // due at once
	<-r2.inSend
	d2.Soon(&b.e) // during the renewal
	r2.inSend = nil
	close(r2.block)
	waitFor(t, "b's second renewal, right after the one in flight", func() bool { return r2.renewals("b") == 2 })

	d.Remove(context.Background(), &a.e, false)
	d.Soon(&a.e)
	time.Sleep(20 * time.Millisecond)
	if n := r.renewals("a"); n != 1 {
		t.Errorf("a renewed %d times after Remove and Soon, want 1", n)
	}
}

// The goroutine, asleep until the only lease's renewal, lingers from the lease's
// removal, not from the renewal it will not send: Busy(false) comes within the linger,
// not an interval later (it came an hour later here, and under load TestBusy met it).
func TestBusyEndsAfterLastRemoved(t *testing.T) {
	ended := make(chan struct{})
	r := &recorder{}
	cfg := r.config()
	cfg.Busy = func(on bool) {
		if !on {
			close(ended)
		}
	}
	d := New(cfg)
	defer d.Close()
	a := &lease{name: "a", interval: time.Hour}
	d.Add(&a.e, a, time.Now())
	waitFor(t, "the goroutine asleep until a's renewal", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.until.After(time.Now().Add(time.Minute))
	})
	removed := time.Now()
	d.Remove(context.Background(), &a.e, false)
	select {
	case <-ended:
		t.Logf("ended %s after the last lease's removal (linger %s)", time.Since(removed), linger)
	case <-time.After(5 * time.Second):
		t.Fatal("the goroutine did not end within 5s of the last lease's removal: it sleeps until the removed lease's renewal")
	}
}

// Busy is told when the goroutine starts, with the first lease, and when it ends after
// lingering with none, in that order.
func TestBusy(t *testing.T) {
	var mu sync.Mutex
	var calls []bool
	r := &recorder{}
	cfg := r.config()
	cfg.Busy = func(on bool) {
		mu.Lock()
		calls = append(calls, on)
		mu.Unlock()
	}
	d := New(cfg)
	defer d.Close()
	a := &lease{name: "a", interval: time.Hour}
	d.Add(&a.e, a, time.Now())
	d.Remove(context.Background(), &a.e, false)
	waitFor(t, "the goroutine's end", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if !calls[0] || calls[1] {
		t.Fatalf("Busy calls %v, want [true false]", calls)
	}
}
