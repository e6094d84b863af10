package guard_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/guard/semconv"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/internal/testproc"
)

// cyclerEnv, when set, makes the test binary a cycler process: it takes the first of
// its keys (Do), says "held", and when it reads a line on stdin takes the second one
// inside the first one's section, says what came of it, releases both and exits. With
// two or three cyclers whose keys chain round, the second acquisitions form a cycle.
const cyclerEnv = "GUARDKIT_TEST_CYCLER"

type cyclerSpec struct {
	Addrs   []string      `json:"addrs"`
	Cluster bool          `json:"cluster"`
	Keys    [2]string     `json:"keys"`
	Kinds   [2]string     `json:"kinds"` // "" exclusive, "read", "write", "fair"
	Delay   time.Duration `json:"delay"` // DeadlockDetection
	Label   string        `json:"label"`
}

func kindOption(kind string) guard.Option {
	switch kind {
	case "read":
		return guard.Read()
	case "write":
		return guard.Write()
	case "fair":
		return guard.Fair()
	}
	return guard.Option{}
}

// cyclerLine is what a cycler says, one JSON object a line.
type cyclerLine struct {
	Event  string   `json:"event"` // held, waiting, granted, deadlock, released, error
	At     int64    `json:"at"`    // Unix ns
	Keys   []string `json:"keys,omitempty"`
	Labels []string `json:"labels,omitempty"`
	Error  string   `json:"error,omitempty"`
	Waited float64  `json:"waited,omitempty"` // seconds the victim waited
	Calls  int      `json:"calls,omitempty"`  // Redis calls of its detection
	Walks  int      `json:"walks,omitempty"`  // walks of the graph it made
	Took   float64  `json:"took,omitempty"`   // seconds its finding walk and confirmation took
}

func say(l cyclerLine) {
	l.At = time.Now().UnixNano()
	b, _ := json.Marshal(l)
	fmt.Println(string(b))
}

func runCycler(raw string) int {
	var s cyclerSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "cycler:", err)
		return 2
	}
	var c redis.UniversalClient = redis.NewClient(&redis.Options{Addr: s.Addrs[0]})
	if s.Cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs})
	}
	defer c.Close()
	l, err := guard.New(c, guard.DeadlockDetection(s.Delay), guard.Label(s.Label))
	if err != nil {
		fmt.Fprintln(os.Stderr, "cycler:", err)
		return 2
	}
	defer l.Close()
	in := bufio.NewReader(os.Stdin)
	ctx := context.Background()
	err = guard.Do(ctx, func(ctx context.Context) error {
		say(cyclerLine{Event: "held"})
		if _, err := in.ReadString('\n'); err != nil {
			return err
		}
		say(cyclerLine{Event: "waiting"})
		err := guard.Do(ctx, func(ctx context.Context) error {
			say(cyclerLine{Event: "granted"})
			return nil
		}, guard.Key(s.Keys[1]), kindOption(s.Kinds[1]), guard.Use(l), guard.Retry(guard.MaxWait(20*time.Second, nil)))
		// Said before returning: Do releases the first key after this.
		var de *guard.DeadlockError
		if errors.As(err, &de) {
			calls, walks := guard.DeadlockCalls(de)
			line := cyclerLine{Event: "deadlock", Error: err.Error(), Waited: guard.DeadlockWaited(de).Seconds(),
				Calls: calls, Walks: walks, Took: guard.DeadlockTook(de).Seconds()}
			for _, e := range de.Cycle {
				line.Keys = append(line.Keys, e.Key)
				line.Labels = append(line.Labels, e.Label)
			}
			say(line)
		}
		return err
	}, guard.Key(s.Keys[0]), kindOption(s.Kinds[0]), guard.Use(l))
	if err != nil && !errors.Is(err, guard.ErrDeadlock) {
		say(cyclerLine{Event: "error", Error: err.Error()})
	}
	say(cyclerLine{Event: "released"})
	return 0
}

