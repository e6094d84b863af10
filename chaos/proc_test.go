package chaos_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/chaos"
	"github.com/guardkit/guardkit/guard"
)

// workerEnv, when set in the environment, makes the test binary a worker process: it
// runs the procSpec in the variable's value instead of the tests, reports what it sees
// as JSON lines on stdout, and exits when its stdin closes.
const workerEnv = "GUARDKIT_CHAOS_WORKER"

// procSpec is what a worker process runs.
type procSpec struct {
	Name      string `json:"name"`
	LockAddr  string `json:"lock_addr"`
	StoreAddr string `json:"store_addr"`
	Lockers   int    `json:"lockers"`
	Seed      uint64 `json:"seed"`
	Config    config `json:"config"`
	Load      load   `json:"load"`
}

// event is one line of a worker process's report.
type event struct {
	Section   *chaos.Section   `json:"section,omitempty"`
	Loss      *chaos.Loss      `json:"loss,omitempty"`
	Call      *chaos.Call      `json:"call,omitempty"`
	Violation *chaos.Violation `json:"violation,omitempty"`
	Stalls    []chaos.Stall    `json:"stalls,omitempty"`
	Mark      string           `json:"mark,omitempty"`
	Done      bool             `json:"done,omitempty"`
}

// jsonSink is a worker process's sink: one JSON line per observation on stdout, calls
// and losses marked with the process's name.
type jsonSink struct {
	proc string
	mu   sync.Mutex
	enc  *json.Encoder
}

func (s *jsonSink) emit(e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.enc.Encode(e)
}

func (s *jsonSink) AddSection(x chaos.Section) {
	x.Proc = s.proc
	s.emit(event{Section: &x})
}

func (s *jsonSink) AddLoss(x chaos.Loss) {
	x.Proc = s.proc
	s.emit(event{Loss: &x})
}

func (s *jsonSink) AddCall(x chaos.Call) {
	x.Proc = s.proc
	s.emit(event{Call: &x})
}
func (s *jsonSink) Violate(v chaos.Violation) {
	v.Proc = s.proc
	s.emit(event{Violation: &v})
}
func (s *jsonSink) Untyped(op, key string, err error) { s.Violate(untypedViolation(op, key, err)) }
func (s *jsonSink) Mark(kind string)                  { s.emit(event{Mark: kind}) }

