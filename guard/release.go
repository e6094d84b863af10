package guard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/guardkit/guardkit/guard/internal/store"
)

// Giving a hold back to Redis.

// releaseCtx bounds a release: ctx's values, not its cancellation, for ReleaseTimeout.
// The caller stops it (releaseContext.stop) when the release is over.
func (l *Locker) releaseCtx(ctx context.Context) *releaseContext {
	if _, ok := ctx.Deadline(); ok || ctx.Done() != nil {
		// Not ctx itself: context.Cause and the context package's own lookups would find
		// its cancellation through Value.
		ctx = context.WithoutCancel(ctx)
	}
	c := &releaseContext{values: ctx, deadline: time.Now().Add(l.cfg.releaseTimeout), done: make(chan struct{})}
	c.timer = time.AfterFunc(l.cfg.releaseTimeout, c.expire)
	return c
}

// releaseContext is what context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
// returns, made for every release in 4 allocations instead of 7 (itself, its Done
// channel, made at once since go-redis asks for it on every call, its timer and the
// timer's function). Its Err is context.DeadlineExceeded once the timeout passed,
// context.Canceled once stopped before. A context made from it with a cancellation of
// its own (context.WithTimeout and the like) is watched by a goroutine of the context
// package, as for any context type not that package's own; neither guard nor go-redis
// makes one.
type releaseContext struct {
	values   context.Context // the caller's context, for Value only
	deadline time.Time
	done     chan struct{}
	timer    *time.Timer
	mu       sync.Mutex
	err      error
}

