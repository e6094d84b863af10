package guard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// Deadlock detection. A waiter that has waited longer than the detection delay writes a
// wait record — "section s waits for key k" — in its request's waits hash
// (scripts/waits.lua), keeps it fresh while it waits and deletes it when the wait ends.
// Every quarter of the delay it walks the wait-for graph from the key it waits for: the
// holders of that key that keep it out (scripts/blockers.lua, one call on the key's
// slot), what those holders, or sections within them, wait for (one call on the slot of
// each holder's request), their holders, and so on, depth first and bounded. A walk that
// comes back to a holder the waiter is in (its own section, or one it is a section of)
// has found a cycle. The waiter then reads every edge of the cycle again: each hold must
// still be the same hold (same owner, same fencing token) and each wait the same wait
// (same wait ID). Both reads of every edge bracket the moment between the two passes,
// when all of them therefore existed at once; a cycle of holds and waits, once formed,
// stays until one of its waits ends. Contention that only looks like a cycle — holders
// that changed while the first pass read them — fails the second pass.
//
// Each participant of a cycle finds it, and each computes the same victim: the wait
// with the greatest (section, wait ID). Only the victim acts: its wait ends with a
// *DeadlockError, and its caller's locks are released as usual as its function returns.

var (
	waitsScript    = script.Waits
	blockersScript = script.Blockers
)

const (
	// defaultDeadlockDelay is how long a wait lasts before detection starts, by default
	// (PostgreSQL's deadlock_timeout).
	defaultDeadlockDelay = time.Second
	// maxCycle bounds the edges of a cycle a walk follows.
	maxCycle = 16
	// maxWalkCalls bounds the Redis calls of one walk.
	maxWalkCalls = 64
)

// DeadlockDetection sets how long a wait lasts before the waiter looks for a deadlock:
// a cycle of owners, each holding a lock the next one waits for, across processes,
// services and Redis Cluster nodes. Until then detection costs nothing; from then on the
// waiter keeps a record of its wait in Redis and walks the wait-for graph every quarter
// of d (every d after its first four walks). A wait directly in a request's root — a
// request that holds no lock yet — cannot close a cycle and is not watched. When a cycle
// is confirmed, exactly one of its waiters fails with a
// *DeadlockError (ErrDeadlock) and the others get their locks once its caller releases
// what it holds. d = 0 turns detection off. Exclusive, read-write and fair locks take
// part; a semaphore's waiters do not (see ErrDeadlock), nor does a Locker made by
// NewQuorum, which refuses the option.
// Applies to New. Default 1s.
func DeadlockDetection(d time.Duration) Option {
	return Option{name: "DeadlockDetection", scope: scopeLocker, apply: func(s *settings) {
		s.deadlockDelay, s.deadlockSet = d, true
	}}
}

// validateDeadlock checks DeadlockDetection and fills in its default.
func (s *settings) validateDeadlock(quorum bool) error {
	switch {
	case s.deadlockDelay < 0:
		return &ConfigError{Field: "DeadlockDetection", Reason: fmt.Sprintf("must be ≥ 0 (0 turns detection off), got %s", s.deadlockDelay)}
	case quorum && s.deadlockSet && s.deadlockDelay > 0:
		return &ConfigError{Field: "DeadlockDetection", Reason: "a Locker made by NewQuorum does not detect deadlocks: each server sees another part of the holds"}
	case !s.deadlockSet && !quorum:
		s.deadlockDelay = defaultDeadlockDelay
	}
	return nil
}

// waitEdge is a wait: section waiter waits for key (of kind), since the wait with id.
type waitEdge struct {
	waiter ctxid.ID
	id     string
	kind   Kind
	key    string
}

// holdEdge is a hold that keeps a waiter out: holder's, with token naming the hold.
type holdEdge struct {
	holder ctxid.ID
	token  string
	label  string
}

// cycleStep is one edge pair of a cycle: wait.waiter waits for wait.key, held by hold.
type cycleStep struct {
	wait waitEdge
	hold holdEdge
}

