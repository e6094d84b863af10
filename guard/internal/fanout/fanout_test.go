package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/fanout"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/internal/redistest"
)

// owner stands for the fan-out's owner (a Locker): it runs functions aside on
// goroutines it waits for when it closes.
type owner struct {
	mu     sync.Mutex
	wg     sync.WaitGroup
	closed bool
	done   chan struct{}
}

func newOwner(t *testing.T) *owner {
	o := &owner{done: make(chan struct{})}
	t.Cleanup(o.close)
	return o
}

func (o *owner) aside(fn func()) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		fn()
	}()
	return true
}

func (o *owner) close() {
	o.mu.Lock()
	if !o.closed {
		o.closed = true
		close(o.done)
	}
	o.mu.Unlock()
	o.wg.Wait()
}

// funcNode is a server of the function rounds: they make no script calls.
type funcNode struct{}

func (funcNode) Run(context.Context, *script.Script, []any) *redis.Cmd { panic("no script calls") }
func (funcNode) Legacy() bool                                          { return false }
func (funcNode) Pipeline() redis.Pipeliner                             { panic("no script calls") }

func funcNodes(n int) []fanout.Node {
	nodes := make([]fanout.Node, n)
	for i := range nodes {
		nodes[i] = funcNode{}
	}
	return nodes
}

var errBusy = errors.New("busy")

// vote is a round's Ops that needs need answers without error and is lost once more
// than the rest failed; a reply of errBusy contests it.
type vote struct {
	need, n   int
	call      func(ctx context.Context, i int) (any, error)
	line      func(i int) (*script.Script, []any)
	stale     atomic.Bool
	taken     []fanout.Reply // under the round's lock
	took      chan int       // the servers whose replies Take was handed, in order
	ok, fails int
	busy      bool
	late      chan fanout.Reply
}

func newVote(need, n int) *vote {
	return &vote{need: need, n: n, late: make(chan fanout.Reply, 1000), took: make(chan int, 100)}
}

func (v *vote) Take(r fanout.Reply) bool {
	v.taken = append(v.taken, r)
	v.took <- r.I
	if r.Err == nil {
		v.ok++
	} else {
		v.fails++
		v.busy = v.busy || errors.Is(r.Err, errBusy)
	}
	return v.ok >= v.need || v.fails > v.n-v.need
}

func (v *vote) Late(r fanout.Reply) { v.late <- r }
func (v *vote) Contested() bool     { return v.busy }

func (v *vote) Call(ctx context.Context, i int) (any, error) { return v.call(ctx, i) }

// scriptVote is a vote whose calls are script calls.
type scriptVote struct{ *vote }

func (v scriptVote) Line(i int) (*script.Script, []any) { return v.line(i) }
func (v scriptVote) Stale() bool                        { return v.stale.Load() }

// round runs ops on f in the background and returns a channel closed when Round has
// returned and one closed when the round's last call has (its cancel).
func round(ctx context.Context, f *fanout.Fanout, lim fanout.Limits, rs *fanout.Run, ops fanout.Ops) (returned, last chan struct{}) {
	returned, last = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(returned)
		f.Round(ctx, func() { close(last) }, lim, rs, ops)
	}()
	return returned, last
}

// gate returns a channel that calls wait on and the function that opens it, which the
// test's cleanup calls too, before its owner closes: a test that fails early does not
// leave calls waiting on it.
func gate(t *testing.T) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return ch, release
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}

func lateReply(t *testing.T, v *vote) fanout.Reply {
	t.Helper()
	select {
	case r := <-v.late:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no late reply within 10s")
		return fanout.Reply{}
	}
}

// funcFanout returns a Fanout over three servers of function rounds, its owner closed
// at the test's end.
func funcFanout(t *testing.T) *fanout.Fanout {
	o := newOwner(t)
	f := fanout.New(funcNodes(3))
	f.Start(o.aside, o.done, 0)
	return f
}

// answers returns a call that answers server i with i, once hold opens for the servers
// in held.
func answers(hold <-chan struct{}, held ...int) func(context.Context, int) (any, error) {
	return func(_ context.Context, i int) (any, error) {
		if slices.Contains(held, i) {
			<-hold
		}
		return i, nil
	}
}

