package guard

import (
	"errors"
	"time"

	"github.com/guardkit/guardkit/guard/internal/store"
	"github.com/guardkit/guardkit/guard/internal/watchdog"
)

// newWatchdog returns l's watchdog: one goroutine, started when the first lease is held
// and ended a little after none is, that renews every due lease in one pipelined round
// trip (see package watchdog) through sendRenewals and tells each lease the outcome
// through reportRenewals.
func newWatchdog(l *Locker) *watchdog.Dog[*held] {
	return watchdog.New(watchdog.Config[*held]{
		Interval: func(h *held) time.Duration { return h.s.renewInterval() },
		Send:     l.sendRenewals,
		Report:   l.reportRenewals,
		Busy:     l.listenForce,
	})
}

// reportRenewals tells each live lease of a batch, and telemetry, how its renewal went:
// renewed (its validity moves on), lost, or failed for now.
func (l *Locker) reportRenewals(batch []*held, live []bool, sent time.Time, res []watchdog.Result) {
	for i, h := range batch {
		if !live[i] {
			continue // released meanwhile
		}
		switch r := res[i]; {
		case r.Lost:
			l.tel.renewed(h, renewLost, nil)
			l.lose(h, "lock deleted or taken by another owner", nil)
		case r.Err != nil:
			l.tel.renewed(h, renewFailed, r.Err)
			h.renewFailed(r.Err)
		case r.TTL > 0:
			h.renewed(sent, r.TTL)
			l.tel.renewed(h, renewOK, nil)
		}
	}
}

var errNotOwner = &LeaseLostError{Reason: "not the owner"}

// sendRenewals renews batch in one pipeline, or, for leases with SyncReplicas, one
// pipeline per primary that ends with a WAIT, the pipelines running at once. For each
// lease it returns the TTL it asked for (0 when MaxHold allows no more renewal, in which
// case nothing was sent for it) and its error: nil, errNotOwner (Lost), or a *RedisError
// (failed, or renewed but too few replicas acknowledged it in time: a *replicaError).
func (l *Locker) sendRenewals(batch []*held, sent time.Time) []watchdog.Result {
	errs := make([]error, len(batch))
	ttls, timeout := renewTTLs(batch, sent)
	holds := make([]*store.Hold, len(batch))
	for i, h := range batch {
		holds[i] = &h.sh
	}
	l.st.Renew(timeout, holds, ttls, errs)
	return renewResults(batch, errs, ttls)
}

// renewError is the engine's error of h's renewal that the store reported as err.
func renewError(h *held, err error) error {
	var short *store.Shortfall
	switch {
	case err == nil:
		return nil
	case err == store.ErrGone:
		return errNotOwner
	case errors.As(err, &short):
		return replicaShortfall(h.hk.key, h.s.syncReplicas, short.Acked, short.Err, true)
	}
	return redisError("renew", h.hk.key, err)
}

// renewResults pairs each lease's error, as the engine reports it (renewError), and TTL
// as the watchdog takes them. errs is the store's, which a quorum's replies that come
// after the renewal was decided still read: it is not written.
func renewResults(batch []*held, errs []error, ttls []time.Duration) []watchdog.Result {
	res := make([]watchdog.Result, len(errs))
	for i, err := range errs {
		err = renewError(batch[i], err)
		res[i] = watchdog.Result{TTL: ttls[i], Err: err, Lost: err == errNotOwner}
	}
	return res
}

// renewTTLs returns the TTL each lease of batch asks for, cut to what MaxHold leaves it
// from sent, and the shortest TTL of the batch, which bounds the renewal calls.
func renewTTLs(batch []*held, sent time.Time) (ttls []time.Duration, timeout time.Duration) {
	ttls = make([]time.Duration, len(batch))
	for i, h := range batch {
		ttls[i] = h.s.ttl
		if lim := h.holdLimit(); !lim.IsZero() {
			ttls[i] = min(ttls[i], lim.Sub(sent))
		}
		if timeout == 0 || h.s.ttl < timeout {
			timeout = h.s.ttl
		}
	}
	return ttls, timeout
}