// detector is the deadlock detection of one wait. It starts (run, on a goroutine of the
// Locker's) when the wait has lasted the detection delay, and stops when the wait ends.
//
// Arming it allocates the detector, its timer and the victim channel, and nothing else:
// the wait ID and the context of its Redis calls are made when it starts.
type detector struct {
	g      *graph
	self   waitEdge // its id is set by run
	timer  *time.Timer
	victim chan struct{} // closed when this wait was chosen to fail: err is set
	err    *DeadlockError
	start  time.Time // when the wait was armed

	mu      sync.Mutex
	stopped bool               // the wait ended
	cancel  context.CancelFunc // ends run's calls; set by run

	// Owned by run.
	ctx   context.Context
	walks int // walks made
	calls int // Redis calls of the walks and confirmations, all of them
}

// error returns the *DeadlockError of a wait chosen as a victim, once dead is closed.
func (d *detector) error() error {
	e := *d.err
	e.waited = time.Since(d.start)
	return &e
}

// graph is what the deadlock detectors of a Locker's waits share: the Redis the
// wait-for graph is kept in, the settings that name its keys and time its walks, the
// Locker's background goroutines and nonces, and the count of walks.
type graph struct {
	// c is the deployment the wait records and walks go to: a single store's conn (a
	// quorum Locker does not detect deadlocks, so its graph is never walked).
	c     *store.Conn
	cfg   *settings
	aside func(func()) bool
	nonce func() string
	walks atomic.Int64 // walks made by the Locker's waits
}

// newGraph returns the graph of l's detectors.
func newGraph(l *Locker) *graph {
	return &graph{c: l.st.Scripted(), cfg: &l.cfg, aside: l.background, nonce: l.newNonce}
}

// waitsKey is the name of root's waits hash: the prefix, root as a hash tag (escaped
// as keys are), and ":waits", a suffix no lock's name ends with.
func (g *graph) waitsKey(root ctxid.ID) string {
	var b strings.Builder
	b.WriteString(g.cfg.prefix)
	b.WriteByte('{')
	writeEscaped(&b, string(root))
	b.WriteString("}:waits")
	return b.String()
}

// watchDeadlock arms deadlock detection for the wait of h, or returns nil when it is
// off for the Locker or h's kind, or when the wait cannot be part of a cycle: its
// section is directly in a request's root, and a root holds nothing (every hold is a
// section's), so nothing that the waiter's chain holds can keep another owner waiting.
// Nothing is sent to Redis before the delay.
func (l *Locker) watchDeadlock(h *held) *detector {
	// A wait directly in a request's root is made by a section that holds nothing yet,
	// unless it waits for a later key of a set, whose section holds the earlier ones.
	if l.cfg.deadlockDelay <= 0 || h.s.kind == KindSemaphore || h.section().Depth() < 2 && !h.s.inSet {
		return nil
	}
	d := &detector{
		g:      l.graph,
		self:   waitEdge{waiter: h.section(), kind: h.s.kind, key: h.hk.key},
		victim: make(chan struct{}),
		start:  time.Now(),
	}
	d.timer = time.AfterFunc(l.cfg.deadlockDelay, d.fire)
	return d
}

// fire starts run when the delay has passed, unless the wait has ended.
func (d *detector) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	if !d.g.aside(d.run) {
		d.cancel()
	}
}

// stop ends the detection of a wait that ended: before the delay, nothing was sent;
// after it, run deletes the wait record and returns (Close waits for it).
func (d *detector) stop() {
	if d == nil {
		return
	}
	d.timer.Stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.cancel != nil {
		d.cancel()
	}
}

// dead is closed when the wait was chosen to fail; nil for a wait without detection.
func (d *detector) dead() <-chan struct{} {
	if d == nil {
		return nil
	}
	return d.victim
}

