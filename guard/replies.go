package guard

import (
	"fmt"
	"strconv"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/redis/go-redis/v9"
)

// The replies of the kinds' scripts (see kindSpec for the contract every kind keeps),
// named and decoded here only.

// Tags of the list replies of an acquire script; a fresh hold is a bare integer token.
const (
	acquireBusy    = 0 // {0, pttl[, token]}: another owner holds it (pttl -1: free, left to others); token: the holder's
	acquireHeld    = 1 // {1, "token", holds[, holder]}: the owner, or the section holder it is in, held it already (reentry)
	acquireRefused = 2 // {2}: refused for good: a reader asking to write (ErrUpgrade)
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
}

// decodeAcquire is the typed outcome of an acquire script call that returned v and err.
func decodeAcquire(v any, err error) acquireReply {
	if err != nil {
		return acquireReply{err: err}
	}
	g, bad := parseGranted(v)
	return acquireReply{g: g, bad: bad}
}

// parseGranted decodes the reply of an acquire script.
func parseGranted(reply any) (granted, error) {
	if token, ok := reply.(int64); ok && token > 0 {
		return granted{acquired: true, token: token, holds: 1}, nil
	}
	v, _ := reply.([]any)
	var tag int64 = -1
	if len(v) > 0 {
		tag, _ = v[0].(int64)
	}
	switch {
	case tag == acquireHeld && (len(v) == 3 || len(v) == 4):
		if g, ok := parseHeld(v); ok {
			return g, nil
		}
	case tag == acquireBusy && (len(v) == 2 || len(v) == 3):
		pttl, _ := v[1].(int64)
		g := granted{pttl: time.Duration(pttl) * time.Millisecond}
		if len(v) == 3 {
			s, _ := v[2].(string)
			g.since, _ = strconv.ParseInt(s, 10, 64)
		}
		return g, nil
	case tag == acquireRefused && len(v) == 1:
		return granted{upgrade: true}, nil
	}
	return granted{}, fmt.Errorf("unexpected acquire reply %v", reply)
}

// parseHeld decodes a reentry's reply {acquireHeld, token, holds[, holder]}.
func parseHeld(v []any) (granted, bool) {
	s, _ := v[1].(string)
	token, err := strconv.ParseInt(s, 10, 64)
	holds, _ := v[2].(int64)
	var holder string
	if len(v) == 4 {
		holder, _ = v[3].(string)
	}
	if err != nil || holds <= 0 || len(v) == 4 && holder == "" {
		return granted{}, false
	}
	return granted{acquired: true, token: token, holds: holds, holder: ctxid.ID(holder)}, true
}

// releaseReply is the reply of a release script.
type releaseReply int64

const (
	releaseNotHeld   releaseReply = -2 // another owner holds the lock
	releaseExpired   releaseReply = -1 // nobody holds it: the hold expired
	releaseNoUndo    releaseReply = 0  // an undo whose attempt had not taken effect
	releaseFreed     releaseReply = 1  // the owner's last hold ended; nobody queued was handed it
	releaseStillHeld releaseReply = 2  // one hold dropped; the owner still holds the lock
	releaseHandedOn  releaseReply = 3  // freed, and another Locker queued for it was told
	releaseOwnTurn   releaseReply = 4  // freed, and this Locker is first in the wait queue
)

// decodeRelease reads the reply of a release script call.
func decodeRelease(cmd *redis.Cmd) (releaseReply, error) {
	n, err := cmd.Int64()
	if err == nil && (n < int64(releaseNotHeld) || n > int64(releaseOwnTurn)) {
		err = fmt.Errorf("unexpected release reply %d", n)
	}
	return releaseReply(n), err
}