// cycler is a cycler process started by startCycler.
type cycler struct {
	name  string
	stdin io.Writer
	lines chan cyclerLine
}

func startCycler(t *testing.T, name string, spec cyclerSpec) *cycler {
	t.Helper()
	if spec.Label == "" {
		spec.Label = name
	}
	p := testproc.Start(t, cyclerEnv, spec)
	c := &cycler{name: name, stdin: p.Stdin, lines: make(chan cyclerLine, 16)}
	go func() { // ends when the process's output does
		defer close(c.lines)
		for text := range p.Lines {
			var l cyclerLine
			if err := json.Unmarshal([]byte(text), &l); err != nil {
				t.Errorf("cycler %s: %q: %v", name, text, err)
				continue
			}
			c.lines <- l
		}
	}()
	return c
}

// next returns the cycler's next line, failing the test after d.
func (c *cycler) next(t *testing.T, d time.Duration) cyclerLine {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("cycler %s exited", c.name)
		}
		return l
	case <-time.After(d):
		t.Fatalf("cycler %s said nothing for %s", c.name, d)
	}
	return cyclerLine{}
}

// expect returns the cycler's next line, which must be event.
func (c *cycler) expect(t *testing.T, event string, d time.Duration) cyclerLine {
	t.Helper()
	l := c.next(t, d)
	if l.Event != event {
		t.Fatalf("cycler %s said %+v, want %s", c.name, l, event)
	}
	return l
}

// runCycle starts one cycler per spec, lets each take its first key, then has all of
// them ask for their second at once, and checks the outcome: exactly one deadlock,
// naming every key of the cycle, and every other cycler granted after the victim
// released, within 2s of the cycle forming. It returns the victim's report.
func runCycle(t *testing.T, specs []cyclerSpec) cyclerLine {
	t.Helper()
	cs := make([]*cycler, len(specs))
	for i, s := range specs {
		cs[i] = startCycler(t, fmt.Sprintf("p%d", i+1), s)
	}
	for _, c := range cs {
		c.expect(t, "held", 20*time.Second)
	}
	for _, c := range cs {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var formed int64
	for _, c := range cs {
		formed = max(formed, c.expect(t, "waiting", 5*time.Second).At)
	}
	var victim cyclerLine
	victims, victimAt := 0, int64(0)
	var granted []int64
	for _, c := range cs {
		switch l := c.next(t, 30*time.Second); l.Event {
		case "deadlock":
			victims++
			victim = l
			victimAt = l.At // just before its function returned and Do released its first key
			c.expect(t, "released", 5*time.Second)
			t.Logf("%s chosen: %s", c.name, l.Error)
		case "granted":
			granted = append(granted, l.At)
			c.expect(t, "released", 5*time.Second)
		default:
			t.Fatalf("cycler %s: %+v, want deadlock or granted", c.name, l)
		}
	}
	if victims != 1 {
		t.Fatalf("%d victims, want exactly 1", victims)
	}
	var last int64
	for _, g := range granted {
		if g < victimAt {
			t.Errorf("a cycler was granted %s before the victim gave its locks back", time.Duration(victimAt-g))
		}
		last = max(last, g)
	}
	want := map[string]bool{}
	for _, s := range specs {
		want[s.Keys[0]] = true
	}
	got := map[string]bool{}
	for _, k := range victim.Keys {
		got[k] = true
	}
	if len(victim.Keys) != len(specs) || len(got) != len(want) {
		t.Errorf("the cycle names %q, want the %d keys %v", victim.Keys, len(specs), want)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("the cycle %q does not name %q", victim.Keys, k)
		}
	}
	resolved := time.Duration(last - formed)
	t.Logf("cycle of %d formed; victim waited %.3fs; its detection: %d walks, %d Redis calls in all, the finding walk and its confirmation %.1fms; the others granted %s after it formed, %s after the victim began to release",
		len(specs), victim.Waited, victim.Walks, victim.Calls, victim.Took*1000, resolved, time.Duration(last-victimAt))
	if resolved > 2*time.Second {
		t.Errorf("resolved %s after the cycle formed, want within 2s (detection delay 1s)", resolved)
	}
	return victim
}

