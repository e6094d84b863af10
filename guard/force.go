package guard

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/store"
)

var forceScript = script.Force

// ForceRelease ends every hold of the lock named key at once, whoever holds it, for an
// operator clearing a lock whose holder is stuck: it deletes the holds, raises the key's
// fence, wakes the waiters, and logs that it did (slog's default logger, at Warn, with
// the holders it ended). The kind is chosen as for Acquire; other options are ignored.
// It returns the lock's state as it was ended — its holders and waiters — with Fence the
// raised token.
//
// Dangers. The holders may still be running when it returns: the exclusion their work
// relied on is gone, and the next waiter's work may run beside theirs until they stop.
// The release is announced on Pub/Sub, and a holder's Locker renews the lock at once on
// hearing it: the lease is lost within a round trip or so (its context is cancelled
// with ErrLeaseLost, and a decorated call returns that error). A holder whose
// connection missed the announcement learns at its next renewal (within a third of its
// TTL by default). Work that ignores its context goes on. The fence is what protects
// the data: every later hold's token exceeds the returned Fence, so storage that refuses
// tokens lower than the highest it has seen refuses the old holders' writes once the
// next holder has written (or once it has been given Fence). Writes that carry no token are not protected.
// Prefer waiting out the holder's TTL, or stopping the holder, when either is possible.
//
// The raise takes one token from the key's sequence. A fair lock is granted to the first
// owner of its queue, as a release would; for the other kinds every waiting process is
// woken and the wait queue emptied (the waiters queue again as they try). On a quorum
// Locker it runs on every server and needs a majority. A lock that nobody holds is left
// free, its fence raised all the same (the returned state has no holders).
//
// Errors: ErrInvalidKey, ErrInvalidConfig, ErrClosed, and a *RedisError (ErrUnavailable)
// when Redis could not be reached — on a quorum Locker, when fewer than a majority
// confirmed, its Err saying what each server answered.
func (l *Locker) ForceRelease(ctx context.Context, key string, opts ...Option) (*LockState, error) {
	r, s, err := l.inspectReq(key, opts, "ForceRelease")
	if err != nil {
		return nil, err
	}
	force := func(ctx context.Context, c *store.Conn, reqs []inspectReq) []*LockState {
		return []*LockState{l.forceOn(ctx, c, reqs[0], s)}
	}
	states, views, err := l.read(ctx, "force release", []inspectReq{r}, force)
	if err != nil {
		return nil, err
	}
	st := states[0]
	if views != nil {
		for _, v := range views[0] {
			st.Fence = max(st.Fence, v.Fence) // the raised tokens: the highest is the one to give storage
		}
	}
	l.logForced(st)
	return st, nil
}

// forceOn runs force.lua for r on the server of c: the state it ended, with Err set when
// the call failed.
func (l *Locker) forceOn(ctx context.Context, c *store.Conn, r inspectReq, s *settings) *LockState {
	data := "x"
	if r.spec.aux2 != "" {
		data = "f"
	}
	keys := r.keys()
	args := make([]any, 0, 3+len(keys)+8)
	args = append(args, nil, nil, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, maxWaitersRead, "", "", s.fenceRetention.Milliseconds(), "", "", data, c.ShardedFlag())
	st := &LockState{Key: r.key, Kind: r.spec.kind}
	reply, err := c.Run(ctx, forceScript, args)
	v, _ := reply.([]any)
	switch {
	case err != nil:
		st.Err = err
	case len(v) != 2:
		st.Err = fmt.Errorf("guard: force release: unexpected reply %v", v)
	default:
		if err := l.parseState(st, r, v[0]); err != nil {
			st.Err = err
			break
		}
		raised, _ := v[1].(string)
		st.Fence, _ = strconv.ParseInt(raised, 10, 64)
		announceForce(ctx, c, r.rk.Lock) // the holders hear it now (forced.go)
	}
	return st
}

// logForced records a force release on slog's default logger.
func (l *Locker) logForced(st *LockState) {
	holders := make([]string, len(st.Holders))
	for i, h := range st.Holders {
		holders[i] = fmt.Sprintf("%s (%s, token %d, holds %d%s)", h.Owner, h.Kind, h.Token, h.Holds, labelNote(h))
	}
	key := st.Key
	if l.cfg.redactKeys {
		key = "(redacted)"
	}
	slog.Warn("guard: lock force-released",
		"key", key, "kind", st.Kind.String(), "holders", strings.Join(holders, ", "),
		"waiters", len(st.Waiters), "fence", st.Fence, "locker", l.id)
}

func labelNote(h Holder) string {
	if h.Label == "" {
		return ""
	}
	return ", " + h.Label
}
