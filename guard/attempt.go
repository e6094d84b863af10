package guard

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/guard/internal/store"
)

// One acquire attempt and what follows when its outcome is unknown: the undo.

// attempt makes one acquire round trip. On a client that does not honour context
// deadlines it returns when ctx ends even if the Redis call does not: the call then goes
// on aside and undoes itself if it turns out to have taken the lock.
func (l *Locker) attempt(ctx context.Context, h *held, manner string, waited bool) (granted, error) {
	if r := h.pre; r != nil {
		h.pre = nil // made by a set's call (AcquireAll): its outcome is this attempt's
		return l.settle(ctx, h, h.preNonce, h.preSent, *r)
	}
	nonce := l.attemptNonce(h)
	sent := time.Now()
	// An attempt after a wait is sent alone (urgent), and so is one that WAITs for
	// replicas (a pipeline).
	if ctx.Done() == nil || l.st.Inline(waited || h.s.syncReplicas > 0) {
		// Nothing to return early for, or the client itself gives up at ctx's deadline
		// (a cancellation without deadline is then noticed when the call returns).
		return l.settle(ctx, h, nonce, sent, l.st.Acquire(ctx, &h.sh, nonce, manner, waited))
	}
	return l.attemptAside(ctx, h, nonce, sent, manner, waited)
}

// attemptNonce returns the nonce of h's next attempt.
func (l *Locker) attemptNonce(h *held) (nonce string) {
	switch {
	case h.unsure != "":
		// The last attempt's outcome is unknown: send it again, with its nonce, so that
		// if it took effect this one adopts its hold instead of counting a second.
		nonce, h.unsure, h.unsureErr = h.unsure, "", nil
	case h.releaseNonce == "":
		nonce, h.releaseNonce = l.newNonces()
	default:
		nonce = l.newNonce()
	}
	return nonce
}

// attemptAside makes the attempt on a background goroutine and returns at the end of
// ctx if Redis has not answered by then (on a client that ignores ctx's deadline): the
// call goes on, and undoes what it took for the caller who left.
func (l *Locker) attemptAside(ctx context.Context, h *held, nonce string, sent time.Time, manner string, waited bool) (granted, error) {
	var state atomic.Int32 // 0 pending, 1 delivered, 2 abandoned
	replies := make(chan store.Grant, 1)
	started := l.background(func() {
		r := l.st.Acquire(context.WithoutCancel(ctx), &h.sh, nonce, manner, waited)
		if state.CompareAndSwap(0, 1) {
			replies <- r
			return
		}
		if r.Err != nil && !store.IsServerError(r.Err) {
			l.undo(h, nonce) // may have taken the lock for a caller who left
		} else if r.Err == nil && r.Bad == nil && r.Acquired {
			l.undo(h, nonce) // took the lock for a caller who left
		}
	})
	if !started {
		// Closed meanwhile: nothing was sent, and nothing may wait on Redis past the
		// caller's deadline on a client that ignores it.
		return granted{}, fmt.Errorf("guard: acquire %s: %w", quoteKey(h.hk.key), ErrClosed)
	}
	select {
	case r := <-replies:
		return l.settle(ctx, h, nonce, sent, r)
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			// Redis did not answer before ctx ended: unavailable, for this caller.
			return granted{}, &RedisError{Op: "acquire", Key: h.hk.key, Err: cutByBudget(ctx, ctx.Err())}
		}
		return l.settle(ctx, h, nonce, sent, <-replies)
	}
}

// settle turns an acquire reply into the attempt's outcome.
func (l *Locker) settle(ctx context.Context, h *held, nonce string, sent time.Time, r store.Grant) (granted, error) {
	if r.Err != nil {
		l.st.Refresh(r.Err)
		if !store.IsServerError(r.Err) {
			// The script may have run: the next attempt sends it again, or it is undone.
			if l.st.Resends() {
				h.unsure, h.unsureErr = nonce, r.Err
			} else {
				l.st.Undo(ctx, &h.sh, nonce)
			}
		}
		if err := cutByBudget(ctx, r.Err); err != r.Err {
			return granted{}, redisError("acquire", h.hk.key, err)
		}
		if cerr := ctx.Err(); cerr != nil && !errors.Is(r.Err, cerr) {
			return granted{}, &RedisError{Op: "acquire", Key: h.hk.key, Err: errors.Join(cerr, r.Err)}
		}
		return granted{}, redisError("acquire", h.hk.key, r.Err)
	}
	if r.Bad != nil {
		return granted{}, &RedisError{Op: "acquire", Key: h.hk.key, Err: r.Bad}
	}
	g := grantOf(r)
	if g.upgrade {
		return granted{}, fmt.Errorf("guard: acquire %s for writing: %w", quoteKey(h.hk.key), ErrUpgrade)
	}
	if r.Synced && g.acquired && g.holds == 1 && (r.AckErr != nil || r.Acked < int64(h.s.syncReplicas)) {
		l.undoNow(ctx, h, nonce)
		return granted{}, replicaShortfall(h.hk.key, h.s.syncReplicas, int(r.Acked), r.AckErr, false)
	}
	g.sent, g.nonce = sent, nonce
	return g, nil
}

// settleUnsure undoes, in the background, the last attempt of h's acquisition if its
// outcome is unknown and no later attempt sent it again: called when the wait ends.
func (l *Locker) settleUnsure(ctx context.Context, h *held) {
	if h.unsure != "" {
		l.compensate(ctx, h, h.unsure, h.unsureErr)
		h.unsure, h.unsureErr = "", nil
	}
}

// compensate undoes, in the background, the acquire attempt with nonce if it took effect;
// err is the attempt's, and an attempt still in a batch is waited for first (for up to
// the release timeout), so that the undo does not overtake it. The returned channel is
// closed once the undo is done; the caller, whose context is ctx, need not wait for it.
// Once the Locker is closed nothing more runs aside: the undo then runs here, within what
// is left of ctx's deadline (a caller is never made late by it), and a hold it cannot
// drop in that time ends with its TTL, which no renewal extends.
func (l *Locker) compensate(ctx context.Context, h *held, nonce string, err error) <-chan struct{} {
	done := make(chan struct{})
	run := func(ctx context.Context) {
		defer close(done)
		store.Settled(ctx, err)
		l.st.Undo(ctx, &h.sh, nonce)
	}
	if l.background(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.releaseTimeout)
		defer cancel()
		run(ctx)
	}) {
		return done
	}
	if ctx.Err() != nil {
		close(done)
		return done
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.releaseTimeout)
	defer cancel()
	run(ctx)
	return done
}

// undoNow undoes the attempt with nonce, as compensate, and waits for the undo until ctx
// ends: a caller told that its attempt failed finds the lock free after it, unless its
// own deadline came first (the undo then finishes aside).
func (l *Locker) undoNow(ctx context.Context, h *held, nonce string) {
	select {
	case <-l.compensate(ctx, h, nonce, nil):
	case <-ctx.Done():
	}
}

// undo drops the hold taken by the acquire attempt with nonce, if that attempt took
// effect, within the release timeout.
func (l *Locker) undo(h *held, nonce string) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.releaseTimeout)
	defer cancel()
	l.st.Undo(ctx, &h.sh, nonce)
}
