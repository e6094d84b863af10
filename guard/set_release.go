package guard

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// Giving a set (AcquireAll) back to Redis: its release, and the give-back of a set whose
// acquisition failed.

// releaseSet drops set's handle from each of its holds and gives back to Redis those it
// was the last handle of: the exclusive holds of one server (or one Cluster slot) in
// one script call (store.SetAcquirer), the others each by its own release, all at once.
// It joins their errors, in the set's order.
func (l *Locker) releaseSet(ctx context.Context, set *Lease) error {
	hs := set.set
	errs := make([]error, len(hs))
	var ends []ending
	var at []int // ends[j] is the hold hs[at[j]]
	for i, h := range hs {
		r, cause := l.dropHandle(h, set)
		if r.h == nil {
			errs[i] = cause
			continue
		}
		ends, at = append(ends, r), append(at, i)
	}
	// The work is over: end its context before the Redis calls (see releaseHold).
	set.end(errReleased)
	if len(ends) == 0 {
		return joinReleaseErrors(errs)
	}
	rctx := l.releaseCtx(ctx)
	defer rctx.stop()
	for _, r := range ends {
		l.dog.Remove(rctx, &r.h.renewal, true)
	}
	var wg sync.WaitGroup
	for i := 0; i < len(ends); {
		j := l.oneCallEnd(i, len(ends), ends[i].h.s, func(k int) uint16 { return hashSlot(ends[k].h.sh.Keys.Lock) })
		group, idx := ends[i:j], at[i:j]
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes, cerrs := l.releaseGroup(rctx, group)
			for k, r := range group {
				errs[idx[k]] = l.released(r, codes[k], cerrs[k])
			}
		}()
		i = j
	}
	wg.Wait()
	return joinReleaseErrors(errs)
}

// releaseGroup gives the holds of group back to Redis, in one call when there are
// several, and returns each one's code and error as releaseRemote would (settleRelease).
// The call returns by ctx's deadline even when the client does not honour deadlines.
func (l *Locker) releaseGroup(ctx context.Context, group []ending) ([]releaseReply, []error) {
	codes, errs := make([]releaseReply, len(group)), make([]error, len(group))
	if len(group) == 1 {
		codes[0], errs[0] = l.releaseRemote(ctx, group[0].h)
		return codes, errs
	}
	sa := l.st.(store.SetAcquirer)
	shs, nonces := make([]*store.Hold, len(group)), make([]string, len(group))
	urgent := false
	for k, r := range group {
		shs[k], nonces[k] = &r.h.sh, r.h.finalNonce()
		if l.st.AutoPipelined() {
			_, q, _ := l.waits.State(r.h.sh.Keys.Channel())
			urgent = urgent || q // this process's waiters are next
		}
	}
	type reply struct {
		codes []script.Released
		err   error
	}
	call := func() reply {
		cs, err := sa.ReleaseSet(ctx, shs, nonces, urgent)
		return reply{cs, err}
	}
	var r reply
	if l.st.Inline(urgent) {
		r = call()
	} else {
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
	for k, e := range group {
		var c releaseReply
		if r.err == nil {
			c = releaseReply(r.codes[k])
		}
		codes[k], errs[k] = l.settleRelease(e.h, c, r.err)
	}
	return codes, errs
}

// giveBack releases the keys of a set whose acquisition failed, all at once, and waits
// for their releases until the call's own deadline — the wait budget's end plus the
// grace of its last attempt (attemptGrace), or ctx's deadline if sooner, or now once ctx
// has ended — and giveBackGrace at least: on a healthy Redis, which answers within
// that, the keys are free when the call returns; on a stalled one the call's deadline
// holds, and the releases go on aside, each bounded by the ReleaseTimeout (a release
// that reaches the server when it wakes still frees its key). Without any deadline it
// waits for the releases. It returns their errors when they ended in time.
func (l *Locker) giveBack(ctx context.Context, members []*Lease, deadline time.Time) error {
	if len(members) == 0 {
		return nil
	}
	done := make(chan error, 1)
	if !l.background(func() { done <- releaseAll(ctx, members) }) {
		return releaseAll(ctx, members) // closed: the holds are lost already, and release makes no call
	}
	return awaitGiveBack(ctx, done, callDeadline(ctx, deadline))
}

// releaseAll releases members at once and joins their errors.
func releaseAll(ctx context.Context, members []*Lease) error {
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Release(ctx)
		}()
	}
	wg.Wait()
	return joinReleaseErrors(errs)
}

// callDeadline is the deadline of a call whose wait budget ends at budget (zero: none)
// under ctx: the budget plus the grace of its last attempt, or ctx's deadline if sooner,
// or now once ctx has ended; zero when there is none.
func callDeadline(ctx context.Context, budget time.Time) time.Time {
	var until time.Time
	if !budget.IsZero() {
		until = budget.Add(attemptGrace)
	}
	if d, ok := ctx.Deadline(); ok && (until.IsZero() || d.Before(until)) {
		until = d
	}
	if ctx.Err() != nil {
		until = time.Now()
	}
	return until
}

// awaitGiveBack waits for done until until (zero: no limit), giveBackGrace at least, or
// giveBackGrace after ctx ends, and returns what done delivered in time.
func awaitGiveBack(ctx context.Context, done <-chan error, until time.Time) error {
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(max(time.Until(until), giveBackGrace))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case err := <-done:
		return err
	case <-timeout:
		return nil
	case <-ctx.Done():
	}
	// The caller left: wait the grace, not the rest of the deadline.
	t := time.NewTimer(giveBackGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	case <-timeout:
	}
	return nil
}

// giveBackGrace is how long a failed set waits for its keys' releases past the call's
// deadline at most: a healthy Redis answers well within it.
const giveBackGrace = 20 * time.Millisecond

// joinReleaseErrors joins the errors of a set's releases: nil when all are nil, the
// one error when one failed.
func joinReleaseErrors(errs []error) error {
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return errors.Join(out...)
}