// TestDeadlockTwoProcesses: process 1 holds "a" and waits for "b", process 2 holds "b"
// and waits for "a". Exactly one of them fails with ErrDeadlock naming both keys, and
// the other is granted right after the victim's release.
func TestDeadlockTwoProcesses(t *testing.T) {
	srv := redistest.Start(t)
	addrs := []string{srv.Addr()}
	v := runCycle(t, []cyclerSpec{
		{Addrs: addrs, Keys: [2]string{"a", "b"}, Delay: time.Second},
		{Addrs: addrs, Keys: [2]string{"b", "a"}, Delay: time.Second},
	})
	for _, l := range v.Labels {
		if l != "p1" && l != "p2" {
			t.Errorf("holder labels %q, want p1 and p2", v.Labels)
		}
	}
}

// TestDeadlockThreeProcesses: X→Y→Z→X across three processes.
func TestDeadlockThreeProcesses(t *testing.T) {
	srv := redistest.Start(t)
	addrs := []string{srv.Addr()}
	runCycle(t, []cyclerSpec{
		{Addrs: addrs, Keys: [2]string{"x", "y"}, Delay: time.Second},
		{Addrs: addrs, Keys: [2]string{"y", "z"}, Delay: time.Second},
		{Addrs: addrs, Keys: [2]string{"z", "x"}, Delay: time.Second},
	})
}

// TestDeadlockKinds: cycles of read-write and fair locks between two processes. A
// writer waits for a reader; a fair lock's waiter for its holder.
func TestDeadlockKinds(t *testing.T) {
	srv := redistest.Start(t)
	addrs := []string{srv.Addr()}
	for _, tc := range []struct {
		name   string
		k1, k2 [2]string
	}{
		{"write-write", [2]string{"write", "write"}, [2]string{"write", "write"}},
		{"read-write", [2]string{"read", "write"}, [2]string{"read", "write"}},
		{"fair", [2]string{"fair", "fair"}, [2]string{"fair", "fair"}},
		{"fair-exclusive", [2]string{"fair", ""}, [2]string{"", "fair"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.name+":a", tc.name+":b"
			runCycle(t, []cyclerSpec{
				{Addrs: addrs, Keys: [2]string{a, b}, Kinds: tc.k1, Delay: time.Second},
				{Addrs: addrs, Keys: [2]string{b, a}, Kinds: tc.k2, Delay: time.Second},
			})
		})
	}
}

// TestDeadlockCluster: the AB/BA cycle on a 3-primary Cluster with the two keys on
// different primaries, so that no one script sees the whole cycle.
func TestDeadlockCluster(t *testing.T) {
	c := cluster.Get(t)
	ps := c.Primaries()
	if len(ps) < 3 {
		t.Fatalf("cluster has %d primaries, want 3", len(ps))
	}
	a, b := keyOn(t, c, ps[0], "dla"), keyOn(t, c, ps[1], "dlb")
	runCycle(t, []cyclerSpec{
		{Addrs: c.Addrs(), Cluster: true, Keys: [2]string{a, b}, Delay: time.Second},
		{Addrs: c.Addrs(), Cluster: true, Keys: [2]string{b, a}, Delay: time.Second},
	})
}

// TestDeadlockOption: DeadlockDetection is checked in New, naming the field.
func TestDeadlockOption(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	_, err := guard.New(c, guard.DeadlockDetection(-time.Second))
	var ce *guard.ConfigError
	if !errors.As(err, &ce) || ce.Field != "DeadlockDetection" || !strings.Contains(err.Error(), "-1s") {
		t.Fatalf("New with DeadlockDetection(-1s): %v, want a *ConfigError naming DeadlockDetection and the value", err)
	}
	if err := guard.Do(context.Background(), func(context.Context) error { return nil }, guard.Key("k"), guard.DeadlockDetection(time.Second)); !errors.Is(err, guard.ErrInvalidConfig) {
		t.Fatalf("Do with DeadlockDetection: %v, want ErrInvalidConfig (it applies to New)", err)
	}
}