// workerMain runs a worker process and returns its exit code.
func workerMain(spec string) int {
	var ps procSpec
	if err := json.Unmarshal([]byte(spec), &ps); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: bad spec: %v\n", err)
		return 2
	}
	leaks := goleak.IgnoreCurrent()
	out := &jsonSink{proc: ps.Name, enc: json.NewEncoder(os.Stdout)}
	var stalls chaos.Stalls
	stopStalls := stalls.Watch(stallTick)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes stdin to stop us
		cancel()
	}()

	store := redis.NewClient(&redis.Options{Addr: ps.StoreAddr, ContextTimeoutEnabled: true})
	probe := redis.NewClient(&redis.Options{Addr: ps.LockAddr, ContextTimeoutEnabled: true, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	var (
		clients []*redis.Client
		lockers []*guard.Locker
	)
	for range max(ps.Lockers, 1) {
		o := &redis.Options{Addr: ps.LockAddr}
		ps.Config.clientOpts(o)
		c := redis.NewClient(o)
		l, err := ps.Config.newLocker(c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos worker: guard.New: %v\n", err)
			return 2
		}
		clients, lockers = append(clients, c), append(lockers, l)
	}
	var wg sync.WaitGroup
	for i, l := range lockers {
		for g := range ps.Load.Workers {
			wk := &worker{
				id: fmt.Sprintf("%s.%d/%d", ps.Name, i, g), locker: l, store: store, probe: probe,
				sink: out, epoch: func() int64 { return 0 }, calm: func() bool { return true }, cfg: ps.Config, load: ps.Load,
				rng: rand.New(rand.NewPCG(ps.Seed, uint64(i<<16|g))),
			}
			if ps.Load.Nested {
				wk.nested = lockers[(i+1)%len(lockers)]
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				wk.run(ctx)
			}()
		}
	}
	wg.Wait()
	for i := range lockers {
		_ = lockers[i].Close()
		_ = clients[i].Close()
	}
	_ = store.Close()
	_ = probe.Close()
	stopStalls()
	all := stalls.All()
	for i := range all {
		all[i].Proc = ps.Name
	}
	out.emit(event{Stalls: all})
	if err := goleak.Find(leaks); err != nil {
		now := chaos.Now()
		out.Violate(chaos.Violation{Inv: chaos.I3, From: now, To: now, Detail: fmt.Sprintf("%s: goroutines left after the Lockers closed: %v", ps.Name, err)})
	}
	out.emit(event{Done: true})
	return 0
}

// proc is a worker process seen from the test.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
	read   chan struct{} // closed when stdout is drained
	marks  chan struct{} // one pending "pause" mark
	w      *world

	mu       sync.Mutex
	events   []event
	stops    []chaos.Fault // when the process was stopped
	stopped  bool
	finished bool
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startProc starts a worker process running ld on lockers Lockers against the world's
// Redis servers.
func (w *world) startProc(name string, lockers int, ld load) *proc {
	t := w.t
	t.Helper()
	if w.lock == nil {
		w.fatalf(setup, "", 0, "worker process %s: worker processes run against a single server only", name)
	}
	spec, err := json.Marshal(procSpec{Name: name, LockAddr: w.lock.Addr(), StoreAddr: w.store.Addr(),
		Lockers: lockers, Seed: uint64(len(w.procs) + 1), Config: w.cfg, Load: ld})
	if err != nil {
		w.fatalf(setup, "", 0, "worker process %s: %v", name, err)
	}
	exe, err := os.Executable()
	if err != nil {
		w.fatalf(setup, "", 0, "finding the test binary: %v", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(spec))
	// The worker dies with the test binary, so an aborted run leaves none behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, stderr: &lockedBuffer{}, read: make(chan struct{}), marks: make(chan struct{}, 1), w: w}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.fatalf(setup, "", 0, "worker process %s: %v", name, err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		w.fatalf(setup, "", 0, "worker process %s: %v", name, err)
	}
	if err := cmd.Start(); err != nil {
		w.fatalf(workerProcess, "", 0, "starting worker process %s: %v", name, err)
	}
	go p.readEvents(stdout)
	t.Cleanup(func() {
		p.mu.Lock()
		finished := p.finished
		p.finished = true
		p.mu.Unlock()
		if !finished { // the test ended early: reap the process
			p.kill()
			<-p.read
			_ = p.cmd.Wait()
		}
	})
	w.procs = append(w.procs, p)
	return p
}

func (p *proc) readEvents(r io.Reader) {
	defer close(p.read)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			p.w.failf(workerProcess, "", 0, "%s: unreadable report line %q: %v", p.name, sc.Text(), err)
			continue
		}
		if e.Mark == "pause" {
			select {
			case p.marks <- struct{}{}:
			default:
			}
		}
		p.mu.Lock()
		p.events = append(p.events, e)
		p.mu.Unlock()
	}
}

// pause stops the process with SIGSTOP and waits until the kernel reports it stopped.
func (p *proc) pause() {
	p.w.t.Helper()
	pid := p.cmd.Process.Pid
	start := chaos.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		p.w.fatalf(setup, "", start, "SIGSTOP worker %s (pid %d): %v", p.name, pid, err)
	}
	if err := waitStopped(pid, 5*time.Second); err != nil {
		p.w.fatalf(setup, "", start, "SIGSTOP worker %s (pid %d): %v", p.name, pid, err)
	}
	p.mu.Lock()
	p.stops = append(p.stops, chaos.Fault{Kind: "SIGSTOP " + p.name, Start: chaos.Now()})
	p.stopped = true
	p.mu.Unlock()
}

