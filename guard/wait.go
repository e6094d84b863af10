package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/feed"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// wait acquires h in Redis under retry policy p. Between attempts it sleeps until the
// lock's release is announced (Pub/Sub), its backoff delay, the holder's TTL, its
// deadline or the end of ctx, whichever comes first. Only one goroutine per key and
// process makes attempts at a time (the key's gate); the others queue behind it in
// arrival order, so Redis sees one waiter per process however many goroutines wait
// (kinds whose waiters must each ask for themselves skip the gate: see waitStyle).
func (l *Locker) wait(ctx context.Context, a *acquisition, h *held, p RetryPolicy, deadline time.Time) (granted, error) {
	var w waitRun // on the stack: every acquisition passes here
	w.init(l, ctx, h, p, deadline)
	defer l.endWait(&w)
	if !deadline.IsZero() {
		// The budget bounds every Redis call of the wait, whatever the client's own
		// timeouts and retries (a frozen server answers nothing: see attemptGrace).
		var cancel context.CancelFunc
		w.actx, cancel = context.WithDeadlineCause(ctx, deadline.Add(attemptGrace), errBudgetSpent)
		defer cancel()
	}
	for {
		w.listen()
		g, late, err := l.waitAttempt(&w, a)
		next, g, err := w.decide(g, late, err)
		switch next {
		case stepDone:
			return g, err
		case stepAgain:
			continue
		case stepWait:
			if w.kw == nil {
				again, err := l.joinWait(&w, a)
				if err != nil {
					return granted{}, err
				}
				if again {
					continue
				}
			}
		}
		l.checkSelfWait(&w, a)
		if err := w.sleep(); err != nil {
			return granted{}, err
		}
	}
}

// step is what a wait does after an attempt (see waitRun.decide).
type step uint8

const (
	stepDone   step = iota // return the grant or the error
	stepAgain              // attempt again at once
	stepOutage             // sleep, then attempt again: Redis is away
	stepWait               // join the key's waiters if not yet, sleep, attempt again
)

// decide says what the wait does after an attempt that returned g, late and err, and
// with what outcome when it ends.
func (w *waitRun) decide(g granted, late bool, err error) (step, granted, error) {
	switch {
	case err != nil && w.attempts > 1 && w.ctx.Err() != nil && w.down == nil:
		// The context ended the wait during an attempt: the lock was busy before.
		return stepDone, granted{}, w.busy(w.ctx.Err())
	case err != nil && w.outage(err):
		// Redis unreachable or its primary moving: wait it out like a busy lock.
		return stepOutage, granted{}, nil
	case err != nil || g.acquired:
		w.acquired = g.acquired
		return stepDone, g, err
	case w.exhausted():
		if late {
			return stepDone, granted{}, &RedisError{Op: "acquire", Key: w.h.hk.key, Err: errLateGrant}
		}
		return stepDone, granted{}, w.busy(nil)
	case late:
		return stepAgain, granted{}, nil // the lock was free: try again at once
	}
	return stepWait, granted{}, nil
}

// waitRun is the state of one wait: its attempts, its place among the key's waiters in
// this process, and what the last attempt said. The Locker's wait loop (Locker.wait)
// keeps it on its stack.
type waitRun struct {
	hints *holdTimes      // the Locker's, for the Retry-After of a busy lock
	done  <-chan struct{} // the Locker's, closed by Close
	ctx   context.Context // the caller's: its end is the caller's
	// actx is what the attempts run under: ctx, cut at the budget's deadline plus
	// attemptGrace when the policy has one. Its end alone is not the caller's.
	actx     context.Context
	h        *held
	p        RetryPolicy
	deadline time.Time
	style    waitStyle

	// The key's state in this process when the wait began (see feed.Hub.State).
	subscribed, queued, yielding bool
	first                        string // the first attempt's manner

	kw       *feed.Key
	entered  bool // kw's gate is ours
	acquired bool
	// queuedRemote: an attempt found the lock busy and joined its Redis-side wait.
	queuedRemote bool
	attempts     int
	down         error           // the last attempt's error when Redis was unavailable, nil after a reply
	ttl          time.Duration   // the holder's TTL at the last busy attempt, <0 if unknown
	since        int64           // the holder's token at the last busy attempt, 0 if unknown (granted.since)
	woken        <-chan struct{} // a release notification since the last attempt
	timer        *time.Timer
	det          *detector // deadlock detection, armed when the wait begins; nil when off
	// A self-wait (selfwait.go): when to look for one, whether the wait has, and the
	// section of its own request found holding the lock.
	selfAt      time.Time
	selfChecked bool
	selfHolder  ctxid.ID
}

