package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/chaos"
	"github.com/guardkit/guardkit/internal/redistest"
)

// config is how the Lockers and their Redis clients of a scenario are set up. It travels
// to worker processes as JSON.
type config struct {
	TTL            time.Duration `json:"ttl"`
	ReleaseTimeout time.Duration `json:"release_timeout"`
	RetryDelay     time.Duration `json:"retry_delay"`  // Fixed backoff between attempts, without a notification
	RetryJitter    time.Duration `json:"retry_jitter"` // its jitter
	ReadTimeout    time.Duration `json:"read_timeout"` // client read and write timeout; 0 keeps go-redis's 3s
	MaxRetries     int           `json:"max_retries"`  // client retries; 0 keeps go-redis's 3, -1 none
	// NoCtxTimeout builds clients without ContextTimeoutEnabled, so that a context
	// deadline does not cut a Redis call short.
	NoCtxTimeout bool `json:"no_ctx_timeout"`
	// SyncReplicas, when above 0, makes every grant and renewal count only once that many
	// replicas acknowledged it within SyncTimeout (guard.SyncReplicas).
	SyncReplicas int           `json:"sync_replicas"`
	SyncTimeout  time.Duration `json:"sync_timeout"`
	// NoRestartCheck turns a quorum Locker's restart check off (guard.RestartDelay(0)).
	NoRestartCheck bool `json:"no_restart_check,omitempty"`
	// AutoPipeline gives each Locker its client's auto-pipelining face
	// (client.AutoPipeline()) instead of the client.
	AutoPipeline bool `json:"auto_pipeline,omitempty"`
	// FenceRetention, when set, is the Lockers' guard.FenceRetention.
	FenceRetention time.Duration `json:"fence_retention,omitempty"`
	// DeadlockDelay, when set, is the Lockers' guard.DeadlockDetection (the default, 1s,
	// otherwise).
	DeadlockDelay time.Duration `json:"deadlock_delay,omitempty"`
}

// newLocker builds a Locker with c's options on client, or on its auto-pipelining face
// when c says so (closing client closes that face too).
func (c config) newLocker(client redis.UniversalClient) (*guard.Locker, error) {
	if c.AutoPipeline {
		rc, ok := client.(*redis.Client)
		if !ok {
			return nil, fmt.Errorf("auto-pipelining needs a single server's client, got %T", client)
		}
		ap, err := rc.AutoPipeline()
		if err != nil {
			return nil, err
		}
		client = ap
	}
	return guard.New(client, c.lockerOpts()...)
}

func (c config) lockerOpts() []guard.Option {
	opts := []guard.Option{
		guard.TTL(c.TTL),
		guard.ReleaseTimeout(c.ReleaseTimeout),
		guard.Retry(guard.MaxWait(-1, guard.Fixed(c.RetryDelay, c.RetryJitter))),
	}
	if c.SyncReplicas > 0 {
		opts = append(opts, guard.SyncReplicas(c.SyncReplicas, c.SyncTimeout))
	}
	if c.FenceRetention > 0 {
		opts = append(opts, guard.FenceRetention(c.FenceRetention))
	}
	if c.DeadlockDelay > 0 {
		opts = append(opts, guard.DeadlockDetection(c.DeadlockDelay))
	}
	return opts
}

func (c config) clientOpts(o *redis.Options) {
	o.ContextTimeoutEnabled = !c.NoCtxTimeout
	if c.ReadTimeout > 0 {
		o.ReadTimeout, o.WriteTimeout = c.ReadTimeout, c.ReadTimeout
	}
	if c.MaxRetries != 0 {
		o.MaxRetries = c.MaxRetries
	}
	o.DialTimeout = time.Second
}

// baseConfig is the setup most scenarios start from: a short TTL so that faults longer
// than it fit in a few seconds, and a release timeout below it so that I4 bounds Release
// tightly.
func baseConfig() config {
	return config{
		TTL:            500 * time.Millisecond,
		ReleaseTimeout: 300 * time.Millisecond,
		RetryDelay:     50 * time.Millisecond,
		RetryJitter:    50 * time.Millisecond,
	}
}

// load is what each worker goroutine does. It travels to worker processes as JSON.
type load struct {
	Keys    []string `json:"keys"`    // each section picks one at random
	Workers int      `json:"workers"` // goroutines per Locker
	// Each Acquire gets a deadline drawn uniformly from [AcquireMin, AcquireMax].
	AcquireMin time.Duration `json:"acquire_min"`
	AcquireMax time.Duration `json:"acquire_max"`
	// The work inside a section sleeps for a time drawn from [HoldMin, HoldMax].
	HoldMin time.Duration `json:"hold_min"`
	HoldMax time.Duration `json:"hold_max"`
	// Nested reenters the lock inside each section through another Locker with the same
	// owner, and checks the hold count in Redis before and after.
	Nested bool `json:"nested"`
	// Stubborn writes even when the lease was lost during the work: a holder that checked
	// its lease, then stalled (GC, SIGSTOP) before writing. Only fencing stops it.
	Stubborn bool `json:"stubborn"`
	// PauseMark announces, after the section's read, a moment to stop the process at,
	// and waits MarkWait for it before writing.
	PauseMark bool          `json:"pause_mark"`
	MarkWait  time.Duration `json:"mark_wait"`
	// Unfenced also keeps a plain read-modify-write counter, to show what the fenced
	// register prevents.
	Unfenced bool `json:"unfenced"`
	// LongShare of the sections (0 to 1) hold for a time drawn from [HoldMax, LongHold]
	// instead: holds that outlast a failover.
	LongShare float64       `json:"long_share"`
	LongHold  time.Duration `json:"long_hold"`
	// Kind is the lock kind of the sections: "" exclusive, "read-write" (a quarter of the
	// sections write, the others read), "semaphore" (Permits holders at once) or "fair".
	// Readers and permit holders read the fenced register but do not write it.
	Kind    string `json:"kind,omitempty"`
	Permits int    `json:"permits,omitempty"`
	// Distinct gives every section a key of its own (Keys[0], the worker and the section's
	// number), as keys made from request ids are: nothing may pile up in Redis for them.
	Distinct bool `json:"distinct,omitempty"`
	// Budget, when set, bounds each Acquire by a wait budget (guard.MaxWait) instead of a
	// context deadline: the call's context never ends, and the budget alone must bound
	// the call (its deadline is the budget plus the engine's grace for the last attempt).
	Budget time.Duration `json:"budget,omitempty"`
	// Ordered makes every section a two-key hold: the worker first takes an outer key,
	// Keys[i], and runs the section on one of the keys after it, inside the outer
	// lease's section — locks taken in one order, which can never form a deadlock.
	Ordered bool `json:"ordered,omitempty"`
	// Set makes every section a hold of Set keys drawn from Keys, listed in a random
	// order and taken as one lock (guard's AcquireAll): each key is recorded as a
	// section of its own, with its own token, so that exclusion and fencing are judged
	// per key, and a canonical order means no cycle of waits can form.
	Set int `json:"set,omitempty"`
}

// kindOf draws the kind of one section: its options and whether it writes the register.
func (l load) kindOf(r *rand.Rand) (opts []guard.Option, writes bool) {
	switch l.Kind {
	case "read-write":
		if r.IntN(4) == 0 {
			return []guard.Option{guard.Write()}, true
		}
		return []guard.Option{guard.Read()}, false
	case "semaphore":
		return []guard.Option{guard.Permits(l.Permits)}, false
	case "fair":
		return []guard.Option{guard.Fair()}, true
	}
	return nil, true
}

func (l load) acquireTimeout(r *rand.Rand) time.Duration {
	return between(r, l.AcquireMin, l.AcquireMax)
}