// Deadline is ReleaseTimeout after the release began.
func (c *releaseContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Done is closed when the timeout passes or the release is over (stop).
func (c *releaseContext) Done() <-chan struct{} { return c.done }

// Value is the caller's context's value: trace spans and the like reach the Redis calls.
func (c *releaseContext) Value(key any) any { return c.values.Value(key) }

// String names the context for printing.
func (c *releaseContext) String() string { return "guard.releaseContext" }

// Err is nil until Done is closed, then why (see releaseContext).
func (c *releaseContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// expire ends c when its timeout passed.
func (c *releaseContext) expire() { c.finish(context.DeadlineExceeded) }

// stop ends c, if it has not ended, and its timer: the release is over.
func (c *releaseContext) stop() {
	c.timer.Stop()
	c.finish(context.Canceled)
}

// finish ends c with err unless it has ended.
func (c *releaseContext) finish(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

// releaseRemote drops one Redis-side hold of h. ctx comes from releaseCtx; the call
// returns by its deadline even when the client does not honour deadlines (the Redis
// call then finishes aside).
func (l *Locker) releaseRemote(ctx context.Context, h *held) (releaseReply, error) {
	type reply struct {
		code releaseReply
		err  error
	}
	var r reply
	urgent := false
	if l.st.AutoPipelined() {
		_, urgent, _ = l.waits.State(h.sh.Keys.Channel()) // this process's waiters are next
	}
	if l.st.Inline(urgent) {
		r.code, r.err = l.st.Release(ctx, &h.sh, h.finalNonce(), urgent)
	} else {
		call := func() reply {
			code, err := l.st.Release(ctx, &h.sh, h.finalNonce(), urgent)
			return reply{code, err}
		}
		replies := make(chan reply, 1)
		if !l.background(func() { replies <- call() }) {
			replies <- call()
		}
		select {
		case r = <-replies:
		case <-ctx.Done():
			r.err = ctx.Err()
		}
	}
	return l.settleRelease(h, r.code, r.err)
}

// settleRelease reads the reply of h's release in Redis, code or err: it wakes this
// process's waiters or passes the turn on as the reply says, and returns the code
// (releaseFreed for every freeing one) or the error.
func (l *Locker) settleRelease(h *held, code releaseReply, err error) (releaseReply, error) {
	if err != nil {
		l.st.Refresh(err)
		if !store.IsServerError(err) {
			// The script may have run and freed the lock, and its reply, which says whom
			// to wake, is lost: this process's waiters would then sleep until their
			// backoff. Wake them anyway (one wasted attempt if the lock is still held),
			// and with none here pass the turn on, as for a release that reports this
			// Locker first in the wait queue.
			if !l.waits.Wake(h.sh.Keys.Channel()) {
				l.waits.KeepTurn(h.sh.Keys.Channel())
			}
		}
		return 0, redisError("release", h.hk.key, err)
	}
	switch code {
	case releaseFreed:
		l.waits.Wake(h.sh.Keys.Channel())
	case releaseOwnTurn:
		// This Locker was first in the wait queue: its waiters have the turn, or, with
		// none left, the next Locker.
		if !l.waits.Wake(h.sh.Keys.Channel()) {
			l.waits.KeepTurn(h.sh.Keys.Channel())
		}
		code = releaseFreed
	case releaseHandedOn:
		// Handed to another process: for a moment, this process's newcomers leave the
		// free lock to it instead of taking it back at once.
		l.waits.Yield(h.sh.Keys.Channel(), min(h.s.ttl/2, courtesyWindow))
		code = releaseFreed
	}
	return code, nil
}

// releaseHold drops the hold of handle le; the last one releases the lock in Redis.
func (l *Locker) releaseHold(ctx context.Context, h *held, le *Lease) error {
	r, cause := l.dropHandle(h, le)
	if r.h == nil {
		le.end(errReleased)
		return cause
	}
	// The work is over: end its context before the Redis call, which may stall, so that
	// nothing started under it runs past the validity deadline.
	le.end(errReleased)
	rctx := l.releaseCtx(ctx)
	defer rctx.stop()
	l.dog.Remove(rctx, &h.renewal, true)
	code, err := l.releaseRemote(rctx, h)
	return l.released(r, code, err)
}

// ending is a hold whose last handle was dropped: its state and cause before, for the
// reply of its release in Redis (Locker.released).
type ending struct {
	h    *held
	prev heldState
	lost error
}

// dropHandle drops handle le of h. When other handles remain it returns no ending (its h
// nil) and h's cause; for the last one it ends h here (released, out of the table, its
// timer stopped) and returns what released needs once Redis has answered.
func (l *Locker) dropHandle(h *held, le *Lease) (ending, error) {
	h.mu.Lock()
	for i, x := range h.handles {
		if x == le {
			h.handles = append(h.handles[:i], h.handles[i+1:]...)
			break
		}
	}
	if len(h.handles) > 0 {
		cause := h.cause
		h.mu.Unlock()
		return ending{}, cause
	}
	r := ending{h: h, prev: h.state, lost: h.cause}
	h.state = stateReleased
	h.due.Store(0)
	if r.lost == nil {
		h.cause = errReleased
	}
	h.timer.Stop()
	h.mu.Unlock()
	l.forget(h)
	return r, nil
}

// released finishes the release of the hold of r once Redis replied code or err (the
// outcome of releaseRemote, or settleRelease's): hold times, telemetry, and the error
// Release returns.
func (l *Locker) released(r ending, code releaseReply, err error) error {
	h, prev, lost := r.h, r.prev, r.lost
	if err == nil && freed(code) && h.Left() <= 0 {
		// The reply came after the lease's validity ran out: the script, told the lease
		// was valid when it was sent, did not read the server's clock, and may have run
		// after the hold expired there (Redis paused or slow). It freed the hold, which
		// nobody had taken since; the release is reported as late all the same.
		code = releaseExpired
	}
	if prev != stateLost {
		l.hints.observe(h, time.Since(h.acquired))
		l.tel.ended(h, nil)
		if code == releaseExpired {
			l.tel.releasedLate(h)
		}
	}
	switch {
	case prev == stateLost:
		return lost
	case err != nil:
		return err
	case code == releaseExpired:
		return fmt.Errorf("guard: release %s: %w", quoteKey(h.hk.key), ErrExpired)
	case code == releaseNotHeld:
		return fmt.Errorf("guard: release %s: %w", quoteKey(h.hk.key), ErrNotHeld)
	}
	return nil
}

// finalNonce is the nonce of the release that gives h back to Redis.
func (h *held) finalNonce() string {
	if h.releaseNonce == "" {
		return h.env.nonce()
	}
	return h.releaseNonce
}

// freed reports whether code is the reply of a release that ended the hold.
func freed(code releaseReply) bool {
	return code == releaseFreed || code == releaseHandedOn || code == releaseOwnTurn
}