// run keeps the wait's record and walks the graph until the wait ends or is chosen.
func (d *detector) run() {
	g := d.g
	defer d.cancel()
	d.self.id = g.nonce()
	// Walks come every quarter of the delay at first, when a cycle that formed as the
	// waits began is found, then every delay: a waiter that waits long costs Redis one
	// walk per delay.
	every := max(g.cfg.deadlockDelay/4, time.Millisecond)
	life := max(4*g.cfg.deadlockDelay, 2*time.Second)
	sent := false // a record was sent: it may be in Redis, whatever the reply said
	defer func() {
		if sent {
			ctx, cancel := context.WithTimeout(context.Background(), g.cfg.releaseTimeout)
			defer cancel()
			_, _ = g.c.Run(ctx, waitsScript, d.waitsArgs("del", string(d.self.waiter), d.self.id))
		}
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
		}
		if d.ctx.Err() != nil {
			return
		}
		sent = true
		_, err := g.c.Run(d.ctx, waitsScript, d.waitsArgs("put", string(d.self.waiter), d.self.id,
			strconv.FormatInt(life.Milliseconds(), 10), strconv.Itoa(int(d.self.kind)), d.self.key))
		if err == nil {
			if e := d.detect(); e != nil {
				d.err = e
				close(d.victim)
				return
			}
		}
		if d.walks >= 4 {
			every = g.cfg.deadlockDelay
		}
		t.Reset(every)
	}
}

// detect walks the graph once; it returns the error of this wait when it found a
// confirmed cycle whose victim it is.
func (d *detector) detect() *DeadlockError {
	start := time.Now()
	d.walks++
	d.g.walks.Add(1)
	var w walk
	w.d = d
	w.seen = map[ctxid.ID]bool{}
	if !w.from(d.self, 0) {
		return nil
	}
	cycle := w.path
	victim := 0
	for i, s := range cycle {
		v := cycle[victim].wait
		if s.wait.waiter > v.waiter || s.wait.waiter == v.waiter && s.wait.id > v.id {
			victim = i
		}
	}
	if victim != 0 || !d.confirm(cycle) {
		return nil
	}
	e := deadlockError(cycle)
	e.calls, e.took, e.walks = d.calls, time.Since(start), d.walks
	return e
}

// walk is one pass over the wait-for graph from a detector's wait.
type walk struct {
	d     *detector
	path  []cycleStep
	seen  map[ctxid.ID]bool
	calls int
}

// from follows w: the holds that keep it out, then what they wait for. It reports
// whether it came back to the detector's own wait, with the cycle in path.
func (w *walk) from(e waitEdge, depth int) bool {
	holds, err := w.blockers(e)
	if err != nil {
		return false
	}
	for _, h := range holds {
		if w.d.self.waiter.Within(h.holder) {
			w.path = append(w.path, cycleStep{wait: e, hold: h})
			return true
		}
	}
	if depth+1 >= maxCycle {
		return false
	}
	for _, h := range holds {
		if w.seen[h.holder] {
			continue
		}
		w.seen[h.holder] = true
		waits, err := w.waitsWithin(h.holder)
		if err != nil {
			continue
		}
		w.path = append(w.path, cycleStep{wait: e, hold: h})
		for _, next := range waits {
			if w.from(next, depth+1) {
				return true
			}
		}
		w.path = w.path[:len(w.path)-1]
	}
	return false
}

// budget counts a Redis call of the walk and reports whether it may be made.
func (w *walk) budget() bool {
	if w.calls >= maxWalkCalls {
		return false
	}
	w.calls++
	w.d.calls++
	return true
}

// blockers reads the holds that keep e's waiter out of e's lock.
func (w *walk) blockers(e waitEdge) ([]holdEdge, error) {
	if !w.budget() {
		return nil, errWalkBudget
	}
	return w.d.blockers(e)
}

// waitsWithin reads the waits of section and of the sections within it.
func (w *walk) waitsWithin(section ctxid.ID) ([]waitEdge, error) {
	if !w.budget() {
		return nil, errWalkBudget
	}
	return w.d.waitsWithin(section)
}