func (l load) hold(r *rand.Rand) time.Duration {
	if l.LongShare > 0 && r.Float64() < l.LongShare {
		return between(r, l.HoldMax, l.LongHold)
	}
	return between(r, l.HoldMin, l.HoldMax)
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// sink receives what workers observe: a History in this process, a JSON stream in a
// worker process.
type sink interface {
	AddSection(chaos.Section)
	AddLoss(chaos.Loss)
	AddCall(chaos.Call)
	Violate(chaos.Violation)
	// Untyped reports an error, of an operation on key, that matches none of the
	// engine's documented sentinels.
	Untyped(op, key string, err error)
	// Mark reports a named moment: "pause" (a place to stop the process at) or "plain"
	// (an unfenced write).
	Mark(kind string)
}

// worker is one goroutine running critical sections in a loop.
type worker struct {
	id     string
	locker *guard.Locker
	nested *guard.Locker         // another Locker for reentry with the same owner; nil for none
	store  *redis.Client         // the storage Redis (fenced registers, plain counters)
	probe  redis.UniversalClient // the lock deployment, directly, for I2 probes
	// probes are a quorum's servers, directly (probe is then the first): a hold is
	// confirmed when a majority of them has it.
	probes []redis.UniversalClient
	// primary, when set (Sentinel), returns a client of the server the sentinels name
	// as the primary now: an I2 probe reads there, and only while it answers as a
	// primary, never from a demoted primary's copy that a pooled connection still reaches.
	primary func(ctx context.Context) (redis.Cmdable, error)
	sink    sink
	epoch   func() int64 // bumped whenever the lock Redis loses its data
	calm    func() bool  // reports whether no fault is being injected
	cfg     config
	load    load
	rng     *rand.Rand
	seq     int
	from    int // the first of Keys a section may take (see load.Ordered)
}

func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		ok := false
		if w.load.Set > 0 {
			ok = w.setSection(ctx)
		} else {
			ok = w.maybeOrdered(ctx)
		}
		if !ok {
			// Redis unavailable: back off, as a service would, instead of spinning.
			sleepCtx(ctx, 50*time.Millisecond+between(w.rng, 0, 50*time.Millisecond))
		}
	}
}

// budgetGrace is the engine's grace past a wait budget for the attempt in flight at its
// end (guard's attemptGrace): a budget-bound call's deadline.
const budgetGrace = 250 * time.Millisecond

// watchDeadline notes when this process sees ctx's deadline pass: a goroutine that
// context.AfterFunc starts once the deadline's timer fired. Call the returned function
// when the call bounded by ctx has returned, before cancelling ctx: it gives that moment,
// or 0 when the deadline had not passed.
func watchDeadline(ctx context.Context) (seen func() chaos.Mono) {
	var at atomic.Int64
	ran := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			at.Store(int64(chaos.Now()))
		}
		close(ran)
	})
	return func() chaos.Mono {
		if !stop() {
			<-ran
		}
		return chaos.Mono(at.Load())
	}
}

// section runs one critical section; it reports false when Acquire failed for a reason
// other than a busy lock.
func (w *worker) section(ctx context.Context) bool {
	key := w.load.Keys[w.from+w.rng.IntN(len(w.load.Keys)-w.from)]
	w.seq++
	if w.load.Distinct {
		key += ":" + w.id + ":" + strconv.Itoa(w.seq)
	}
	label := w.id + "/" + strconv.Itoa(w.seq)

	// Read before acquiring, so that data lost during the Acquire call itself shows.
	epoch := w.epoch()
	opts, writes := w.load.kindOf(w.rng)
	actx, cancel := context.WithTimeout(ctx, w.load.acquireTimeout(w.rng))
	deadline, _ := actx.Deadline()
	if w.load.Budget > 0 {
		cancel()
		actx, cancel = context.WithCancel(ctx)
		opts = append(opts, guard.Retry(guard.MaxWait(w.load.Budget, guard.Fixed(w.cfg.RetryDelay, w.cfg.RetryJitter))))
		deadline = time.Now().Add(w.load.Budget + budgetGrace)
	}
	seen := watchDeadline(actx)
	start := chaos.Now()
	le, err := w.locker.Acquire(actx, key, opts...)
	enter := chaos.Now()
	fired := seen()
	cancel()
	w.sink.AddCall(chaos.Call{Op: "acquire", Key: key, Worker: w.id, Token: tokenOf(le), Start: start, Deadline: chaos.MonoOf(deadline), Return: enter, Fired: fired, Err: errText(err)})
	if err != nil {
		if !typed(err) {
			w.sink.Untyped("acquire", key, err)
		}
		w.falseDeadlock(key, start, err)
		if _, _, renewal, ok := replicaShortfall(err); ok && !renewal {
			w.sink.Mark("grant unacknowledged")
		}
		return errors.Is(err, guard.ErrLocked) || ctx.Err() != nil
	}
	stop := context.AfterFunc(le.Context(), func() {
		noticed := chaos.Now()
		if cause := context.Cause(le.Context()); errors.Is(cause, guard.ErrLeaseLost) {
			w.sink.AddLoss(chaos.Loss{Key: key, Worker: w.id, Token: le.Token(), Valid: chaos.MonoOf(le.ValidUntil()), Noticed: noticed, Reason: cause.Error()})
			if _, _, renewal, ok := replicaShortfall(cause); ok && renewal {
				w.sink.Mark("renewal unacknowledged")
			}
		}
	})
	defer stop()

	s := chaos.Section{Key: key, Worker: w.id, Token: le.Token(), Enter: enter, Owner: string(le.Owner())}
	if le.Kind() != guard.KindExclusive {
		s.Kind = le.Kind().String()
	}
	if le.Kind() == guard.KindSemaphore {
		s.Limit = w.load.Permits
	}
	lctx := le.Context()
	if w.load.Stubborn {
		lctx = context.Background()
	}
	// Storage calls get a bound of their own (the storage Redis is never faulted), beyond
	// the section's reentry, pause and hold.
	sctx, scancel := context.WithTimeout(lctx, 5*time.Second+w.load.AcquireMax+w.load.MarkWait+w.load.HoldMax)
	defer scancel()
	reg := chaos.NewRegister(w.store, key)
	v, readOK, err := reg.Read(sctx, le.Token(), label)
	if err != nil && !errors.Is(err, context.Canceled) {
		w.sink.Untyped("register read", key, err)
	}
	var plain int
	if w.load.Unfenced {
		plain, _ = w.store.Get(sctx, "plain:"+key).Int()
	}
	w.checkHolds(le, 1, epoch, "after acquire")
	// After a reentry whose outcome was unknown, Redis may count one hold more until
	// the engine's compensating release lands: the counts are not checked again.
	counted := true
	if w.load.Nested {
		counted = w.reenter(ctx, le, epoch, opts)
	}
	if w.load.PauseMark && le.Err() == nil {
		w.sink.Mark("pause")
		time.Sleep(w.load.MarkWait) // the process may be stopped here, past its lease
	}
	if !w.load.Stubborn {
		sleepCtx(lctx, w.load.hold(w.rng))
	} else {
		time.Sleep(w.load.hold(w.rng))
	}
	if writes && readOK && (w.load.Stubborn || le.Err() == nil) {
		ok, err := reg.Write(sctx, le.Token(), v+1, label)
		if err != nil && !errors.Is(err, context.Canceled) {
			w.sink.Untyped("register write", key, err)
		}
		s.Acked = ok
		if w.load.Unfenced && w.store.Set(sctx, "plain:"+key, plain+1, 0).Err() == nil {
			w.sink.Mark("plain")
		}
	}
	s.Exit = chaos.Now()
	s.Valid = chaos.MonoOf(le.ValidUntil())
	s.Lost = le.Err() != nil
	w.sink.AddSection(s)

	confirmed := counted && w.checkHolds(le, 1, epoch, "before release")
	calm := w.calm()
	releaseStart := time.Now()
	stillValid := le.Err() == nil && releaseStart.Before(le.ValidUntil())
	err = le.Release(ctx)
	w.sink.AddCall(chaos.Call{Op: "release", Key: key, Worker: w.id, Token: le.Token(), Start: chaos.MonoOf(releaseStart),
		Deadline: chaos.MonoOf(releaseStart.Add(w.cfg.ReleaseTimeout)), Return: chaos.Now(), Err: errText(err)})
	switch {
	case err == nil:
	case !typed(err):
		w.sink.Untyped("release", key, err)
	case confirmed && stillValid && w.stable(epoch) && (errors.Is(err, guard.ErrNotHeld) || errors.Is(err, guard.ErrExpired)):
		// Redis had the lock as ours just before, and the lease was valid: the release
		// took effect, and a retry of it reported someone else's state. Only a client
		// retry after a lost reply can do that, once the release's nonce has left the
		// fence's bounded memory (many handoffs later): under a fault, a note; with no
		// fault before or during the call, nothing made the client retry, and the
		// engine misreported its own release.
		if calm && w.calm() {
			w.sink.Violate(chaos.Violation{Inv: misreported, Key: key, Tokens: []int64{le.Token()}, From: chaos.MonoOf(releaseStart), To: chaos.Now(),
				Detail: fmt.Sprintf("%s: release of %q, confirmed in Redis just before while the lease was valid and no fault was injected, returned %v", w.id, key, err)})
		} else {
			w.sink.Mark("misreported release")
		}
	}
	return true
}

