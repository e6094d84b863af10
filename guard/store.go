package guard

import (
	"errors"
	"sync"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// The engine's side of the seam to the Redis side (package store): the store's
// outcomes as the engine names them, and what the engine hands the store.

// Manners of an acquire attempt (acquire.lua's ARGV[5]).
const (
	mannerWait   = store.MannerWait   // the caller waits when the lock is busy: join the Redis wait queue
	mannerPolite = store.MannerPolite // reenter only; leave a free lock to the queue
	mannerTry    = store.MannerTry    // the caller will not wait
	mannerLeave  = store.MannerLeave  // the caller gave up waiting (kinds whose spec leaves)
)

// releaseReply is the outcome of a release (see script.Released).
type releaseReply = script.Released

const (
	releaseNotHeld   = script.NotHeld   // another owner holds the lock
	releaseExpired   = script.Expired   // nobody holds it: the hold expired
	releaseFreed     = script.Freed     // the owner's last hold ended; nobody queued was handed it
	releaseStillHeld = script.StillHeld // one hold dropped; the owner still holds the lock
	releaseHandedOn  = script.HandedOn  // freed, and another Locker queued for it was told
	releaseOwnTurn   = script.OwnTurn   // freed, and this Locker is first in the wait queue
)

// granted is the outcome of one acquire attempt.
type granted struct {
	acquired bool
	token    int64
	holds    int64         // the owner's hold count in Redis after the attempt
	pttl     time.Duration // the holder's remaining TTL when busy, <0 if unknown
	sent     time.Time     // when the attempt was sent: validity is measured from here
	nonce    string        // the attempt's nonce, to undo it
	upgrade  bool          // refused: the owner holds the read lock and asked to write
	holder   ctxid.ID      // a reentry's holder when it is a section the owner is in, not the owner
	// since is, when busy, the holder's token, when the script read it: the server's
	// clock in microseconds when the hold began (0: unknown). See holdTimes.retryAfter.
	since int64
	q     *store.QuorumHold // a quorum's record of the hold the attempt won
}

// grantOf is the engine's record of a store's grant.
func grantOf(r store.Grant) granted {
	return granted{acquired: r.Acquired, token: r.Token, holds: r.Holds, pttl: r.PTTL,
		upgrade: r.Upgrade, holder: ctxid.ID(r.Holder), since: r.Since, q: r.Q}
}

// configure checks the Locker's settings for its store, and hands the store what it
// takes of them.
func (l *Locker) configure() error {
	if err := l.cfg.validateDeadlock(!l.st.Detects()); err != nil {
		return err
	}
	if err := l.st.Admits(&l.cfg.t); err != nil {
		return configError(err)
	}
	c := &l.cfg
	return configError(l.st.Configure(store.Config{ID: l.idArg, Prefix: c.prefix, TTL: c.ttl,
		RestartDelay: c.restartDelay, RestartDelaySet: c.restartDelaySet, ReplyBudget: c.replyBudget, ReplyBudgetSet: c.replyBudgetSet,
		Aside: l.background, Done: l.done, Timeout: c.releaseTimeout, Nonce: l.newNonce}))
}

// configError is the *ConfigError of a store's *store.Refusal, or err.
func configError(err error) error {
	var r *store.Refusal
	if errors.As(err, &r) {
		return &ConfigError{Field: r.Field, Reason: r.Reason}
	}
	return err
}

// aside is the Locker's work that runs on goroutines of its own — compensating
// releases, abandoned attempts, a quorum's calls — which Close refuses new work to and
// waits for.
type aside struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// run runs fn on a goroutine that close waits for, and reports false, running nothing,
// once close was called.
func (a *aside) run(fn func()) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		fn()
	}()
	return true
}

// close refuses new work; wait waits for the work started.
func (a *aside) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
}

func (a *aside) wait() { a.wg.Wait() }