// resume continues the process with SIGCONT.
func (p *proc) resume() {
	p.w.t.Helper()
	p.mu.Lock()
	p.stops[len(p.stops)-1].End = chaos.Now()
	p.stopped = false
	p.mu.Unlock()
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		p.w.fatalf(setup, "", 0, "SIGCONT worker %s: %v", p.name, err)
	}
}

// stop closes the process's stdin, waits for it to exit and adds its report to the
// world's history, marking what happened while it was stopped.
func (p *proc) stop() {
	p.w.t.Helper()
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return
	}
	p.finished = true
	if p.stopped {
		p.stops[len(p.stops)-1].End = chaos.Now()
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT)
	}
	p.mu.Unlock()
	_ = p.stdin.Close()
	stopping := chaos.Now()
	exited := make(chan error, 1)
	go func() {
		<-p.read
		exited <- p.cmd.Wait()
	}()
	// The report is read before the verdicts below, so that they show the process's
	// last events and its scheduling lag.
	var failures []string
	select {
	case err := <-exited:
		if err != nil {
			failures = append(failures, fmt.Sprintf("worker %s: %v\n%s", p.name, err, tail(p.stderr.String())))
		}
	case <-time.After(30 * time.Second):
		p.kill()
		failures = append(failures, fmt.Sprintf("worker %s did not exit 30s after its stdin closed\n%s", p.name, tail(p.stderr.String())))
		<-exited
	}
	if s := p.stderr.String(); strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic:") {
		failures = append(failures, fmt.Sprintf("worker %s reported on stderr:\n%s", p.name, tail(s)))
	}
	p.ingest()
	for _, f := range failures {
		p.w.failf(workerProcess, "", stopping, "%s", f)
	}
}

func (p *proc) ingest() {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.w.hist
	stoppedIn := func(from, to chaos.Mono) bool {
		for _, s := range p.stops {
			if s.Start < to && from < s.End {
				return true
			}
		}
		return false
	}
	done := false
	for _, e := range p.events {
		switch {
		case e.Section != nil:
			s := *e.Section
			s.Stopped = stoppedIn(s.Enter, s.Exit)
			h.AddSection(s)
		case e.Loss != nil:
			l := *e.Loss
			l.Stopped = stoppedIn(l.Valid, l.Noticed)
			h.AddLoss(l)
		case e.Call != nil:
			c := *e.Call
			c.Stopped = stoppedIn(c.Start, c.Return)
			h.AddCall(c)
		case e.Violation != nil:
			// A stopped process's calls prove nothing about the engine's replies: its
			// client may have retried them.
			if v := *e.Violation; !(v.Inv == reentry || v.Inv == misreported) || !stoppedIn(v.From, v.To) {
				h.AddViolation(v)
			}
		case e.Mark != "":
			p.w.mu.Lock()
			p.w.marks[e.Mark]++
			p.w.mu.Unlock()
		case e.Stalls != nil:
			// A probe sleep across a SIGSTOP measured the stop, not the scheduler; what
			// happened during a stop is exempt anyway.
			for _, st := range e.Stalls {
				if !stoppedIn(st.From, st.To) {
					p.w.stalls.Add(st)
				}
			}
		case e.Done:
			done = true
		}
	}
	for _, s := range p.stops {
		h.AddFault(s)
	}
	if !done {
		p.w.failf(workerProcess, "", 0, "worker %s ended without finishing its report", p.name)
	}
}

// kill ends the process with SIGKILL; the os.Process handle makes this safe after it
// exited.
func (p *proc) kill() { _ = p.cmd.Process.Kill() }

// waitStopped waits until /proc reports the process as stopped.
func waitStopped(pid int, timeout time.Duration) error {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	deadline := time.Now().Add(timeout)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if i := bytes.LastIndexByte(data, ')'); i >= 0 && i+2 < len(data) && data[i+2] == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not stopped after %s", timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func tail(s string) string {
	const n = 4000
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
