package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/internal/redistest"
)

// countScript counts its calls in KEYS[1] and answers ARGV[1].
var countScript = script.New("", "redis.call('INCR', KEYS[1]) return ARGV[1]")

// pipeCounter counts the pipelines of script calls a client sends and the commands in
// them (not those of the connection's handshake).
type pipeCounter struct{ pipes, cmds atomic.Int64 }

func (p *pipeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (p *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "evalsha" && cmds[0].Name() != "eval" {
			return next(ctx, cmds)
		}
		p.pipes.Add(1)
		p.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// call runs countScript on key through c, not urgent, and checks that it answers arg.
func call(ctx context.Context, c *Conn, key, arg string) error {
	v, err := c.RunScript(ctx, countScript, []any{nil, nil, 1, key, arg}, false).Text()
	if err == nil && v != arg {
		err = fmt.Errorf("the call with %q got %q: another call's reply", arg, v)
	}
	return err
}

// TestBatchJoinsConcurrentCalls: on a plain client, calls from concurrent goroutines that
// meet in time share pipelines, each gets its own reply, and every call runs once; a lone
// call goes out alone (no pipeline).
func TestBatchJoinsConcurrentCalls(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	pc := &pipeCounter{}
	c.AddHook(pc)
	s := NewSingle(c)
	if !s.AutoPipelined() {
		t.Fatal("a plain client that honours deadlines is not batched")
	}
	ctx := context.Background()

	for i := range 5 {
		if err := call(ctx, &s.Conn, "lone", strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := pc.pipes.Load(); n != 0 {
		t.Fatalf("calls made one after another went out in %d pipelines, want none", n)
	}

	const workers, each = 32, 50
	concurrently(t, workers, each, func(w, i int) error {
		return call(ctx, &s.Conn, "many", strconv.Itoa(w*each+i))
	})
	if n, _ := c.Get(ctx, "many").Int(); n != workers*each {
		t.Fatalf("the script ran %d times for %d calls", n, workers*each)
	}
	pipes, cmds := pc.pipes.Load(), pc.cmds.Load()
	if pipes == 0 || s.Batches() == 0 {
		t.Fatalf("%d concurrent calls: %d pipelines, %d batches; want them to share pipelines", workers*each, pipes, s.Batches())
	}
	t.Logf("%d calls from %d goroutines: %d pipelines carried %d of them (%.1f each)", workers*each, workers, pipes, cmds, float64(cmds)/float64(pipes))
}

// TestBatchCallerLeavesAtItsDeadline: a call queued behind the calls in flight to a frozen
// server returns at its own deadline, while the server is still frozen, with the
// context's error in its chain; it is not sent once its context ended (Settled then
// returns), and the calls in flight still run once the server thaws.
func TestBatchCallerLeavesAtItsDeadline(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	s := NewSingle(c)
	ctx := context.Background()
	if err := call(ctx, &s.Conn, "warm", "0"); err != nil { // loads the script
		t.Fatal(err)
	}

	srv.Pause(t)
	first := make(chan error, lanes)
	for i := range lanes {
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			first <- call(ctx, &s.Conn, "n", "first"+strconv.Itoa(i))
		}()
	}
	waitFor(t, "the first calls in flight", func() bool {
		l := s.batch.lane(ctx, "n")
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.flying == lanes
	})
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := call(short, &s.Conn, "n", "second")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the queued call returned %v, want its context's deadline", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the first call returned (%v) before the server thawed", err)
	default:
	}
	srv.Resume(t)
	for range lanes {
		if err := <-first; err != nil {
			t.Fatalf("a call in flight: %v", err)
		}
	}
	settle, cancelSettle := context.WithTimeout(ctx, 10*time.Second)
	defer cancelSettle()
	// Settled may be asked again (an undo after a release, say): it returns each time.
	for range 2 {
		Settled(settle, err)
		if settle.Err() != nil {
			t.Fatal("Settled did not return once the queued call was dropped")
		}
	}
	if n, _ := c.Get(ctx, "n").Int(); n != lanes {
		t.Fatalf("the script ran %d times; want %d, the calls in flight: the call whose context ended in the queue is not sent", n, lanes)
	}
}

// TestBatchPerClusterNode: on a Cluster client, concurrent calls on keys of every primary
// are batched per node (one lane each) and all run once, each with its own reply.
func TestBatchPerClusterNode(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterPrimaries(2), redistest.ClusterReplicas(0))
	c := cl.Client(t, func(o *redis.ClusterOptions) { o.ContextTimeoutEnabled = true })
	s := NewSingle(c)
	ctx := context.Background()
	keys := []string{"{a}n", "{b}n", "{c}n", "{d}n"}
	nodes := map[string]bool{}
	for _, k := range keys {
		nodes[cl.NodeForKey(k).Addr()] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("the keys %v are all on one node", keys)
	}
	const workers, each = 16, 40
	concurrently(t, workers, each, func(w, i int) error {
		return call(ctx, &s.Conn, keys[(w+i)%len(keys)], strconv.Itoa(w*each+i))
	})
	total := 0
	for _, k := range keys {
		n, _ := c.Get(ctx, k).Int()
		total += n
	}
	if total != workers*each {
		t.Fatalf("the script ran %d times for %d calls", total, workers*each)
	}
	s.batch.mu.Lock()
	lanes := len(s.batch.nodes)
	s.batch.mu.Unlock()
	if lanes != len(nodes) {
		t.Fatalf("%d lanes for keys on %d nodes", lanes, len(nodes))
	}
	if s.Batches() == 0 {
		t.Fatal("no call was batched")
	}
}

// concurrently runs fn(w, i) for i < each on each of workers goroutines, and fails t
// with the first error.
func concurrently(t *testing.T, workers, each int, fn func(w, i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := fn(w, i); err != nil {
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

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not after 10s", what)
		}
	}
}