// givenUp fails t unless Take's last reply gave server i up with ErrSilent.
func givenUp(t *testing.T, v *vote, i int) {
	t.Helper()
	if got := v.taken[len(v.taken)-1]; got.I != i || !errors.Is(got.Err, fanout.ErrSilent) {
		t.Fatalf("Take's last reply %+v, want server %d given up with ErrSilent", got, i)
	}
}

// lateFrom fails t unless the next late reply is server i's, without error.
func lateFrom(t *testing.T, v *vote, i int) {
	t.Helper()
	if r := lateReply(t, v); r.I != i || r.Err != nil {
		t.Fatalf("late reply %+v, want server %d's", r, i)
	}
}

// A round returns once a majority decided it; the silent server's reply, when it comes,
// goes to Late, and the round's cancel runs after that last call.
func TestRoundDecidedByMajority(t *testing.T) {
	f := funcFanout(t)
	hold, release := gate(t)
	v := newVote(2, 3)
	v.call = answers(hold, 2)
	var rs fanout.Run
	returned, last := round(context.Background(), f, fanout.Limits{}, &rs, v)
	wait(t, returned, "the round decided by servers 0 and 1")
	if len(v.taken) != 2 {
		t.Fatalf("Take saw %v, want the replies of servers 0 and 1 only", v.taken)
	}
	select {
	case <-last:
		t.Fatal("the round's cancel ran while server 2's call was still out")
	default:
	}
	release()
	if r := lateReply(t, v); r.I != 2 || r.V != 2 || r.Err != nil {
		t.Fatalf("late reply %+v, want server 2's value", r)
	}
	wait(t, last, "the round's cancel after its last call")
}

// A contested round gives its silent servers up once the budget has passed (ErrSilent);
// their replies still go to Late.
func TestContestedRoundGivesUpAtBudget(t *testing.T) {
	f := funcFanout(t)
	hold, release := gate(t)
	v := newVote(2, 3)
	v.call = func(_ context.Context, i int) (any, error) {
		switch i {
		case 0:
			return nil, errBusy
		case 2:
			<-hold
		}
		return i, nil
	}
	var rs fanout.Run
	returned, last := round(context.Background(), f, fanout.Limits{Budget: 10 * time.Millisecond, Patience: time.Hour}, &rs, v)
	wait(t, returned, "a contested round past its budget")
	givenUp(t, v, 2)
	release()
	lateFrom(t, v, 2)
	wait(t, last, "the round's cancel")
}

// An uncontested round waits for a server that answers after the budget: slow is not
// down.
func TestUncontestedRoundWaitsPastBudget(t *testing.T) {
	f := funcFanout(t)
	v := newVote(3, 3)
	v.call = func(_ context.Context, i int) (any, error) {
		if i == 2 {
			time.Sleep(100 * time.Millisecond) // ten budgets
		}
		return i, nil
	}
	var rs fanout.Run
	returned, last := round(context.Background(), f, fanout.Limits{Budget: 10 * time.Millisecond, Patience: time.Hour}, &rs, v)
	wait(t, returned, "the round")
	if v.ok != 3 {
		t.Fatalf("Take saw %+v, want every server's value", v.taken)
	}
	wait(t, last, "the round's cancel")
}

// Past its patience a round gives its silent servers up, contested or not.
func TestRoundGivesUpAtPatience(t *testing.T) {
	f := funcFanout(t)
	hold, release := gate(t)
	v := newVote(3, 3)
	v.call = answers(hold, 2)
	var rs fanout.Run
	returned, last := round(context.Background(), f, fanout.Limits{Budget: 10 * time.Millisecond, Patience: 50 * time.Millisecond}, &rs, v)
	wait(t, returned, "an uncontested round past its patience")
	givenUp(t, v, 2)
	release()
	lateFrom(t, v, 2)
	wait(t, last, "the round's cancel")
}

