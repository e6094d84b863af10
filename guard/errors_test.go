package guard_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
		{guard.NewKeyError("", "empty"), guard.ErrInvalidKey, nil},
		{&guard.RedisError{Op: "acquire", Key: "k", Err: context.DeadlineExceeded}, guard.ErrUnavailable, context.DeadlineExceeded},
		{guard.NewReplicaError("k", 1, 0, nil, false), guard.ErrUnavailable, nil},
		{guard.NewReplicaError("k", 1, 0, context.DeadlineExceeded, true), guard.ErrUnavailable, context.DeadlineExceeded},
		{&guard.RedisError{Op: "release", Key: "k", Err: guard.NewQuorumError("release", 2, []string{"a:1", "b:2", "c:3"},
			[]error{context.DeadlineExceeded, nil, errors.New("refused")})}, guard.ErrUnavailable, context.DeadlineExceeded},
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
	case *guard.RedisError:
		return as(err, want)
	}
	_, _, ok := guard.InvalidKey(err) // unexported type
	return ok
}

func as[T error](err error, want T) bool {
	var got T
	return errors.As(err, &got) && any(got) == any(want)
}

// TestErrorMessages: a key error, a replica shortfall and a quorum failure say what they
// always said, and what a quorum failure unwraps to names each failed server.
func TestErrorMessages(t *testing.T) {
	deadline := context.DeadlineExceeded
	quorum := guard.NewQuorumError("release", 2, []string{"a:1", "b:2", "c:3"}, []error{deadline, nil, errors.New("refused")})
	for _, tc := range []struct {
		err  error
		want string
	}{
		{guard.NewKeyError("", "empty"), `guard: invalid lock key "" (0 bytes): empty`},
		{guard.NewKeyError(strings.Repeat("x", 70), "too long"), `guard: invalid lock key "` + strings.Repeat("x", 64) + `" (70 bytes): too long`},
		{guard.NewReplicaError("k", 1, 0, nil, false), `guard: acquire "k": 0 of 1 replicas acknowledged the grant in time; it was undone`},
		{guard.NewReplicaError("k", 2, 1, deadline, true), `guard: renew "k": 1 of 2 replicas acknowledged the renewal in time; the lease keeps its earlier validity: context deadline exceeded`},
		{quorum, `quorum: 1 of 3 servers confirmed the release, 2 needed; a:1: context deadline exceeded; c:3: refused`},
		{&guard.RedisError{Op: "release", Key: "k", Err: quorum}, `guard: release "k": redis: quorum: 1 of 3 servers confirmed the release, 2 needed; a:1: context deadline exceeded; c:3: refused`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	var re *guard.RedisError
	if err := guard.NewReplicaError("k", 1, 0, nil, true); !errors.As(err, &re) || re.Op != "renew" || re.Key != "k" {
		t.Errorf("a renewal's replica shortfall: %#v, want a *RedisError with Op renew and Key k", err)
	}
	if want, acked, renewal, ok := guard.ReplicaShortfall(fmt.Errorf("w: %w", guard.NewReplicaError("k", 2, 1, nil, false))); !ok || want != 2 || acked != 1 || renewal {
		t.Errorf("ReplicaShortfall = %d, %d, %v, %v; want 2, 1, false, true", want, acked, renewal, ok)
	}
	u, ok := quorum.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("a quorum failure has no Unwrap() []error")
	}
	var got []string
	for _, e := range u.Unwrap() {
		got = append(got, e.Error())
	}
	if want := []string{"a:1: context deadline exceeded", "c:3: refused"}; !slices.Equal(got, want) {
		t.Errorf("a quorum failure unwraps to %q, want %q", got, want)
	}
	if !errors.Is(quorum, deadline) {
		t.Errorf("errors.Is(quorum failure, DeadlineExceeded) = false")
	}
}