// init sets w up for a wait of h under p.
func (w *waitRun) init(l *Locker, ctx context.Context, h *held, p RetryPolicy, deadline time.Time) {
	*w = waitRun{hints: &l.hints, done: l.done, ctx: ctx, actx: ctx, h: h, p: p, deadline: deadline, style: h.s.spec.wait, ttl: -1}
	w.subscribed, w.queued, w.yielding = l.waits.State(h.sh.Keys.Channel())
	delay := l.cfg.deadlockDelay
	if delay <= 0 {
		delay = selfWaitDelay
	}
	w.selfAt = time.Now().Add(delay)
	// A newcomer makes its first attempt at once, even when others of this process queue
	// for the key: its owner may hold the lock through another process (a downstream
	// service reached with the owner's token), which only Redis can tell, and a newcomer
	// waiting behind the queue would then deadlock with it. With a queue, the attempt is
	// polite: it reenters the owner's hold but leaves a free lock to the queue.
	w.first = mannerWait
	switch {
	case p.limit == limitAttempts && p.attempts == 1:
		w.first = mannerTry
	case w.queued || w.yielding:
		w.first = mannerPolite
	}
}

// endWait gives back what wait w took: the timer, the gate, the place among the key's
// waiters, and the Redis-side place of a kind whose waiters leave.
func (l *Locker) endWait(w *waitRun) {
	if w.timer != nil {
		w.timer.Stop()
	}
	w.det.stop()
	l.settleUnsure(w.ctx, w.h)
	if w.entered {
		w.kw.Exit(w.acquired)
	}
	if w.kw != nil {
		l.waits.Leave(w.kw, w.acquired)
	}
	if !w.acquired && w.queuedRemote && w.h.s.spec.leaves {
		l.st.Leave(&w.h.sh)
	}
}

// busy is the error of a wait that ended with the lock still busy — or, when the last
// attempt found Redis unavailable, with Redis still so: that attempt's error.
func (w *waitRun) busy(cause error) error {
	if w.down != nil {
		if cause == nil {
			return w.down
		}
		return fmt.Errorf("%w; gave up waiting for it after %d attempts: %w", w.down, w.attempts, cause)
	}
	return &LockedError{Key: w.h.hk.key, RetryAfter: w.hints.retryAfter(w.h, w.ttl, holdAge(w.since, time.Now())), Attempts: w.attempts, Err: cause, section: w.selfHolder}
}

// outage records the error of an attempt and reports whether the wait should go on:
// Redis was unreachable or its primary moving (transient), ctx has not ended and the
// retry policy allows another attempt. A single attempt (TryAcquire, NoRetry) fails at
// once.
func (w *waitRun) outage(err error) bool {
	w.down = nil
	if !transient(err) {
		return false
	}
	w.down = err
	return !w.h.s.outageFails && w.ctx.Err() == nil && !w.exhausted()
}

// transient reports whether an attempt's error may clear by waiting: Redis could not be
// reached or did not answer in time, its primary is moving (READONLY, LOADING,
// CLUSTERDOWN, MASTERDOWN, TRYAGAIN: a failover), or too few servers of a quorum
// answered. Too few replica acknowledgements (SyncReplicas, a *replicaError) are not
// waited out: each try would grant, WAIT and undo, and the undo of one begun near the
// deadline would outlast it. A refusal that waiting does
// not change (an error reply such as OOM, a closed client) is not. Whether the caller's
// context has ended is the caller's check.
func transient(err error) bool {
	if !errors.Is(err, ErrUnavailable) || store.Closed(err) {
		return false
	}
	var qe *store.QuorumError
	var re *replicaError
	if errors.As(err, &re) {
		return false
	}
	if errors.As(err, &qe) {
		return true
	}
	var ce *RedisError
	return errors.As(err, &ce) && !errors.Is(ce.Err, errLateGrant) && store.TopologyError(ce.Err)
}

// listen picks the channel that tells of the next release notification: the gate
// holder's, or, for a kind whose waiters all ask, one that every notification closes.
func (w *waitRun) listen() {
	switch {
	case w.kw == nil:
	case w.style == waitOwn:
		w.woken = w.kw.Broadcast()
	default:
		w.kw.Drain()
		w.woken = w.kw.Notify()
	}
}

// waitAttempt makes wait w's next attempt, counting it in a (the acquisition's
// telemetry). late reports a grant whose reply came after the lease's validity had run
// out: it was undone, and counts as a busy attempt.
func (l *Locker) waitAttempt(w *waitRun, a *acquisition) (g granted, late bool, err error) {
	w.attempts++
	a.attempts = w.attempts
	manner := mannerWait
	switch {
	case w.attempts == 1:
		manner = w.first
	case w.p.limit == limitAttempts && w.attempts >= w.p.attempts:
		manner = mannerTry // the last one
	}
	// The attempt of a caller that waited, or whose Locker queues for the key, is a step
	// of a handoff: on an auto-pipelining client it is sent at once.
	h := w.h
	g, err = l.attempt(w.actx, h, manner, w.attempts > 1 || w.queued || w.yielding)
	if err == nil && g.acquired && !time.Now().Before(g.sent.Add(h.s.ttl-h.s.driftMargin())) {
		// Granted, but the reply came so late (Redis was down and the client retried)
		// that the lease's validity, measured from the send, has already run out: give
		// the hold back rather than hand out a lost lease. It was an attempt like any
		// other: the policy decides whether another one follows.
		// It is undone before any next attempt, unless the caller's deadline comes
		// first: its TTL, counted from the same send, ends soon after anyway.
		l.undoNow(w.actx, h, g.nonce)
		late, g = true, granted{pttl: -1}
	}
	if err == nil && !g.acquired {
		w.down = nil
		w.ttl, w.since = g.pttl, g.since
		w.queuedRemote = w.queuedRemote || manner != mannerTry
	}
	return g, late, err
}