// A round whose context ends hands its silent servers to Take with the context's error;
// a call that ignores its context still reports to Late.
func TestRoundEndsWithContext(t *testing.T) {
	f := funcFanout(t)
	hold, release := gate(t)
	v := newVote(2, 3)
	v.call = answers(hold, 1, 2) // a client that does not give up at its context's end
	ctx, cancel := context.WithCancel(context.Background())
	var rs fanout.Run
	returned, last := round(ctx, f, fanout.Limits{Patience: time.Hour}, &rs, v)
	select {
	case <-v.took: // server 0's
	case <-time.After(10 * time.Second):
		t.Fatal("server 0's reply not taken within 10s")
	}
	cancel()
	wait(t, returned, "the round after its context ended")
	var silent []int
	for _, r := range v.taken {
		if errors.Is(r.Err, context.Canceled) {
			silent = append(silent, r.I)
		}
	}
	if fmt.Sprint(silent) != "[1 2]" {
		t.Fatalf("Take saw %+v, want servers 1 and 2 given up with context.Canceled", v.taken)
	}
	release()
	seen := []int{lateReply(t, v).I, lateReply(t, v).I}
	sort.Ints(seen)
	if fmt.Sprint(seen) != "[1 2]" {
		t.Fatalf("late replies from %v, want servers 1 and 2", seen)
	}
	wait(t, last, "the round's cancel")
}

// Once its owner is closed, a round still runs, on the caller's goroutine.
func TestRoundAfterClose(t *testing.T) {
	o := newOwner(t)
	f := fanout.New(funcNodes(3))
	f.Start(o.aside, o.done, 0)
	o.close()
	v := newVote(2, 3)
	v.call = func(_ context.Context, i int) (any, error) { return i, nil }
	var rs fanout.Run
	returned, last := round(context.Background(), f, fanout.Limits{}, &rs, v)
	wait(t, returned, "the round")
	wait(t, last, "the round's cancel")
	if v.ok < 2 {
		t.Fatalf("Take saw %+v, want a majority of values", v.taken)
	}
}

func TestBudgetAndPatience(t *testing.T) {
	f := fanout.New(funcNodes(3))
	f.Start(nil, nil, 0)
	if got := f.Budget(30 * time.Second); got != 20*time.Millisecond {
		t.Errorf("Budget before any reply = %v, want the 20ms floor", got)
	}
	if got := f.Budget(100 * time.Millisecond); got != 10*time.Millisecond {
		t.Errorf("Budget for a 100ms TTL = %v, want a tenth of it", got)
	}
	if got := f.Patience(30*time.Second, 29*time.Second); got != time.Second {
		t.Errorf("Patience = %v, want a second (more than 8 budgets)", got)
	}
	if got := f.Patience(30*time.Second, 500*time.Millisecond); got != 500*time.Millisecond {
		t.Errorf("Patience within a 500ms validity = %v, want 500ms", got)
	}
	fixed := fanout.New(funcNodes(3))
	fixed.Start(nil, nil, 2*time.Second)
	if got := fixed.Budget(time.Second); got != 2*time.Second {
		t.Errorf("fixed Budget = %v, want 2s", got)
	}
	if got := fixed.Patience(time.Minute, time.Second); got != 2*time.Second {
		t.Errorf("Patience with a 2s budget within a 1s validity = %v, want one budget", got)
	}
}

// clientNode is a server of the script rounds (its client counts its round trips:
// tripCounter).
type clientNode struct{ c *redis.Client }

func (n clientNode) Run(ctx context.Context, s *script.Script, args []any) *redis.Cmd {
	sha, src := s.Form(false)
	args[0], args[1] = "evalsha", sha
	cmd := n.c.Do(ctx, args...)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = "eval", src
		cmd = n.c.Do(ctx, args...)
	}
	return cmd
}
func (n clientNode) Legacy() bool              { return false }
func (n clientNode) Pipeline() redis.Pipeliner { return n.c.Pipeline() }

// scripted reports whether cmd runs a script (the client's own HELLO and CLIENT
// SETINFO on a new connection are not the fan-out's).
func scripted(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }

// tripCounter counts a client's round trips that run scripts: a command or a pipeline
// each.
type tripCounter struct{ n *atomic.Int64 }

