package store

import (
	"errors"
	"fmt"
	"strings"
)

// QuorumError reports a call of a quorum Locker (NewQuorum) that too few servers
// confirmed: what each server answered. The engine reports it as the Err of a
// *guard.RedisError (ErrUnavailable).
type QuorumError struct {
	op    string   // the operation: "acquire", "release", "renew", "inspect", "ping"...
	need  int      // the number of servers that must agree: a majority
	addrs []string // the servers' addresses, in the order the Locker was given them
	errs  []error  // each server's error, by the same index: nil for a server that answered as needed
}

// failure returns the error of a call op that too few of q's servers confirmed, errs
// being each server's error.
func (q *Quorum) failure(op string, errs []error) *QuorumError {
	return &QuorumError{op: op, need: q.need, addrs: q.addrs, errs: errs}
}

// Error says how many servers confirmed the call and why the others did not.
func (e *QuorumError) Error() string {
	var b strings.Builder
	ok := 0
	for _, err := range e.errs {
		if err == nil {
			ok++
		}
	}
	fmt.Fprintf(&b, "quorum: %d of %d servers confirmed the %s, %d needed", ok, len(e.errs), e.op, e.need)
	for i, err := range e.errs {
		if err != nil {
			fmt.Fprintf(&b, "; %s: %v", e.addrs[i], err)
		}
	}
	return b.String()
}

// Unwrap returns the servers' errors, each prefixed with its server's address, so that
// errors.Is finds, for example, a context.DeadlineExceeded among them.
func (e *QuorumError) Unwrap() []error {
	var errs []error
	for i, err := range e.errs {
		if err != nil {
			errs = append(errs, &serverError{addr: e.addrs[i], err: err})
		}
	}
	return errs
}

// serverError is one server's error in a QuorumError.
type serverError struct {
	addr string
	err  error
}

// Error names the server and its error.
func (e *serverError) Error() string { return e.addr + ": " + e.err.Error() }

// Unwrap returns the server's error.
func (e *serverError) Unwrap() error { return e.err }

// Outcomes that a server gave for a quorum call, beside an error.
var (
	errNotGranted = errors.New("held by another owner")
	errNotHeld    = errors.New("not held there")
	errUndone     = errors.New("granted, but no majority did: undone")
	errNoAnswer   = errors.New("no answer before the outcome was decided")
	errUpgrade    = errors.New("refused: the owner holds the read lock and asked to write")
)

// NewQuorumError returns the error of a call op of a quorum of servers at addrs, of
// which need must agree, errs being each server's error.
func NewQuorumError(op string, need int, addrs []string, errs []error) *QuorumError {
	return &QuorumError{op: op, need: need, addrs: addrs, errs: errs}
}

// Op is the operation the servers did not confirm.
func (e *QuorumError) Op() string { return e.op }

// Errs are each server's errors, nil for a server that confirmed the call.
func (e *QuorumError) Errs() []error { return e.errs }
