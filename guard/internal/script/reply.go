package script

import (
	"fmt"
	"strconv"
	"time"
)

// The replies of the kinds' acquire and release scripts, named and decoded here only
// (the layouts are in each script's header and in lua/chain.lua).

// Tags of the list replies of an acquire script; a fresh hold is a bare integer token.
const (
	acquireBusy    = 0 // {0, pttl[, token]}: another owner holds it (pttl -1: free, left to others); token: the holder's
	acquireHeld    = 1 // {1, "token", holds[, holder]}: the owner, or the section holder it is in, held it already (reentry)
	acquireRefused = 2 // {2}: refused for good: a reader asking to write
)

// Granted is the decoded reply of an acquire script.
type Granted struct {
	Acquired bool
	Token    int64
	Holds    int64         // the owner's hold count in Redis after the attempt
	PTTL     time.Duration // the holder's remaining TTL when busy, <0 if unknown
	Upgrade  bool          // refused: the owner holds the read lock and asked to write
	Holder   string        // a reentry's holder when it is a section the owner is in, not the owner
	// Since is, when busy, the holder's token, when the script read it: the server's
	// clock in microseconds when the hold began (0: unknown).
	Since int64
}

// ParseAcquire decodes the reply of an acquire script.
func ParseAcquire(reply any) (Granted, error) {
	if token, ok := reply.(int64); ok && token > 0 {
		return Granted{Acquired: true, Token: token, Holds: 1}, nil
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
		g := Granted{PTTL: time.Duration(pttl) * time.Millisecond}
		if len(v) == 3 {
			s, _ := v[2].(string)
			g.Since, _ = strconv.ParseInt(s, 10, 64)
		}
		return g, nil
	case tag == acquireRefused && len(v) == 1:
		return Granted{Upgrade: true}, nil
	}
	return Granted{}, fmt.Errorf("unexpected acquire reply %v", reply)
}

// parseHeld decodes a reentry's reply {acquireHeld, token, holds[, holder]}.
func parseHeld(v []any) (Granted, bool) {
	s, _ := v[1].(string)
	token, err := strconv.ParseInt(s, 10, 64)
	holds, _ := v[2].(int64)
	var holder string
	if len(v) == 4 {
		holder, _ = v[3].(string)
	}
	if err != nil || holds <= 0 || len(v) == 4 && holder == "" {
		return Granted{}, false
	}
	return Granted{Acquired: true, Token: token, Holds: holds, Holder: holder}, true
}

// Released is the reply of a release script.
type Released int64

// The replies of a release script.
const (
	NotHeld   Released = -2 // another owner holds the lock
	Expired   Released = -1 // nobody holds it: the hold expired
	NoUndo    Released = 0  // an undo whose attempt had not taken effect
	Freed     Released = 1  // the owner's last hold ended; nobody queued was handed it
	StillHeld Released = 2  // one hold dropped; the owner still holds the lock
	HandedOn  Released = 3  // freed, and another Locker queued for it was told
	OwnTurn   Released = 4  // freed, and this Locker is first in the wait queue
)

// ParseRelease reads the reply n (or the call's error err) of a release script.
func ParseRelease(n int64, err error) (Released, error) {
	if err == nil && (n < int64(NotHeld) || n > int64(OwnTurn)) {
		err = fmt.Errorf("unexpected release reply %d", n)
	}
	return Released(n), err
}