// maybeOrdered runs one section: on its own, or, for an Ordered load, inside the hold
// of an outer key that comes before the section's keys. It reports false as section does.
func (w *worker) maybeOrdered(ctx context.Context) bool {
	if !w.load.Ordered || len(w.load.Keys) < 2 {
		return w.section(ctx)
	}
	i := w.rng.IntN(len(w.load.Keys) - 1)
	outer := w.load.Keys[i]
	actx, cancel := context.WithTimeout(ctx, w.load.acquireTimeout(w.rng))
	start := chaos.Now()
	le, err := w.locker.Acquire(actx, outer)
	cancel()
	if err != nil {
		if !typed(err) {
			w.sink.Untyped("acquire", outer, err)
		}
		w.falseDeadlock(outer, start, err)
		return errors.Is(err, guard.ErrLocked) || ctx.Err() != nil
	}
	w.from = i + 1
	ok := w.section(le.Context())
	w.from = 0
	if err := le.Release(ctx); err != nil && !typed(err) {
		w.sink.Untyped("release", outer, err)
	}
	return ok
}

// setSection runs one critical section over load.Set keys taken as one lock (see
// load.Set); it reports false as section does.
func (w *worker) setSection(ctx context.Context) bool {
	keys := make([]string, w.load.Set)
	for i, p := range w.rng.Perm(len(w.load.Keys))[:w.load.Set] {
		keys[i] = w.load.Keys[p]
	}
	w.seq++
	label := w.id + "/" + strconv.Itoa(w.seq)
	actx, cancel := context.WithTimeout(ctx, w.load.acquireTimeout(w.rng))
	deadline, _ := actx.Deadline()
	seen := watchDeadline(actx)
	start := chaos.Now()
	le, err := w.locker.AcquireAll(actx, keys)
	enter := chaos.Now()
	fired := seen()
	cancel()
	if err != nil {
		for _, k := range keys {
			w.sink.AddCall(chaos.Call{Op: "acquire", Key: k, Worker: w.id, Start: start, Deadline: chaos.MonoOf(deadline), Return: enter, Fired: fired, Err: errText(err)})
		}
		if !typed(err) {
			w.sink.Untyped("acquire", keys[0], err)
		}
		w.falseDeadlock(keys[0], start, err)
		return errors.Is(err, guard.ErrLocked) || ctx.Err() != nil
	}
	keys, tokens := le.Keys(), le.Tokens()
	for i, k := range keys {
		w.sink.AddCall(chaos.Call{Op: "acquire", Key: k, Worker: w.id, Token: tokens[i], Start: start, Deadline: chaos.MonoOf(deadline), Return: enter, Fired: fired})
	}
	stop := context.AfterFunc(le.Context(), func() {
		noticed := chaos.Now()
		if cause := context.Cause(le.Context()); errors.Is(cause, guard.ErrLeaseLost) {
			for i, k := range keys { // lost as one: every key's lease ended
				w.sink.AddLoss(chaos.Loss{Key: k, Worker: w.id, Token: tokens[i], Valid: chaos.MonoOf(le.ValidUntil()), Noticed: noticed, Reason: cause.Error()})
			}
		}
	})
	defer stop()
	lctx := le.Context()
	sctx, scancel := context.WithTimeout(lctx, 5*time.Second+w.load.HoldMax)
	defer scancel()
	regs := make([]*chaos.Register, len(keys))
	vals := make([]int64, len(keys))
	readOK := make([]bool, len(keys))
	for i, k := range keys {
		regs[i] = chaos.NewRegister(w.store, k)
		vals[i], readOK[i], err = regs[i].Read(sctx, tokens[i], label)
		if err != nil && !errors.Is(err, context.Canceled) {
			w.sink.Untyped("register read", k, err)
		}
	}
	sleepCtx(lctx, w.load.hold(w.rng))
	acked := make([]bool, len(keys))
	for i, k := range keys {
		if readOK[i] && le.Err() == nil {
			ok, err := regs[i].Write(sctx, tokens[i], vals[i]+1, label)
			if err != nil && !errors.Is(err, context.Canceled) {
				w.sink.Untyped("register write", k, err)
			}
			acked[i] = ok
		}
	}
	exit, valid, lost := chaos.Now(), chaos.MonoOf(le.ValidUntil()), le.Err() != nil
	for i, k := range keys {
		w.sink.AddSection(chaos.Section{Key: k, Worker: w.id, Token: tokens[i], Enter: enter, Exit: exit, Valid: valid,
			Lost: lost, Acked: acked[i], Owner: string(le.Owner())})
	}
	releaseStart := time.Now()
	err = le.Release(ctx)
	returned := chaos.Now()
	for i, k := range keys {
		w.sink.AddCall(chaos.Call{Op: "release", Key: k, Worker: w.id, Token: tokens[i], Start: chaos.MonoOf(releaseStart),
			Deadline: chaos.MonoOf(releaseStart.Add(w.cfg.ReleaseTimeout)), Return: returned, Err: errText(err)})
	}
	if err != nil && !typed(err) {
		w.sink.Untyped("release", keys[0], err)
	}
	return true
}

// falseDeadlock reports an acquisition of key, begun at start, that failed with
// ErrDeadlock: no load of the suite can form a cycle.
func (w *worker) falseDeadlock(key string, start chaos.Mono, err error) {
	if errors.Is(err, guard.ErrDeadlock) {
		w.sink.Violate(failure(noFalseDeadlock, key, start, "acquire: %v", err))
	}
}

// reenter takes the lock again for the same owner through another Locker, as a
// downstream service reached with the owner's token would, and checks that Redis
// counts both holds and then one. It reports false when the reentry failed for a reason
// that leaves its outcome unknown (its compensation may be pending).
func (w *worker) reenter(ctx context.Context, le *guard.Lease, epoch int64, opts []guard.Option) bool {
	nctx, cancel := context.WithTimeout(ctxid.NewContext(ctx, le.Owner()), w.load.AcquireMax)
	defer cancel()
	deadline, _ := nctx.Deadline()
	seen := watchDeadline(nctx)
	start := chaos.Now()
	calm := w.calm()
	in, err := w.nested.Acquire(nctx, le.Key(), opts...)
	ret := chaos.Now()
	w.sink.AddCall(chaos.Call{Op: "acquire", Key: le.Key(), Worker: w.id + "+nested", Token: tokenOf(in), Start: start, Deadline: chaos.MonoOf(deadline), Return: ret, Fired: seen(), Err: errText(err)})
	if err != nil {
		if !typed(err) {
			w.sink.Untyped("nested acquire", le.Key(), err)
		}
		if errors.Is(err, guard.ErrLocked) && valid(le) && w.stable(epoch) && calm && w.calm() {
			// With Redis reachable, it counts this hold at once: only the engine can have
			// kept the reentry waiting.
			w.sink.Violate(chaos.Violation{Inv: reentry, Key: le.Key(), Tokens: []int64{le.Token()}, From: start, To: chaos.Now(),
				Detail: fmt.Sprintf("%s: reentry on %q through another Locker was refused as busy (%v) while the outer lease was valid and no fault was injected; %s",
					w.id, le.Key(), err, w.serverViews(le))})
		}
		return errors.Is(err, guard.ErrLocked) && !errors.Is(err, context.DeadlineExceeded)
	}
	if valid(le) && w.stable(epoch) {
		if !in.Reentrant() {
			w.violate(chaos.I2, le.Key(), []int64{le.Token(), in.Token()}, "%s: reentry on %q through another Locker was not reentrant while the outer lease was valid", w.id, le.Key())
		}
		if in.Token() != le.Token() {
			w.violate(chaos.M3, le.Key(), []int64{le.Token(), in.Token()}, "%s: reentry on %q got token %d, outer lease has %d", w.id, le.Key(), in.Token(), le.Token())
		}
	}
	w.checkHolds(le, 2, epoch, "after reentry")
	err = in.Release(ctx)
	if err != nil && !typed(err) {
		w.sink.Untyped("nested release", le.Key(), err)
	}
	if err != nil {
		return false // a release that failed may still have taken effect
	}
	w.checkHolds(le, 1, epoch, "after the reentrant release")
	return true
}

// stable reports whether the lock Redis kept its data from when the worker read epoch
// until now: no data-losing fault (world.forget) ended meanwhile, and none was under way
// then — a section that began while one was (a failover switching primaries: a grant then
// may go to a primary that is being demoted) proves nothing about what Redis keeps.
func (w *worker) stable(epoch int64) bool { return epoch%2 == 0 && w.epoch() == epoch }