func (h tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if scripted(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if scripted(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func scriptNodes(t *testing.T, servers []*redistest.Server) ([]fanout.Node, []*atomic.Int64) {
	nodes := make([]fanout.Node, len(servers))
	trips := make([]*atomic.Int64, len(servers))
	for i, s := range servers {
		trips[i] = new(atomic.Int64)
		c := s.Client(t)
		c.AddHook(tripCounter{trips[i]})
		nodes[i] = clientNode{c}
	}
	return nodes, trips
}

var incr = script.New("", "return redis.call('INCR', KEYS[1])")

// The script calls of rounds made while a server's batch is out wait, and go out
// together in its next batch: one round trip for them all. A new script (NOSCRIPT in the
// pipeline) is sent again alone, and every call runs once.
func TestScriptCallsShareBatches(t *testing.T) {
	for _, loaded := range []bool{true, false} {
		t.Run(fmt.Sprintf("loaded=%t", loaded), func(t *testing.T) {
			servers := redistest.StartN(t, 3)
			nodes, trips := scriptNodes(t, servers)
			o := newOwner(t)
			f := fanout.New(nodes)
			f.Start(o.aside, o.done, 0)
			first, rest := incr, incr
			if loaded {
				for _, s := range servers {
					_, src := incr.Form(false)
					if err := s.Client(t).ScriptLoad(context.Background(), src.(string)).Err(); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				// A script the server has not seen reaches it first in a pipeline.
				rest = script.New("", "return redis.call('INCR', KEYS[1]) -- the rest")
			}
			servers[0].Pause(t)
			const rounds = 50
			votes := make([]*vote, rounds)
			lasts := make([]chan struct{}, rounds)
			for k := range rounds {
				s := first
				if k > 0 {
					s = rest
				}
				v := newVote(2, 3)
				v.line = func(int) (*script.Script, []any) { return s, []any{"", "", 1, "n"} }
				votes[k] = v
				var rs fanout.Run
				var returned chan struct{}
				returned, lasts[k] = round(context.Background(), f, fanout.Limits{}, &rs, scriptVote{v})
				wait(t, returned, "a round decided by servers 1 and 2")
				if k == 0 {
					waitTrips(t, trips[0], 1) // the first batch is out
				}
			}
			servers[0].Resume(t)
			var values []int
			for k, v := range votes {
				r := lateReply(t, v)
				if r.I != 0 || r.Err != nil {
					t.Fatalf("round %d: late reply %+v, want server 0's value", k, r)
				}
				n, err := r.V.(*redis.Cmd).Int()
				if err != nil {
					t.Fatalf("round %d: %v", k, err)
				}
				values = append(values, n)
				wait(t, lasts[k], "the round's cancel")
			}
			sort.Ints(values)
			for k, n := range values {
				if n != k+1 {
					t.Fatalf("server 0's INCR replies %v, want 1 to %d: every call once", values, rounds)
				}
			}
			want := int64(2) // the first call alone, then the rest in one pipeline
			if !loaded {
				want = 2 + 2*(rounds-1) // and each of the rest again alone: EVALSHA, then EVAL
			}
			if got := trips[0].Load(); got > want || loaded && got != want {
				t.Fatalf("server 0 took %d round trips for %d rounds, want %d", got, rounds, want)
			}
		})
	}
}

// A call still waiting in its server's batch when its round is over (StaleCall) is not
// sent: its round's Late gets ErrNotSent.
func TestStaleCallNotSent(t *testing.T) {
	servers := redistest.StartN(t, 3)
	nodes, trips := scriptNodes(t, servers)
	o := newOwner(t)
	f := fanout.New(nodes)
	f.Start(o.aside, o.done, 0)
	servers[0].Pause(t)
	var votes []*vote
	var lasts []chan struct{}
	for k := range 2 {
		v := newVote(2, 3)
		v.line = func(int) (*script.Script, []any) { return incr, []any{"", "", 1, "n"} }
		var rs fanout.Run
		returned, last := round(context.Background(), f, fanout.Limits{}, &rs, scriptVote{v})
		wait(t, returned, "a round decided by servers 1 and 2")
		votes, lasts = append(votes, v), append(lasts, last)
		if k == 0 {
			waitTrips(t, trips[0], 1) // the first call is out; the second waits in the batch
		}
	}
	votes[1].stale.Store(true)
	servers[0].Resume(t)
	if r := lateReply(t, votes[0]); r.Err != nil {
		t.Fatalf("the first round's late reply %+v, want server 0's value", r)
	}
	if r := lateReply(t, votes[1]); !errors.Is(r.Err, fanout.ErrNotSent) {
		t.Fatalf("the stale round's late reply %+v, want ErrNotSent", r)
	}
	for _, last := range lasts {
		wait(t, last, "the round's cancel")
	}
	n, err := servers[0].Client(t).Get(context.Background(), "n").Int()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("server 0 ran %d calls, want 1: the stale one was sent", n)
	}
}

// waitTrips waits until n round trips were counted.
func waitTrips(t *testing.T, trips *atomic.Int64, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); trips.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d round trips within 10s, want %d", trips.Load(), n)
		}
	}
}