// TestDeadlockOff: with detection off, an AB/BA cycle waits out its budget as before.
func TestDeadlockOff(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv, guard.DeadlockDetection(0))
	ctx := ctxTimeout(t, 20*time.Second)
	errs := make(chan error, 2)
	held := make(chan struct{}, 2)
	start := make(chan struct{})
	for _, keys := range [][2]string{{"a", "b"}, {"b", "a"}} {
		go func() {
			errs <- guard.Do(ctx, func(ctx context.Context) error {
				held <- struct{}{}
				<-start
				return guard.Do(ctx, func(context.Context) error { return nil }, guard.Key(keys[1]), guard.Use(l), guard.Retry(guard.MaxWait(1500*time.Millisecond, nil)))
			}, guard.Key(keys[0]), guard.Use(l))
		}()
	}
	<-held
	<-held
	close(start)
	// The first to give up releases its first key, which may let the other in.
	if err := <-errs; !errors.Is(err, guard.ErrLocked) {
		t.Errorf("with detection off: %v, want ErrLocked once the budget ran out", err)
	}
	if err := <-errs; err != nil && !errors.Is(err, guard.ErrLocked) {
		t.Errorf("with detection off: %v, want ErrLocked or a grant", err)
	}
}

// soakEnv, when set, makes the test binary a soak process of TestDeadlockNoFalseAlarm:
// Goroutines goroutines take, until Duration has passed, one of Keys keys at random or
// two of them in key order (the outer held while the inner is waited for), hold them for
// up to HoldMax, and count the outcomes, which it prints as one JSON line.
const soakEnv = "GUARDKIT_TEST_SOAK"

type soakSpec struct {
	Addrs      []string      `json:"addrs"`
	Cluster    bool          `json:"cluster"`
	Duration   time.Duration `json:"duration"`
	Goroutines int           `json:"goroutines"`
	Keys       int           `json:"keys"`
	HoldMax    time.Duration `json:"hold_max"`
	Delay      time.Duration `json:"delay"`
}

type soakCounts struct {
	Holds    int64    `json:"holds"`
	Deadlock int64    `json:"deadlock"`
	Locked   int64    `json:"locked"`
	Other    int64    `json:"other"`
	Walks    int64    `json:"walks"` // walks of the wait-for graph made
	Errors   []string `json:"errors,omitempty"`
}

func runSoak(raw string) int {
	var s soakSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	var c redis.UniversalClient = redis.NewClient(&redis.Options{Addr: s.Addrs[0]})
	if s.Cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs})
	}
	defer c.Close()
	l, err := guard.New(c, guard.DeadlockDetection(s.Delay), guard.Retry(guard.MaxWait(time.Minute, nil)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 2
	}
	defer l.Close()
	counts := soakRun(l, s)
	counts.Walks = guard.DeadlockWalks(l)
	b, _ := json.Marshal(counts)
	fmt.Println(string(b))
	return 0
}