// checkHolds probes the lock hash for le's owner while le is valid (I2): the owner's
// hold count and the token must be what this worker made them. Nothing is concluded
// when Redis does not answer, when the lease stops being valid meanwhile, or when Redis
// lost its data since the section began. It reports whether Redis confirmed the state.
func (w *worker) checkHolds(le *guard.Lease, holds int, epoch int64, when string) bool {
	if !valid(le) {
		return false
	}
	if len(w.probes) > 0 {
		return w.checkQuorumHolds(le, holds, epoch, when)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	hash, fields := holdProbe(le)
	// Validity only moves forward, and Redis's expiry with it: the one read before the
	// probe is one that Redis's expiry, read after, must not fall short of.
	validUntil := le.ValidUntil()
	v, pttl, err := w.readHolds(ctx, hash, fields...)
	answered := time.Now()
	if err != nil || !valid(le) || !w.stable(epoch) {
		return false
	}
	if !holdMatches(le, v, holds) {
		w.violate(chaos.I2, le.Key(), []int64{le.Token()}, "%s: %s on %q, Redis has holds/token/holder %v for a valid lease, want %d, %d and %s",
			w.id, when, le.Key(), v, holds, le.Token(), le.Owner())
		return false
	}
	// Redis expires the lock pttl after it answered, which was before answered: no
	// later than answered+pttl (PTTL rounds down, and Redis keeps expiries in whole
	// milliseconds: 2ms cover both). A lease valid beyond that claims a lock Redis has
	// let go, whether its own validity was wrong or another owner's renewal reset the
	// lock's TTL.
	switch expiry := answered.Add(pttl + 2*time.Millisecond); {
	case pttl == -1:
		w.violate(chaos.I2, le.Key(), []int64{le.Token()}, "%s: %s on %q, the lock has no expiry in Redis", w.id, when, le.Key())
		return false
	case validUntil.After(expiry):
		w.violate(chaos.I2, le.Key(), []int64{le.Token()}, "%s: %s on %q, Redis expires the lock %s before the lease's validity deadline (PTTL %s)",
			w.id, when, le.Key(), validUntil.Sub(expiry), pttl)
		return false
	}
	return true
}

// readHolds reads fields of the lock hash and the time its hold has left for an I2 probe:
// the hold's lease (the last field read, less the server's clock), or the hash's PTTL
// when that is shorter; from the deployment's probe client, or, on a Sentinel group, from the
// primary the sentinels name, checking on the same connection that it still is a primary
// (a server being demoted answers nothing conclusive).
func (w *worker) readHolds(ctx context.Context, hash string, fields ...string) ([]any, time.Duration, error) {
	var c redis.Cmdable = w.probe
	if w.primary != nil {
		var err error
		if c, err = w.primary(ctx); err != nil {
			return nil, 0, err
		}
	}
	var role *redis.Cmd
	var v *redis.SliceCmd
	var pttl *redis.DurationCmd
	var now *redis.TimeCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if w.primary != nil {
			role = p.Do(ctx, "ROLE")
		}
		v = p.HMGet(ctx, hash, fields...)
		pttl = p.PTTL(ctx, hash)
		now = p.Time(ctx)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	if role != nil {
		if r, _ := role.Slice(); len(r) == 0 || r[0] != "master" {
			return nil, 0, errors.New("the probed server is no longer a primary")
		}
	}
	d := pttl.Val()
	if d == -2 {
		d = 0 // gone between the two reads: it expired then
	}
	// The hold's own lease (the last field of the probe's view) ends before the hash's
	// TTL, which covers the longest lease and the fence retention.
	view := probeView(v.Val())
	e, _ := view[len(view)-1].(string)
	until, _ := strconv.ParseInt(e, 10, 64)
	d = min(d, max(time.Duration(until-now.Val().UnixMilli())*time.Millisecond, 0))
	return view, d, nil
}

// probeBudget is how long a quorum I2 probe waits for the servers' replies; a server
// silent that long counts as unanswered.
const probeBudget = 200 * time.Millisecond

// errUnanswered marks a server that did not answer a probe within probeBudget.
var errUnanswered = errors.New("no answer within the probe budget")

// checkQuorumHolds is checkHolds on a quorum: a majority of the servers must have the
// hold count and the token; nothing is concluded while the servers that did not answer
// could make up the difference.
func (w *worker) checkQuorumHolds(le *guard.Lease, holds int, epoch int64, when string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	hash, fields := holdProbe(le)
	type reply struct {
		v   []any
		err error
	}
	need := len(w.probes)/2 + 1
	// A quorum call returns once a majority answered: the others (a slow server, one that
	// granted after the majority) catch up a round trip later. Look again for a while
	// before concluding.
	settle := time.Now().Add(250 * time.Millisecond)
	var seen []string
	for {
		// Replies are taken as they come, for up to a probe budget: a paused server is
		// unanswered (see below), and must not hold the worker for the whole timeout —
		// that would measure the probe, not the engine, in the rows that pause one.
		replies := make([]reply, len(w.probes))
		for i := range replies {
			replies[i].err = errUnanswered
		}
		got := make(chan struct {
			i int
			r reply
		}, len(w.probes))
		for i, p := range w.probes {
			go func() {
				v, err := p.HMGet(ctx, hash, fields...).Result()
				v = probeView(v)
				got <- struct {
					i int
					r reply
				}{i, reply{v, err}}
			}()
		}
		budget := time.NewTimer(probeBudget)
		matched := 0
	collect:
		for range w.probes {
			select {
			case g := <-got:
				replies[g.i] = g.r
				if g.r.err == nil && holdMatches(le, g.r.v, holds) {
					if matched++; matched >= need {
						break collect // the silent ones cannot change the conclusion
					}
				}
			case <-budget.C:
				break collect
			}
		}
		budget.Stop()
		if !valid(le) || !w.stable(epoch) {
			return false
		}
		answered, match := 0, 0
		seen = seen[:0]
		for _, r := range replies {
			if r.err != nil {
				continue
			}
			answered++
			got, _ := r.v[0].(string)
			tok, _ := r.v[1].(string)
			if holdMatches(le, r.v, holds) {
				match++
			}
			seen = append(seen, got+"/"+tok)
		}
		// Servers that did not answer (paused, slowed) may be part of the majority
		// that holds the lease: the check concludes only when even with them no
		// majority could have the hold.
		unanswered := len(w.probes) - answered
		switch {
		case match >= need:
			return true
		case time.Now().After(settle):
		default:
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if match+unanswered >= need {
			return false
		}
		break
	}
	w.violate(chaos.I2, le.Key(), []int64{le.Token()}, "%s: %s on %q, the quorum's servers have holds/token %v for a valid lease, want %d/%d on %d of them",
		w.id, when, le.Key(), seen, holds, le.Token(), need)
	return false
}

// holdFields names where Redis keeps le's hold: the lock's hash, the fields of the hold
// count, the token and the lease's end, and for the exclusive lock, the fair lock and the
// read-write lock's writer the field of the holder. A share (a reader, a permit) has no
// holder field and no lease field: its count field is its owner's, "<count> <lease end>
// <nonces>" (see guard/internal/script/lua/acquire.lua and kinds/lib.lua, and probeView).
func holdFields(le *guard.Lease) (hash, count, token, holder, lease string) {
	owner := string(le.Owner())
	switch le.Kind() {
	case guard.KindRead:
		return lockName(le.Key()) + ":rw", owner, owner + "#t", "", ""
	case guard.KindWrite:
		return lockName(le.Key()) + ":rw", "#Wn", "#t", "#W", "#We"
	case guard.KindSemaphore:
		return lockName(le.Key()) + ":sem", owner, owner + "#t", "", ""
	case guard.KindFair:
		return lockName(le.Key()) + ":fair", "#n", "#t", "#o", "#e"
	}
	return lockName(le.Key()), "#n", "#t", "#o", "#e"
}

// holdProbe returns the fields an I2 probe reads of le's hold (holdFields): the count
// and the token, the holder when the kind has one, and the lease's end last — of a
// share, its own field and its token, which probeView makes the count, the token and
// the lease's end.
func holdProbe(le *guard.Lease) (hash string, fields []string) {
	hash, count, token, holder, lease := holdFields(le)
	switch {
	case lease == "":
		return hash, []string{count, token}
	case holder == "":
		return hash, []string{count, token, lease}
	}
	return hash, []string{count, token, holder, lease}
}

// probeView returns the reply v of an I2 probe (holdProbe) as the count, the token, the
// holder when the kind has one, and the lease's end: a share's probe (two fields) has
// its count and its lease's end in its first, "<count> <lease end> <nonces>".
func probeView(v []any) []any {
	if len(v) != 2 {
		return v
	}
	var count, until any // nil: no such share
	if s, ok := v[0].(string); ok {
		parts := strings.SplitN(s, " ", 3)
		count = parts[0]
		if len(parts) > 1 {
			until = parts[1]
		}
	}
	return []any{count, v[1], until}
}

// serverViews reads, for a violation's detail, what each server of the deployment (a
// quorum's every server) holds of le's lock just after: the hold fields of le's owner
// (holdProbe), the lock's holder, lease end and waiting flag, and the hash's PTTL — or
// the error, a paused server's unanswered within the probe budget.
func (w *worker) serverViews(le *guard.Lease) string {
	probes := w.probes
	if len(probes) == 0 {
		probes = []redis.UniversalClient{w.probe}
	}
	hash, fields := holdProbe(le)
	fields = append(fields, "#o", "#e", "#w")
	ctx, cancel := context.WithTimeout(context.Background(), probeBudget)
	defer cancel()
	views := make([]string, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipe := p.Pipeline()
			v := pipe.HMGet(ctx, hash, fields...)
			pttl := pipe.PTTL(ctx, hash)
			if _, err := pipe.Exec(ctx); err != nil {
				views[i] = fmt.Sprintf("server %d: %v", i, err)
				return
			}
			views[i] = fmt.Sprintf("server %d: %v = %v, PTTL %s", i, fields, v.Val(), pttl.Val())
		}()
	}
	wg.Wait()
	return "in Redis just after: " + strings.Join(views, "; ")
}

// holdMatches reports whether v, the reply of an I2 probe (holdProbe), shows le's hold
// with holds holds and its token.
func holdMatches(le *guard.Lease, v []any, holds int) bool {
	if fmt.Sprint(v[0]) != strconv.Itoa(holds) || fmt.Sprint(v[1]) != strconv.FormatInt(le.Token(), 10) {
		return false
	}
	return len(v) < 4 || fmt.Sprint(v[2]) == string(le.Owner()) // the holder, when the kind has one
}

// violate reports a breach of inv that this worker saw just now on key.
func (w *worker) violate(inv chaos.Invariant, key string, tokens []int64, format string, args ...any) {
	now := chaos.Now()
	w.sink.Violate(chaos.Violation{Inv: inv, Key: key, Tokens: tokens, From: now, To: now, Detail: fmt.Sprintf(format, args...)})
}

// valid reports whether le is held and within its validity now.
func valid(le *guard.Lease) bool { return le.Err() == nil && time.Now().Before(le.ValidUntil()) }

// lockName is the Redis hash of key under the default prefix; chaos keys need no escaping.
func lockName(key string) string { return "guard:{" + key + "}" }

// lockKey is the key whose Redis names (lock, fence, queue, a kind's) start with name.
func lockKey(name string) string {
	key := strings.TrimPrefix(name, "guard:{")
	if i := strings.LastIndexByte(key, '}'); i >= 0 {
		key = key[:i]
	}
	return key
}

// typed reports whether err is one the engine documents: a sentinel of package guard,
// ctxid.ErrInvalid, or a context error.
func typed(err error) bool {
	for _, s := range []error{guard.ErrLocked, guard.ErrDeadlock, guard.ErrLeaseLost, guard.ErrNotHeld, guard.ErrExpired,
		guard.ErrUnavailable, guard.ErrClosed, guard.ErrInvalidKey, guard.ErrInvalidConfig,
		context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// nonzero lists token as the only token of a violation, or none when it is 0.
func nonzero(token int64) []int64 {
	if token == 0 {
		return nil
	}
	return []int64{token}
}

// tokenOf returns le's fencing token, 0 when Acquire returned no lease.
func tokenOf(le *guard.Lease) int64 {
	if le == nil {
		return 0
	}
	return le.Token()
}

// replicaAcks matches what a *guard.RedisError says of a write that too few replicas
// acknowledged (SyncReplicas).
var replicaAcks = regexp.MustCompile(`: (\d+) of (\d+) replicas acknowledged the (grant|renewal) in time; `)

// replicaShortfall reports whether err holds a *guard.RedisError for a grant or a renewal
// that too few replicas acknowledged in time, and returns the replicas wanted and reached
// and whether the write was a renewal.
func replicaShortfall(err error) (want, acked int, renewal, ok bool) {
	var re *guard.RedisError
	if !errors.As(err, &re) {
		return 0, 0, false, false
	}
	m := replicaAcks.FindStringSubmatch(re.Error())
	if m == nil {
		return 0, 0, false, false
	}
	acked, _ = strconv.Atoi(m[1])
	want, _ = strconv.Atoi(m[2])
	return want, acked, m[3] == "renewal", true
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// node is one Locker with its own Redis client: a process, as far as Redis can tell.
type node struct {
	name   string
	client redis.UniversalClient
	proxy  *redistest.Proxy // between client and Redis; nil when direct
	// A quorum Locker's node has a client per server, each behind a proxy of its own.
	clients []redis.UniversalClient
	proxies []*redistest.Proxy
	locker  *guard.Locker
	idle    bool // runs no workers: the scenario uses its Locker itself
}

// world is one scenario's setup: a lock deployment, a storage Redis that is never
// faulted, Lockers, and the history of what happened. The lock deployment is a single
// Redis (lock), a Redis Cluster (cluster) or a Sentinel group (sentinel); the other two
// are nil.
type world struct {
	t        *testing.T
	tb       testing.TB // t, for the Redis test harness: its failures come with a report
	cfg      config
	lock     *redistest.Server
	cluster  *redistest.Cluster
	sentinel *redistest.Sentinel
	// quorum, when set, is the independent servers of quorum Lockers (guard.NewQuorum);
	// qprobes are direct clients of each, and probe is the first of them.
	quorum  []*redistest.Server
	qprobes []redis.UniversalClient
	// dialTo, when set, rewrites the address a client of a Cluster dials: the lag row
	// sends a primary's replication through a proxy by announcing the proxy's address,
	// and its clients go to the primary directly.
	dialTo func(addr string) string
	store  *redistest.Server
	sc     *redis.Client         // storage client
	probe  redis.UniversalClient // lock deployment, directly: probes and fault injection
	// primary is the workers' I2 probe of a Sentinel group (see worker.primary); nil
	// elsewhere.
	primary func(ctx context.Context) (redis.Cmdable, error)
	hist    *chaos.History
	epoch   atomic.Int64
	// faulting counts faults being injected now; a fault's effects on the engine
	// (queued commands, timeouts) may last a little longer.
	faulting atomic.Int32
	leaks    goleak.Option
	// stalls is the scheduling delay measured in this process and in the worker
	// processes; stopStalls ends this process's probe.
	stalls     *chaos.Stalls
	stopStalls func()
	nodes      []*node
	procs      []*proc

	mu    sync.Mutex
	marks map[string]int
	notes []string
	// queues are the fair locks' wait queues as observed in Redis (watchQueues).
	queues []queueView
	// checked is set once finish has checked the history: a failure found later is
	// reported at once instead of with the history's violations. pending lists the
	// failures failf recorded before, reported at cleanup if finish never ran.
	checked bool
	pending []chaos.Violation
}

// explaining is the testing.TB a world hands to the Redis test harness (redistest): a
// failure it reports, such as a server that did not restart, comes with the world's
// report of that moment, like the scenario's own failures.
type explaining struct {
	*testing.T
	w *world
}

func (e explaining) Fatal(args ...any) {
	e.T.Helper()
	e.w.fatalf(setup, "", 0, "%s", fmt.Sprint(args...))
}

func (e explaining) Fatalf(format string, args ...any) {
	e.T.Helper()
	e.w.fatalf(setup, "", 0, format, args...)
}

func (e explaining) Error(args ...any) {
	e.T.Helper()
	e.w.reportf(setup, "", 0, "%s", fmt.Sprint(args...))
}

func (e explaining) Errorf(format string, args ...any) {
	e.T.Helper()
	e.w.reportf(setup, "", 0, format, args...)
}

// newWorld builds a world whose lock deployment is one Redis started with lockArgs.
func newWorld(t *testing.T, cfg config, lockArgs ...string) *world {
	t.Helper()
	return newWorldOn(t, cfg, func(w *world) { w.lock = redistest.Start(w.tb, redistest.Args(lockArgs...)) })
}

// newWorldOn builds a world whose lock deployment start sets up, with w.tb.
func newWorldOn(t *testing.T, cfg config, start func(w *world)) *world {
	t.Helper()
	w := &world{t: t, cfg: cfg, hist: &chaos.History{}, marks: map[string]int{}}
	w.tb = explaining{T: t, w: w}
	start(w)
	w.store = redistest.Start(w.tb)
	w.leaks = goleak.IgnoreCurrent()
	w.stalls = &chaos.Stalls{}
	w.stopStalls = w.stalls.Watch(stallTick)
	t.Cleanup(w.stopStalls)
	t.Cleanup(func() {
		w.mu.Lock()
		pending := w.pending
		if w.checked {
			pending = nil
		}
		w.mu.Unlock()
		for _, r := range w.hist.Explain(pending, w.stalls) {
			t.Errorf("before the scenario ended: %s", r)
		}
	})
	w.sc = w.store.Client(w.tb, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	probeOpts := func(o *redis.Options) {
		o.ContextTimeoutEnabled = true
		o.ReadTimeout, o.MaxRetries = 300*time.Millisecond, -1
	}
	if w.quorum != nil {
		for _, s := range w.quorum {
			w.qprobes = append(w.qprobes, s.Client(w.tb, probeOpts))
		}
		w.probe = w.qprobes[0]
		return w
	}
	w.probe = w.client("", probeOpts)
	if w.sentinel != nil {
		w.primary = w.sentinelPrimary(probeOpts)
	}
	return w
}

// sentinelPrimary returns the I2 probe of a Sentinel group (see world.primary): it asks
// a sentinel for the primary's address at each call and keeps one client per address.
func (w *world) sentinelPrimary(set func(*redis.Options)) func(ctx context.Context) (redis.Cmdable, error) {
	var mu sync.Mutex
	clients := map[string]*redis.Client{}
	sentinels := make([]*redis.SentinelClient, 0, len(w.sentinel.Sentinels()))
	for _, addr := range w.sentinel.Sentinels() {
		s := redis.NewSentinelClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
		w.tb.Cleanup(func() { _ = s.Close() })
		sentinels = append(sentinels, s)
	}
	name := w.sentinel.MasterName()
	return func(ctx context.Context) (redis.Cmdable, error) {
		var addr []string
		var err error
		for _, s := range sentinels {
			if addr, err = s.GetMasterAddrByName(ctx, name).Result(); err == nil && len(addr) == 2 {
				break
			}
		}
		if err != nil || len(addr) != 2 {
			return nil, fmt.Errorf("no sentinel named the primary: %v", err)
		}
		a := net.JoinHostPort(addr[0], addr[1])
		mu.Lock()
		defer mu.Unlock()
		c := clients[a]
		if c == nil {
			o := &redis.Options{Addr: a}
			set(o)
			c = redis.NewClient(o)
			w.tb.Cleanup(func() { _ = c.Close() })
			clients[a] = c
		}
		return c, nil
	}
}

// client returns a new client of the lock deployment, closed at cleanup, with the
// options that set gives a single server's client: a *redis.Client on the single server
// (at addr when not empty), a *redis.ClusterClient on a Cluster, a failover *redis.Client
// on a Sentinel group. A Cluster or failover client takes set's timeouts, retries and
// ContextTimeoutEnabled, and keeps the harness's options otherwise.
func (w *world) client(addr string, set ...func(*redis.Options)) redis.UniversalClient {
	var o redis.Options
	for _, f := range set {
		f(&o)
	}
	switch {
	case w.cluster != nil:
		return w.cluster.Client(w.tb, func(c *redis.ClusterOptions) {
			c.ContextTimeoutEnabled, c.ReadTimeout, c.WriteTimeout = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
			c.MaxRetries, c.DialTimeout = o.MaxRetries, o.DialTimeout
			if to := w.dialTo; to != nil {
				d := &net.Dialer{Timeout: o.DialTimeout}
				if d.Timeout == 0 {
					d.Timeout = 5 * time.Second
				}
				c.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
					return d.DialContext(ctx, network, to(addr))
				}
			}
		})
	case w.sentinel != nil:
		return w.sentinel.Client(w.tb, func(c *redis.FailoverOptions) {
			c.ContextTimeoutEnabled, c.ReadTimeout, c.WriteTimeout = o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout
			c.MaxRetries, c.DialTimeout = o.MaxRetries, o.DialTimeout
		})
	}
	if addr != "" {
		set = append(set, func(o *redis.Options) { o.Addr = addr })
	}
	return w.lock.Client(w.tb, set...)
}

// addNode adds a Locker on a client of its own, through a fault proxy when proxied
// (single server only).
func (w *world) addNode(name string, proxied bool) *node {
	w.t.Helper()
	if w.quorum != nil {
		return w.addQuorumNode(name)
	}
	n := &node{name: name}
	addr := ""
	if proxied {
		if w.lock == nil {
			w.fatalf(setup, "", 0, "node %s: fault proxies sit in front of a single server only", name)
		}
		n.proxy = redistest.NewProxy(w.tb, w.lock.Addr())
		addr = n.proxy.Addr()
	}
	n.client = w.client(addr, w.cfg.clientOpts)
	l, err := w.cfg.newLocker(n.client)
	if err != nil {
		w.fatalf(setup, "", 0, "guard.New: %v", err)
	}
	n.locker = l
	w.nodes = append(w.nodes, n)
	return n
}

// addIdle adds a node that runs no workers: a Locker for the scenario's own calls.
func (w *world) addIdle(name string) *node {
	w.t.Helper()
	n := w.addNode(name, false)
	n.idle = true
	return n
}

// AddSection and the rest make a world the sink of its in-process workers.
func (w *world) sink() sink { return worldSink{w} }

type worldSink struct{ w *world }

func (s worldSink) AddSection(x chaos.Section) { s.w.hist.AddSection(x) }
func (s worldSink) AddLoss(x chaos.Loss)       { s.w.hist.AddLoss(x) }
func (s worldSink) AddCall(x chaos.Call)       { s.w.hist.AddCall(x) }
func (s worldSink) Violate(v chaos.Violation)  { s.w.hist.AddViolation(v) }
func (s worldSink) Untyped(op, key string, err error) {
	s.w.hist.AddViolation(untypedViolation(op, key, err))
}
func (s worldSink) Mark(kind string) {
	s.w.mu.Lock()
	s.w.marks[kind]++
	s.w.mu.Unlock()
}

// untypedViolation is the breach of typedErrors by err, returned just now by op on key.
func untypedViolation(op, key string, err error) chaos.Violation {
	now := chaos.Now()
	return chaos.Violation{Inv: typedErrors, Key: key, From: now, To: now, Detail: fmt.Sprintf("%s: %v", op, err)}
}

// Checks of the harness beyond the table's invariants, named in failure reports.
const (
	// typedErrors: every error the engine returns matches one of its documented
	// sentinels, and a refused Redis call surfaces as the typed error it should.
	typedErrors chaos.Invariant = "typed errors"
	// reentry: a reentry through another Locker, made while the owner's lease is valid
	// and no fault is injected, is granted, not refused as busy.
	reentry chaos.Invariant = "reentry"
	// misreported: a release that took effect, made while the lease was valid and no
	// fault was injected, reports success, not ErrNotHeld or ErrExpired.
	misreported chaos.Invariant = "release report"
	// fairOrder: a fair lock is granted in the order its owners queued.
	fairOrder chaos.Invariant = "fair order"
	// noPartialState: a script Redis refused wrote nothing.
	noPartialState chaos.Invariant = "no partial state"
	// liveness: a free lock is taken, a waiter is woken, a scenario's fault lands
	// where it must, within bounds derived from the scenario's timeouts.
	liveness chaos.Invariant = "liveness"
	// waitCost: waiting costs one goroutine per waiter and Redis traffic that does not
	// grow with the number of waiters.
	waitCost chaos.Invariant = "waiting cost"
	// workerProcess: a worker process starts, runs clean (no race, no panic), reports
	// in full and exits when told.
	workerProcess chaos.Invariant = "worker process"
	// setup: the scenario could build its world and inject its faults.
	setup chaos.Invariant = "setup"
	// noFalseDeadlock: no acquisition fails with guard.ErrDeadlock where no cycle of
	// waits can form — in none of the loads here: a section holds one key, reenters it,
	// takes two in key order (load.Ordered), or takes several as one lock (load.Set).
	noFalseDeadlock chaos.Invariant = "no false deadlock"
)

// recent is how far back a failure found at a given moment looks for the scheduling
// lag when it names no start of its own.
const recent = 100 * time.Millisecond

// failure is the breach of check on key (empty for none) found now, in what happened
// since from (zero for just now).
func failure(check chaos.Invariant, key string, from chaos.Mono, format string, args ...any) chaos.Violation {
	now := chaos.Now()
	if from == 0 {
		from = now.Add(-recent)
	}
	return chaos.Violation{Inv: check, Key: key, From: from, To: now, Detail: fmt.Sprintf(format, args...)}
}

// failf records the breach of check on key found now, in what happened since from
// (zero for just now). Before finish it joins the history's violations, which the
// scenario's verdict reports with the events around them, and after them; after
// finish it fails the test at once with its report. Safe for concurrent use.
func (w *world) failf(check chaos.Invariant, key string, from chaos.Mono, format string, args ...any) {
	w.t.Helper()
	v := failure(check, key, from, format, args...)
	w.mu.Lock()
	if !w.checked {
		w.hist.AddViolation(v)
		w.pending = append(w.pending, v)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.t.Errorf("%s", w.hist.Explain([]chaos.Violation{v}, w.stalls)[0])
}

// reportf fails the test at once, without stopping it, with the report of the breach
// of check on key found now, in what happened since from (zero for just now). Safe for
// concurrent use.
func (w *world) reportf(check chaos.Invariant, key string, from chaos.Mono, format string, args ...any) {
	w.t.Helper()
	w.t.Errorf("%s", w.hist.Explain([]chaos.Violation{failure(check, key, from, format, args...)}, w.stalls)[0])
}

// fatalf fails the test at once with the report of the breach of check on key found
// now, in what happened since from (zero for just now): the events up to now and the
// scheduling lag. Only the test's goroutine may call it.
func (w *world) fatalf(check chaos.Invariant, key string, from chaos.Mono, format string, args ...any) {
	w.t.Helper()
	v := failure(check, key, from, format, args...)
	w.t.Fatalf("%s", w.hist.Explain([]chaos.Violation{v}, w.stalls)[0])
}

func (w *world) note(format string, args ...any) {
	w.mu.Lock()
	w.notes = append(w.notes, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

func (w *world) mark(kind string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.marks[kind]
}

// run starts ld's workers on every node but the idle ones (each worker reenters
// through the next such node when ld.Nested) and returns a function that stops them and
// waits.
func (w *world) run(ld load) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	busy := slices.DeleteFunc(slices.Clone(w.nodes), func(n *node) bool { return n.idle })
	for i, n := range busy {
		for g := range ld.Workers {
			wk := &worker{
				id: fmt.Sprintf("%s/%d", n.name, g), locker: n.locker, store: w.sc, probe: w.probe, probes: w.qprobes, primary: w.primary,
				sink: w.sink(), epoch: w.epoch.Load, calm: func() bool { return w.faulting.Load() == 0 }, cfg: w.cfg, load: ld,
				rng: rand.New(rand.NewPCG(uint64(i), uint64(g))),
			}
			if ld.Nested {
				wk.nested = busy[(i+1)%len(busy)].locker
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				wk.run(ctx)
			}()
		}
	}
	if ld.Kind == "fair" && !ld.Distinct {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.watchQueues(ctx, ld.Keys)
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// queueView is a fair lock's wait queue read from Redis at one moment: its owners, first
// in line first.
type queueView struct {
	key    string
	at     chaos.Mono
	owners []string
}

// watchQueues reads the wait queues of the fair locks on keys every few milliseconds
// until ctx ends, keeping those that hold two owners or more: what checkFairOrder
// checks the grants against.
func (w *world) watchQueues(ctx context.Context, keys []string) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last := map[string]string{}
	for {
		for _, k := range keys {
			rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			owners, err := w.probe.LRange(rctx, lockName(k)+":fair:owners", 0, -1).Result()
			at := chaos.Now()
			cancel()
			if err != nil || len(owners) < 2 {
				continue
			}
			if j := strings.Join(owners, " "); j != last[k] {
				last[k] = j
				w.mu.Lock()
				w.queues = append(w.queues, queueView{key: k, at: at, owners: owners})
				w.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkFairOrder checks that a fair lock is granted in the order of its queue: an owner
// seen queued behind another enters its section only after that one did, unless that
// one never entered (it gave up: its place went) or lost its place meanwhile for a
// reason outside the engine — a fault from the view to its entry, within a TTL after
// one (places and unclaimed grants lapse after a TTL), or its process stalled for a
// third of a TTL (a waiter renews its place that often).
func (w *world) checkFairOrder() {
	w.mu.Lock()
	views := slices.Clone(w.queues)
	w.mu.Unlock()
	if len(views) == 0 {
		return
	}
	entered := map[string]chaos.Section{}
	for _, s := range w.hist.Sections() {
		if s.Owner != "" {
			entered[s.Key+" "+s.Owner] = s
		}
	}
	faults := w.hist.Faults()
	reported, checked := map[string]bool{}, map[string]bool{}
	defer func() { w.note("%d pairs of queued owners checked for fair grant order", len(checked)) }()
	for _, v := range views {
		for i, a := range v.owners {
			sa, ok := entered[v.key+" "+a]
			if !ok {
				continue
			}
			for _, b := range v.owners[i+1:] {
				sb, ok := entered[v.key+" "+b]
				if !ok {
					continue
				}
				checked[a+" "+b] = true
				if sb.Enter >= sa.Enter || reported[a+" "+b] {
					continue
				}
				span := chaos.Violation{From: v.at, To: sa.Enter}
				if nearFault(span, faults, w.cfg.TTL) || w.stalls.Max(sa.Proc, v.at, sa.Enter) >= w.cfg.TTL/3 {
					continue
				}
				reported[a+" "+b] = true
				w.hist.AddViolation(chaos.Violation{Inv: fairOrder, Key: v.key, Tokens: []int64{sb.Token, sa.Token}, From: v.at, To: sa.Enter,
					Detail: fmt.Sprintf("fair lock %q: %s (token %d) entered %s before %s (token %d), which was ahead of it in the queue read %s before",
						v.key, sb.Worker, sb.Token, sa.Enter.Sub(sb.Enter), sa.Worker, sa.Token, sb.Enter.Sub(v.at))})
			}
		}
	}
}

// fault records one injected fault around do, which injects it and heals it.
func (w *world) fault(kind string, do func()) {
	w.faulting.Add(1)
	start := chaos.Now()
	do()
	end := chaos.Now()
	w.hist.AddFault(chaos.Fault{Kind: kind, Start: start, End: end})
	// Commands held by the fault drain for a while after it is healed.
	time.AfterFunc(time.Second, func() { w.faulting.Add(-1) })
}

// forget bumps the data epoch around lose, which makes the lock Redis lose its data:
// the probes of sections that began before it ended (during it too: the epoch is odd
// then) must not expect their locks there.
func (w *world) forget(lose func()) {
	w.epoch.Add(1)
	lose()
	w.epoch.Add(1)
}

// faultLoop injects faults, each after gap, until d has passed, and at least once; then
// it lets the workers run for gap more, so that the last fault is followed by recovery.
// It returns the number of faults.
func (w *world) faultLoop(d, gap time.Duration, inject func(i int)) int {
	end := time.Now().Add(d)
	i := 0
	for i == 0 || time.Now().Add(gap).Before(end) {
		time.Sleep(gap)
		inject(i)
		i++
	}
	time.Sleep(gap)
	return i
}

// finish closes the Lockers, checks the end state and returns the scenario's row and
// a report of each violation. Scenarios stop their workers first.
func (w *world) finish(name, faults string, slack chaos.Slack) (chaos.Row, []chaos.Report) {
	t := w.t
	t.Helper()
	ctx := context.Background()
	for _, n := range w.nodes {
		_ = n.locker.Close()
	}
	w.stopProcs()
	w.checkOrphans(ctx)
	w.checkFairOrder()
	sections := w.hist.Sections()
	acked := map[string]int{}
	keys := map[string]bool{}
	for _, s := range sections {
		keys[s.Key] = true
		if s.Acked {
			acked[s.Key]++
		}
	}
	rejected := 0
	for k := range keys {
		st, vs, err := chaos.NewRegister(w.sc, k).Audit(ctx, acked[k])
		if err != nil {
			w.fatalf(setup, k, 0, "register audit: %v", err)
		}
		rejected += st.Rejected
		for _, v := range vs {
			w.hist.AddViolation(v)
		}
	}
	if rejected > 0 {
		w.note("%d stale register operations rejected by fencing", rejected)
	}
	if n := w.mark("misreported release"); n > 0 {
		w.note("%d releases reported ErrNotHeld/ErrExpired after taking effect, around a fault (a client retry ran after many handoffs)", n)
	}
	if n := w.mark("grant unacknowledged"); n > 0 {
		w.note("%d grants undone with a typed *RedisError: fewer replicas than SyncReplicas asked for acknowledged them", n)
	}
	if n := w.mark("renewal unacknowledged"); n > 0 {
		w.note("%d leases lost at their acknowledged validity: no replica acknowledged a renewal in time", n)
	}
	for _, n := range w.nodes {
		if n.client != nil {
			_ = n.client.Close()
		}
		if n.proxy != nil {
			n.proxy.Close()
		}
		for i, c := range n.clients {
			_ = c.Close()
			n.proxies[i].Close()
		}
	}
	for _, p := range w.qprobes {
		if p != w.probe {
			_ = p.Close()
		}
	}
	_ = w.probe.Close()
	_ = w.sc.Close()
	w.stopStalls()
	slack.Stalls = w.stalls
	// A server restarted during the scenario has a goroutine reaping it; it belongs to
	// the harness, not to the Lockers.
	if err := goleak.Find(w.leaks, goleak.IgnoreAnyFunction("github.com/guardkit/guardkit/internal/redistest.(*Server).launch.func1")); err != nil {
		w.failf(chaos.I3, "", 0, "goroutines left after the Lockers closed: %v", err)
	}
	w.mu.Lock()
	w.checked = true
	w.mu.Unlock()
	vs, excused := w.hist.Check(slack)
	if excused > 0 {
		w.note("%d late calls or loss notices put down to scheduling stalls (largest stall %s)", excused, w.maxStall().Round(100*time.Microsecond))
	}
	detect, recover := w.hist.FaultTimes(w.cfg.TTL)
	row := chaos.Row{
		Scenario:   name,
		Sections:   len(sections),
		Acquires:   w.hist.Acquires(),
		Faults:     faults,
		Violations: chaos.Count(vs),
	}
	row.Lag, row.LagMax = w.stalls.Summary()
	row.Detect, _ = chaos.Percentile(detect, 99)
	row.Recover, _ = chaos.Percentile(recover, 99)
	if n := row.Violations[typedErrors]; n > 0 {
		w.note("%d errors not of the engine's documented types", n)
	}
	w.mu.Lock()
	row.Note = strings.Join(w.notes, "; ")
	w.mu.Unlock()
	reports := w.hist.Explain(vs, w.stalls)
	injected := w.hist.Faults()
	for i := range reports {
		reports[i].NearFault = nearFault(reports[i].Violation, injected, w.cfg.TTL)
	}
	return row, reports
}

// nearFault reports whether v happened (From to To) while one of faults was injected
// or within after of its end. A lease held across a fault that loses its lock is valid
// for at most a TTL after its last renewal, which came before the fault ended: the
// double grants such a fault makes begin by then.
func nearFault(v chaos.Violation, faults []chaos.Fault, after time.Duration) bool {
	to := max(v.To, v.From)
	for _, f := range faults {
		if v.From <= f.End.Add(after) && to >= f.Start {
			return true
		}
	}
	return false
}

// stallTick is the sleep of the scheduling probe of each process.
const stallTick = 5 * time.Millisecond

func (w *world) maxStall() time.Duration {
	_, worst := w.stalls.Summary()
	return worst
}

// stopProcs stops the worker processes and adds their reports to the history.
func (w *world) stopProcs() {
	for _, p := range w.procs {
		p.stop()
	}
}

// checkOrphans waits up to a TTL and a bit for every lock to leave the lock deployment's
// primaries: once the Lockers are closed, a lock still there after its TTL was left
// behind (I3).
func (w *world) checkOrphans(ctx context.Context) {
	if w.lock != nil && w.lock.PID() == 0 {
		return
	}
	// A lock must be gone a TTL after the Lockers closed. A wait queue is no lock: after
	// a failover lost a lock whose queue survived, no release pops the queue, which
	// lives out its own expiry, 3 TTLs after its last waiter queued.
	start := time.Now()
	lockBound, queueBound := w.cfg.TTL+time.Second, 3*w.cfg.TTL+time.Second
	for {
		keys, err := w.lockNames(ctx)
		keys = slices.DeleteFunc(keys, func(k string) bool {
			return isQueue(k) && time.Since(start) < queueBound || w.isRecord(ctx, k)
		})
		if err == nil && len(keys) == 0 {
			return
		}
		// Until queueBound the list holds locks only (and fence records never).
		if time.Since(start) > lockBound {
			if err != nil {
				w.failf(chaos.I3, "", 0, "listing locks at the end: %v", err)
				return
			}
			for _, k := range keys {
				bound := lockBound
				if isQueue(k) {
					bound = queueBound
				}
				pttl := w.pttl(ctx, k)
				w.failf(chaos.I3, lockKey(k), 0, "%q still in Redis %s after the Lockers closed (PTTL %s)", k, bound, pttl)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isRecord reports whether Redis name k is a lock hash that holds nothing any more: it
// keeps the lock's fence record (#f) for the fence retention after its last lease, and
// is no lock. The exclusive and the fair lock hold while #o's lease (#e) runs; the
// read-write lock's writer while #W names it and #We has not passed; a share (a reader,
// a permit) while the lease end in its owner's field has not (see kinds/lib.lua: a share whose
// lease ran out stays in the hash until a script drops it, and holds nothing). On a
// quorum, on every server that has k.
func (w *world) isRecord(ctx context.Context, k string) bool {
	probes := []redis.Cmdable{w.probe}
	if w.quorum != nil {
		probes = probes[:0]
		for _, p := range w.qprobes {
			probes = append(probes, p)
		}
	}
	for _, p := range probes {
		f, err := p.HGetAll(ctx, k).Result()
		if err != nil {
			if strings.Contains(err.Error(), "WRONGTYPE") {
				return false // a queue
			}
			continue // the server is down: its keys are gone or checked when it is back
		}
		if len(f) == 0 {
			continue // not on this server
		}
		if _, ok := f["#f"]; !ok {
			return false // a hash without a fence record
		}
		now, err := p.Time(ctx).Result()
		if err != nil {
			continue
		}
		live := func(until string) bool {
			ms, _ := strconv.ParseInt(until, 10, 64)
			return ms > now.UnixMilli()
		}
		if f["#o"] != "" && live(f["#e"]) || f["#W"] != "" && live(f["#We"]) {
			return false
		}
		for field, v := range f {
			// A share: its owner's field, "<count> <lease end> <nonces>".
			if parts := strings.SplitN(v, " ", 3); field != "" && !strings.Contains(field, "#") && len(parts) > 1 && live(parts[1]) {
				return false // a live share
			}
		}
	}
	return true
}

// pttl is the longest PTTL of Redis name k on the lock deployment (on a quorum, among
// its servers).
func (w *world) pttl(ctx context.Context, k string) time.Duration {
	if w.quorum == nil {
		d, _ := w.probe.PTTL(ctx, k).Result()
		return d
	}
	var longest time.Duration
	for _, p := range w.qprobes {
		if d, err := p.PTTL(ctx, k).Result(); err == nil && d > longest {
			longest = d
		}
	}
	return longest
}

// isQueue reports whether name is a wait queue rather than a lock: the Lockers queued,
// or a fair lock's owners and their places (which expire like it, after their waiters).
func isQueue(name string) bool {
	return strings.HasSuffix(name, ":queue") || strings.HasSuffix(name, ":fair:owners") || strings.HasSuffix(name, ":fair:places")
}

// lockNames lists the Redis names of the locks (with their fence records) on every primary
// of the lock deployment.
func (w *world) lockNames(ctx context.Context) ([]string, error) {
	if w.quorum != nil {
		var all []string
		for _, p := range w.qprobes {
			keys, err := p.Keys(ctx, "guard:{*").Result()
			if err != nil {
				return nil, err
			}
			all = append(all, keys...)
		}
		slices.Sort(all)
		return slices.Compact(all), nil
	}
	cc, ok := w.probe.(*redis.ClusterClient)
	if !ok {
		return w.probe.Keys(ctx, "guard:{*").Result()
	}
	var (
		mu  sync.Mutex
		all []string
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, "guard:{*").Result()
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	return all, err
}