// exhausted reports whether the retry policy allows no further attempt.
func (w *waitRun) exhausted() bool {
	return w.p.limit == limitAttempts && w.attempts >= w.p.attempts ||
		!w.deadline.IsZero() && !time.Now().Before(w.deadline)
}

// joinWait makes wait w join the key's waiters after the first busy attempt, telling a
// (the acquisition's telemetry) that it waits, and waits for the gate (for a kind that
// has one). again reports that the lock may have become free meanwhile, so that the next
// attempt should go at once.
func (l *Locker) joinWait(w *waitRun, a *acquisition) (again bool, err error) {
	w.kw = l.waits.Join(w.h.sh.Keys.Channel())
	a.startWaiting(w.ctx)
	w.det = l.watchDeadlock(w.h)
	if w.style != waitOwn {
		if err := w.kw.Enter(w.ctx, w.deadline, w.done, w.det.dead()); err != nil {
			return false, w.waitError(err)
		}
		w.entered = true
	}
	w.kw.AwaitSubscribed(w.ctx, w.deadline, confirmWait)
	w.woken = w.kw.Notify() // a waitOwn waiter always attempts again first (below)
	switch {
	case !w.subscribed || w.style != waitGated:
		// The lock may have been freed before the subscription existed; and for a shared
		// kind, the goroutine ahead getting in says the lock admits more, while a fair
		// lock's grant to this owner comes with no other signal.
		return true, nil
	case w.ttl < 0 && w.queued:
		// A polite attempt left the lock free to this process's queue, which this
		// goroutine now heads: the lock may still be free.
		return true, nil
	case w.queued && !w.kw.PredecessorAcquired():
		return true, nil // the goroutine ahead gave up: the lock may be free
	}
	return false, nil // a release since the last attempt left a notification
}

// sleep waits for a release notification, the backoff delay (cut to the holder's TTL),
// the policy's deadline, the end of ctx or the Locker's closing.
func (w *waitRun) sleep() error {
	delay := w.p.delay().Delay(max(w.attempts, 1))
	if w.ttl >= 0 && w.ttl+time.Millisecond < delay {
		delay = w.ttl + time.Millisecond
	}
	if !w.deadline.IsZero() {
		delay = min(delay, time.Until(w.deadline))
	}
	if !w.selfChecked {
		delay = min(delay, max(time.Until(w.selfAt), 0)) // look for a self-wait on time
	}
	dead := w.det.dead()
	select {
	case <-dead:
		return w.det.error()
	default:
	}
	if w.timer == nil {
		w.timer = time.NewTimer(delay)
	} else {
		w.timer.Reset(delay)
	}
	select {
	case <-w.woken:
	case <-w.timer.C:
	case <-w.ctx.Done():
		return w.busy(w.ctx.Err())
	case <-w.done:
		return ErrClosed
	case <-dead:
		return w.det.error()
	}
	return nil
}

// waitError turns the error of a wait that ended before an attempt into the call's error.
func (w *waitRun) waitError(err error) error {
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case err == feed.ErrClosed:
		return ErrClosed
	case err == feed.ErrChosen:
		return w.det.error()
	case err == feed.ErrDeadline:
		return w.busy(nil)
	}
	return w.busy(err)
}

// attemptGrace is how long past the wait's deadline its last attempt may take. The wait
// makes a last attempt when its budget runs out (sleep ends there): on a healthy server
// it takes a round trip, and the grace lets it; on a frozen or unreachable one the
// attempt, and so the call, ends at the deadline plus this grace.
const attemptGrace = 250 * time.Millisecond

// errBudgetSpent is the error of a Redis call cut short by the wait's budget (its caller's
// context had not ended): it says so in place of the context.DeadlineExceeded of the
// attempt's own context, which was not the caller's.
var errBudgetSpent = errors.New("no answer within the wait budget: the server is stalled, overloaded or unreachable (a longer MaxWait waits longer)")

// cutByBudget returns err, or errBudgetSpent when err is the end of ctx, an attempt's
// context, by the wait's budget rather than by the caller's context.
func cutByBudget(ctx context.Context, err error) error {
	if ctx.Err() != nil && context.Cause(ctx) == errBudgetSpent && errors.Is(err, context.DeadlineExceeded) {
		return errBudgetSpent
	}
	return err
}

// errLateGrant ends an acquisition whose last attempt took the lock but whose reply came
// back after the lease's validity, counted from the send, had run out.
var errLateGrant = errors.New("the lock was granted, but the reply arrived after the lease's validity had run out; the grant was undone")
