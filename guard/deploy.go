package guard

import (
	"fmt"
	"time"
)

// The options that concern the deployment's shape: replicas to wait for, and a quorum's
// restart delay and reply budget.

// checkReplicas checks SyncReplicas against the lease's clocks, and MinHold against
// MaxHold.
func (s *settings) checkReplicas() *ConfigError {
	switch {
	case s.syncReplicas < 0:
		return &ConfigError{Field: "SyncReplicas", Reason: fmt.Sprintf("replicas must be ≥ 0, got %d", s.syncReplicas)}
	case s.syncReplicas > 0 && (s.syncTimeout <= 0 || s.syncTimeout >= s.ttl-s.driftMargin()):
		return &ConfigError{Field: "SyncReplicas", Reason: fmt.Sprintf("timeout must be > 0 and < TTL − drift margin (%s − %s), got %s",
			s.ttl, s.driftMargin(), s.syncTimeout)}
	case s.maxHold > 0 && s.wrap.minHold > s.maxHold:
		return &ConfigError{Field: "MinHold", Reason: fmt.Sprintf("must not exceed MaxHold (%s), got %s", s.maxHold, s.wrap.minHold)}
	}
	return nil
}

// SyncReplicas makes a new grant count only once n replicas of the lock's primary have
// acknowledged it (Redis WAIT, sent in the same round trip as the acquire script, on the
// same connection), waiting at most timeout for them. A grant that fewer replicas
// acknowledged in time is undone and the acquisition fails with a *RedisError
// (ErrUnavailable) saying how many replicas acknowledged it. Renewals are acknowledged the same way (one WAIT per primary after the
// watchdog's pipeline): a lease's validity only ever extends from a renewal that n
// replicas acknowledged, so a promoted replica never holds an expiry earlier than the one
// the holder counts on. A renewal acknowledged too late is retried; when none is before
// the validity runs out, the lease is lost with that renewal's *RedisError (Op "renew")
// as its cause. It narrows, without closing, the window in which a primary that dies
// right after a grant lets its promoted replica grant the lock again: WAIT does not make
// Redis strongly consistent. A reentry the owner's hold already covers waits for nothing.
// Not for a *redis.Ring. timeout must be below TTL minus the drift margin, and below the
// client's ReadTimeout (3s by default), which bounds the reply of the WAIT.
// Applies to New and to each call. Default n = 0: grants are not waited for.
func SyncReplicas(n int, timeout time.Duration) Option {
	return Option{name: "SyncReplicas", scope: scopeLocker | scopeCall, apply: func(s *settings) {
		s.syncReplicas, s.syncTimeout = n, timeout
	}}
}

// RestartDelay is how long a server of a quorum Locker (NewQuorum) that lost its data
// stays out of the quorum after it starts: it grants nothing until it has been up for d,
// by when every lease it may have forgotten has expired, so that it cannot, with a
// minority of the other servers, grant a lock again. The check costs one EXISTS per
// attempt on each server. d must be at least the longest TTL used with the Locker (an
// attempt with a longer TTL waits for its TTL instead). A server that restarts with its
// data keeps serving at once: run the servers without persistence, or with appendonly
// and appendfsync always — a snapshot older than the last grants restores the server's
// ready mark but not those grants. RestartDelay(0) turns the check off: then keep a
// restarted server out of service for the longest TTL yourself.
// Applies to NewQuorum. Default: the Locker's TTL.
func RestartDelay(d time.Duration) Option {
	return Option{name: "RestartDelay", scope: scopeLocker, apply: func(s *settings) { s.restartDelay, s.restartDelaySet = d, true }}
}

// ReplyBudget is how long an attempt of a quorum Locker (NewQuorum) waits for the
// servers still silent once the replies in hand contest it — a server answered that
// another owner holds the lock — and leave its vote undecided: past it, a silent server
// counts as failed for that attempt. Two contenders that split the live servers' votes
// while one server is paused then undo and try again at once instead of waiting for it
// until their lease's validity runs out, and TryAcquire answers within the budget. A
// round that nothing contests waits longer for a silent server, its patience: 8 budgets
// and at least 1s, within the lease's validity (TTL minus Renewal's margin). Past it a
// majority silent fails the attempt with ErrUnavailable (which a waiter with budget left
// waits out: see WaitOutages), and a release stops waiting for the servers that carry
// the hold beyond a majority. A reply that comes later is still used: a grant is undone,
// or becomes part of the hold when the attempt won. An attempt that a majority decides
// sooner never waits for either.
// Applies to NewQuorum. Default: 8 round trips as the Locker measured them, at least
// 20ms and at most a tenth of the TTL.
func ReplyBudget(d time.Duration) Option {
	return Option{name: "ReplyBudget", scope: scopeLocker, apply: func(s *settings) { s.replyBudget, s.replyBudgetSet = d, true }}
}