var errWalkBudget = fmt.Errorf("guard: deadlock walk: more than %d calls", maxWalkCalls)

// confirm reads every edge of cycle again: the same holds and the same waits.
func (d *detector) confirm(cycle []cycleStep) bool {
	for i, s := range cycle {
		holds, err := d.blockers(s.wait)
		d.calls++
		if err != nil || !holdsHave(holds, s.hold) {
			return false
		}
		if i == 0 {
			continue // the detector's own wait, which lasts while it runs
		}
		waits, err := d.waitsWithin(cycle[i-1].hold.holder)
		d.calls++
		if err != nil || !waitsHave(waits, s.wait) {
			return false
		}
	}
	return true
}

func holdsHave(holds []holdEdge, h holdEdge) bool {
	for _, o := range holds {
		if o.holder == h.holder && o.token == h.token {
			return true
		}
	}
	return false
}

func waitsHave(waits []waitEdge, w waitEdge) bool {
	for _, o := range waits {
		if o == w {
			return true
		}
	}
	return false
}

// blockers reads the holds that keep a waiter of e out of e's lock (blockers.lua).
func (d *detector) blockers(e waitEdge) ([]holdEdge, error) {
	spec := specOf(e.kind)
	if spec == nil || e.kind == KindSemaphore {
		return nil, nil
	}
	rk, err := d.g.cfg.redisKeys(e.key, spec)
	if err != nil {
		return nil, err
	}
	want := "x"
	switch e.kind {
	case KindWrite:
		want = "w"
	case KindRead:
		want = "r"
	}
	args := []any{nil, nil, 1, rk.Lock, want}
	v, err := d.g.c.Strings(d.ctx, blockersScript, args)
	if err != nil {
		return nil, err
	}
	holds := make([]holdEdge, 0, len(v)/3)
	for i := 0; i+2 < len(v); i += 3 {
		_, text, _ := parseLabel(v[i+2])
		holds = append(holds, holdEdge{holder: ctxid.ID(v[i]), token: v[i+1], label: text})
	}
	return holds, nil
}

// waitsWithin reads the live wait records of section and of the sections within it.
func (d *detector) waitsWithin(section ctxid.ID) ([]waitEdge, error) {
	v, err := d.g.c.Strings(d.ctx, waitsScript, d.waitsArgsFor(section.Root(), "get", string(section)))
	if err != nil {
		return nil, err
	}
	waits := make([]waitEdge, 0, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		// "<until> <wait ID> <kind> <key>"
		f := strings.SplitN(v[i+1], " ", 4)
		if len(f) < 4 {
			continue
		}
		k, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		waits = append(waits, waitEdge{waiter: ctxid.ID(v[i]), id: f[1], kind: Kind(k), key: f[3]})
	}
	return waits, nil
}

// waitsArgs returns the command line of waits.lua on the detector's own request.
func (d *detector) waitsArgs(argv ...string) []any {
	return d.waitsArgsFor(d.self.waiter.Root(), argv...)
}

// waitsArgsFor returns the command line of waits.lua on root's waits hash.
func (d *detector) waitsArgsFor(root ctxid.ID, argv ...string) []any {
	args := make([]any, 0, 4+len(argv))
	args = append(args, nil, nil, 1, d.g.waitsKey(root))
	for _, a := range argv {
		args = append(args, a)
	}
	return args
}

// deadlockError describes cycle to its victim, whose wait is cycle[0].
func deadlockError(cycle []cycleStep) *DeadlockError {
	e := &DeadlockError{Key: cycle[0].wait.key, Cycle: make([]DeadlockEdge, len(cycle))}
	for i, s := range cycle {
		e.Cycle[i] = DeadlockEdge{
			Waiter: s.wait.waiter, Key: s.wait.key, Kind: s.wait.kind,
			Holder: s.hold.holder, Label: s.hold.label,
		}
	}
	return e
}