func soakRun(l *guard.Locker, s soakSpec) soakCounts {
	var mu sync.Mutex
	var n soakCounts
	end := time.Now().Add(s.Duration)
	var wg sync.WaitGroup
	for g := range s.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			hold := func(ctx context.Context) error {
				time.Sleep(time.Duration(rnd.Int64N(int64(s.HoldMax))))
				return nil
			}
			for time.Now().Before(end) {
				i, j := rnd.IntN(s.Keys), rnd.IntN(s.Keys)
				var err error
				if i == j {
					err = guard.Do(context.Background(), hold, guard.Use(l), guard.Key(fmt.Sprintf("soak:%d", i)))
				} else {
					i, j = min(i, j), max(i, j)
					err = guard.Do(context.Background(), func(ctx context.Context) error {
						return guard.Do(ctx, hold, guard.Use(l), guard.Key(fmt.Sprintf("soak:%d", j)))
					}, guard.Use(l), guard.Key(fmt.Sprintf("soak:%d", i)))
				}
				mu.Lock()
				switch {
				case err == nil:
					n.Holds++
				case errors.Is(err, guard.ErrDeadlock):
					n.Deadlock++
					n.Errors = append(n.Errors, err.Error())
				case errors.Is(err, guard.ErrLocked):
					n.Locked++
				default:
					n.Other++
					if len(n.Errors) < 5 {
						n.Errors = append(n.Errors, err.Error())
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return n
}

// soakDuration is how long TestDeadlockNoFalseAlarm runs: a few seconds in make test,
// the minute with GUARDKIT_DEADLOCK_SOAK=1m.
func soakDuration(t *testing.T) time.Duration {
	d := 3 * time.Second
	if v := os.Getenv("GUARDKIT_DEADLOCK_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("GUARDKIT_DEADLOCK_SOAK=%q: %v", v, err)
		}
	}
	return d
}

// TestDeadlockNoFalseAlarm: 3 processes × 16 goroutines on 8 keys, single-key holds and
// two-key holds taken in key order (which can never form a cycle), under heavy
// contention, with detection after 100ms so that waiters walk the graph all the time:
// not one ErrDeadlock.
func TestDeadlockNoFalseAlarm(t *testing.T) {
	srv := redistest.Start(t)
	spec := soakSpec{Addrs: []string{srv.Addr()}, Duration: soakDuration(t), Goroutines: 16, Keys: 8,
		HoldMax: 20 * time.Millisecond, Delay: 100 * time.Millisecond}
	total := runSoakProcesses(t, spec, 3)
	if total.Holds == 0 || total.Walks == 0 || total.Deadlock != 0 || total.Locked != 0 || total.Other != 0 {
		t.Fatalf("%+v: want holds, walks of the graph (detection at work) and not one deadlock or error", total)
	}
}

// runSoakProcesses runs n soak processes and sums their counts.
func runSoakProcesses(t *testing.T, spec soakSpec, n int) soakCounts {
	t.Helper()
	outs := make([]chan soakCounts, n)
	for i := range n {
		p := testproc.Start(t, soakEnv, spec)
		outs[i] = make(chan soakCounts, 1)
		go func() {
			var c soakCounts
			line, ok := <-p.Lines
			if err := json.Unmarshal([]byte(line), &c); !ok || err != nil {
				c.Other, c.Errors = 1, []string{fmt.Sprintf("soak process: %q: %v", line, err)}
			}
			outs[i] <- c
		}()
	}
	var total soakCounts
	for i := range n {
		select {
		case c := <-outs[i]:
			total.Holds += c.Holds
			total.Deadlock += c.Deadlock
			total.Locked += c.Locked
			total.Other += c.Other
			total.Walks += c.Walks
			total.Errors = append(total.Errors, c.Errors...)
		case <-time.After(spec.Duration + 2*time.Minute):
			t.Fatalf("soak process %d did not finish", i)
		}
	}
	t.Logf("%d processes × %d goroutines × %d keys for %s: %d holds, %d walks of the wait-for graph, %d deadlocks, %d busy, %d other errors %q",
		n, spec.Goroutines, spec.Keys, spec.Duration, total.Holds, total.Walks, total.Deadlock, total.Locked, total.Other, total.Errors)
	return total
}

// TestDeadlockBehindGate: in one process (Locker p), a request that holds nothing waits
// for "y" first and so makes the attempts (the key's gate); a second request, holding
// "x", waits for "y" behind it, in this process only. Another process (Locker q) holds
// "y" and waits for "x". The waiter behind the gate is part of the cycle all the same:
// exactly one of the two is chosen, and everyone is granted in the end. Acquire is the
// entry point here.
func TestDeadlockBehindGate(t *testing.T) {
	srv := redistest.Start(t)
	p, _ := newLocker(t, srv)
	q, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	wait := guard.Retry(guard.MaxWait(20*time.Second, nil))

	y := mustAcquire(t, q, ctx, "y")
	first := make(chan error, 1)
	go func() {
		le, err := p.Acquire(ctx, "y", wait)
		if err == nil {
			err = le.Release(context.Background())
		}
		first <- err
	}()
	waitUntil(t, 5*time.Second, "the first waiter in Redis's queue", func() bool {
		n, _ := srv.Client(t).LLen(context.Background(), lockName("y")+":queue").Result()
		return n == 1
	})
	x := mustAcquire(t, p, ctx, "x")
	second := make(chan error, 1)
	go func() {
		le, err := p.Acquire(x.Context(), "y", wait)
		if err == nil {
			err = le.Release(context.Background())
		}
		_ = x.Release(context.Background()) // as Do would, when the function returns
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // the second waiter queues behind the gate
	third := make(chan error, 1)
	go func() {
		le, err := q.Acquire(y.Context(), "x", wait)
		if err == nil {
			err = le.Release(context.Background())
		}
		_ = y.Release(context.Background())
		third <- err
	}()
	var victims int
	for _, c := range []chan error{second, third} {
		if err := <-c; errors.Is(err, guard.ErrDeadlock) {
			victims++
			t.Logf("chosen: %v", err)
		} else if err != nil {
			t.Errorf("a cycle member: %v, want a grant or ErrDeadlock", err)
		}
	}
	if victims != 1 {
		t.Errorf("%d victims, want 1", victims)
	}
	if err := <-first; err != nil {
		t.Errorf("the first waiter, in no cycle: %v", err)
	}
}

// TestDeadlockQuorum: a quorum Locker refuses DeadlockDetection and works without it.
func TestDeadlockQuorum(t *testing.T) {
	r := startQuorum(t, 3, false)
	if _, err := guard.NewQuorum(r.clients(t), guard.DeadlockDetection(time.Second)); !errors.Is(err, guard.ErrInvalidConfig) || !strings.Contains(err.Error(), "DeadlockDetection") {
		t.Fatalf("NewQuorum with DeadlockDetection: %v, want a *ConfigError naming DeadlockDetection", err)
	}
	l := r.locker(t, guard.DeadlockDetection(0), guard.RestartDelay(0))
	_ = l.Close()
	l = r.locker(t, guard.RestartDelay(0))
	ctx := ctxTimeout(t, 10*time.Second)
	held := mustAcquire(t, l, ctx, "q")
	done := make(chan error, 1)
	go func() {
		le, err := l.Acquire(ctx, "q", guard.Retry(guard.MaxWait(5*time.Second, nil)))
		if err == nil {
			err = le.Release(context.Background())
		}
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond) // past the New default delay: nothing may start
	mustRelease(t, held)
	if err := <-done; err != nil {
		t.Fatalf("a quorum waiter past 1s: %v", err)
	}
}

// TestDeadlockTelemetry: the victim's acquire span ends with outcome deadlock and the
// guard.deadlock event naming the cycle's keys, and the outcome is counted.
func TestDeadlockTelemetry(t *testing.T) {
	srv := redistest.Start(t)
	rig := newOtelRig(t)
	l, _ := newLocker(t, srv, append(rig.options(), guard.DeadlockDetection(200*time.Millisecond))...)
	ctx := ctxTimeout(t, 20*time.Second)
	var both sync.WaitGroup
	both.Add(2)
	errs := make(chan error, 2)
	for _, keys := range [][2]string{{"t1", "t2"}, {"t2", "t1"}} {
		go func() {
			errs <- guard.Do(ctx, func(ctx context.Context) error {
				both.Done()
				both.Wait()
				return guard.Do(ctx, func(context.Context) error { return nil }, guard.Use(l), guard.Key(keys[1]))
			}, guard.Use(l), guard.Key(keys[0]))
		}()
	}
	var de *guard.DeadlockError
	for range 2 {
		if err := <-errs; err != nil && !errors.As(err, &de) {
			t.Fatalf("%v, want nil or a *DeadlockError", err)
		}
	}
	if de == nil || !strings.Contains(de.Error(), `"t1"`) || !strings.Contains(de.Error(), `"t2"`) {
		t.Fatalf("deadlock error %v: want one, naming both keys", de)
	}
	var found int
	for _, s := range rig.acquireSpans() {
		if v, _ := attrOf(s, semconv.AttrOutcome); v.AsString() != semconv.OutcomeDeadlock {
			continue
		}
		found++
		var event bool
		for _, e := range s.Events() {
			if e.Name != "guard.deadlock" {
				continue
			}
			for _, kv := range e.Attributes {
				if kv.Key == semconv.AttrCycleKeys && len(kv.Value.AsStringSlice()) == 2 {
					event = true
				}
			}
		}
		if !event {
			t.Errorf("deadlock span without a guard.deadlock event naming 2 keys: %v", s.Events())
		}
	}
	if found != 1 {
		t.Fatalf("%d acquire spans with outcome deadlock, want 1", found)
	}
	sum, ok := rig.metrics(t)["guard.lock.acquisitions"].(metricdata.Sum[int64])
	var counted int64
	for _, dp := range sum.DataPoints {
		if v, _ := dp.Attributes.Value(semconv.AttrOutcome); v.AsString() == semconv.OutcomeDeadlock {
			counted += dp.Value
		}
	}
	if !ok || counted != 1 {
		t.Fatalf("guard.lock.acquisitions with outcome deadlock: %d, want 1", counted)
	}
}

// TestDeadlockReaderBehindWaitingWriter: a reader kept out only by a waiting writer's
// mark waits for the readers that writer waits for. Request A holds "doc" for reading
// and waits for "e"; request B holds "e"; a writer (request W) waits for "doc", which
// keeps new readers out; then B, inside its hold of "e", asks to read "doc". A waits for
// B, B for W's mark, W for A: a deadlock through a waiter that holds nothing, found and
// ended with one victim, after which everyone, the writer included, is served.
func TestDeadlockReaderBehindWaitingWriter(t *testing.T) {
	srv := redistest.Start(t)
	p, rdb := newLocker(t, srv)
	q, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 30*time.Second)
	wait := guard.Retry(guard.MaxWait(20*time.Second, nil))
	release := func(le *guard.Lease, err error) error {
		if err == nil {
			err = le.Release(context.Background())
		}
		return err
	}

	a := mustAcquire(t, p, ctx, "doc", guard.Read())
	b := mustAcquire(t, q, ctx, "e")
	writer := make(chan error, 1)
	go func() { writer <- release(q.Acquire(ctx, "doc", guard.Write(), wait)) }()
	waitUntil(t, 5*time.Second, "the waiting writer's mark", func() bool {
		return rdb.HExists(context.Background(), lockName("doc")+":rw", "#ww").Val()
	})
	results := make(chan error, 2)
	go func() {
		err := release(p.Acquire(a.Context(), "e", wait))
		_ = a.Release(context.Background())
		results <- err
	}()
	go func() {
		err := release(q.Acquire(b.Context(), "doc", guard.Read(), wait))
		_ = b.Release(context.Background())
		results <- err
	}()
	victims := 0
	for range 2 {
		switch err := <-results; {
		case errors.Is(err, guard.ErrDeadlock):
			victims++
			t.Logf("chosen: %v", err)
		case err != nil:
			t.Errorf("a member of the cycle: %v, want a grant or ErrDeadlock", err)
		}
	}
	if victims != 1 {
		t.Errorf("%d victims, want 1", victims)
	}
	if err := <-writer; err != nil {
		t.Errorf("the waiting writer: %v, want it granted once the cycle ended", err)
	}
}
