package guard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/keyfunc"
)

// TestTypedErrorsUnwrap: each typed error matches its own sentinel and no other, keeps
// its cause reachable by errors.Is and errors.As, and is found by errors.As itself,
// wrapped or not.
func TestTypedErrorsUnwrap(t *testing.T) {
	sentinels := []error{guard.ErrLocked, guard.ErrDeadlock, guard.ErrLeaseLost, guard.ErrReleased,
		guard.ErrNotHeld, guard.ErrExpired, guard.ErrUpgrade, guard.ErrInvalidConfig,
		guard.ErrInvalidKey, guard.ErrUnavailable, guard.ErrClosed}
	syntax := &keyfunc.SyntaxError{}
	for _, tc := range []struct {
		err   error
		match error
		cause error // nil: none
	}{
		{&guard.LockedError{Key: "k"}, guard.ErrLocked, nil},
		{&guard.LockedError{Key: "k", Err: context.DeadlineExceeded}, guard.ErrLocked, context.DeadlineExceeded},
		{&guard.DeadlockError{Key: "k", Cycle: []guard.DeadlockEdge{{Key: "k"}}}, guard.ErrDeadlock, nil},
		{&guard.LeaseLostError{Key: "k", Reason: "locker closed"}, guard.ErrLeaseLost, nil},
		{&guard.LeaseLostError{Key: "k", Reason: "validity expired without renewal", Err: context.Canceled}, guard.ErrLeaseLost, context.Canceled},
		{&guard.ConfigError{Field: "TTL", Reason: "bad"}, guard.ErrInvalidConfig, nil},
		{&guard.ConfigError{Field: "Key", Reason: "bad", Err: syntax}, guard.ErrInvalidConfig, syntax},
		{&guard.KeyError{Key: "", Reason: "empty"}, guard.ErrInvalidKey, nil},
		{&guard.RedisError{Op: "acquire", Key: "k", Err: context.DeadlineExceeded}, guard.ErrUnavailable, context.DeadlineExceeded},
		{&guard.ReplicaError{Key: "k", Want: 1}, guard.ErrUnavailable, nil},
		{&guard.ReplicaError{Key: "k", Want: 1, Err: context.DeadlineExceeded}, guard.ErrUnavailable, context.DeadlineExceeded},
	} {
		for _, err := range []error{tc.err, fmt.Errorf("wrapped: %w", tc.err)} {
			for _, s := range sentinels {
				if got, want := errors.Is(err, s), s == tc.match; got != want {
					t.Errorf("errors.Is(%T %q, %v) = %v, want %v", tc.err, err, s, got, want)
				}
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Errorf("errors.Is(%q, %v) = false, want its cause matched", err, tc.cause)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("errors.Is(%q, itself) = false", err)
			}
			if !foundAs(err, tc.err) {
				t.Errorf("errors.As(%q, %T) did not find it", err, tc.err)
			}
		}
	}
	var se *keyfunc.SyntaxError
	if err := error(&guard.ConfigError{Field: "Key", Err: syntax}); !errors.As(err, &se) || se != syntax {
		t.Errorf("errors.As(ConfigError, *keyfunc.SyntaxError) did not reach the cause")
	}
	var le *guard.LockedError
	if err := fmt.Errorf("outer: %w", &guard.LockedError{Key: "k"}); !errors.As(err, &le) || le.Key != "k" {
		t.Errorf("errors.As(*LockedError) = %v", le)
	}
}

// foundAs reports whether errors.As finds, in err, the typed error want.
func foundAs(err, want error) bool {
	switch want := want.(type) {
	case *guard.LockedError:
		return as(err, want)
	case *guard.DeadlockError:
		return as(err, want)
	case *guard.LeaseLostError:
		return as(err, want)
	case *guard.ConfigError:
		return as(err, want)
	case *guard.KeyError:
		return as(err, want)
	case *guard.RedisError:
		return as(err, want)
	case *guard.ReplicaError:
		return as(err, want)
	}
	return false
}

func as[T error](err error, want T) bool {
	var got T
	return errors.As(err, &got) && any(got) == any(want)
}
