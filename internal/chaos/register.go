package chaos

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/register.lua
var registerSrc string

var registerScript = redis.NewScript(registerSrc)

// Register is a fenced register kept in a Redis that plays the part of the storage a
// guarded job writes to. Every operation carries the fencing token of the caller's
// lease, and the register rejects tokens lower than the highest it has seen, reads
// included. With it, a holder that was paused or partitioned past its lease cannot
// overwrite what its successor wrote, nor write a value computed from a stale read.
//
// Each operation is appended to a log that Audit checks afterwards.
type Register struct {
	client redis.UniversalClient
	name   string
	key    string
	log    string
}

// NewRegister returns the register named name in client's Redis. Registers with
// different names are independent.
func NewRegister(client redis.UniversalClient, name string) *Register {
	return &Register{client: client, name: name, key: "register:" + name, log: "register:" + name + ":log"}
}

// Read returns the register's value for a caller holding token; ok is false when the
// token has been superseded. label names the caller in the log and must not contain
// spaces.
func (r *Register) Read(ctx context.Context, token int64, label string) (value int64, ok bool, err error) {
	return r.run(ctx, "r", token, 0, label)
}

// Write sets the register's value for a caller holding token; ok is false, and nothing
// was written, when the token has been superseded.
func (r *Register) Write(ctx context.Context, token, value int64, label string) (ok bool, err error) {
	_, ok, err = r.run(ctx, "w", token, value, label)
	return ok, err
}

func (r *Register) run(ctx context.Context, op string, token, value int64, label string) (int64, bool, error) {
	v, err := registerScript.Run(ctx, r.client, []string{r.key, r.log}, op, token, value, label).Slice()
	if err != nil {
		return 0, false, fmt.Errorf("chaos: register %s: %w", op, err)
	}
	if len(v) != 2 {
		return 0, false, fmt.Errorf("chaos: register %s: unexpected reply %v", op, v)
	}
	applied, _ := v[0].(int64)
	s, _ := v[1].(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("chaos: register %s: unexpected reply %v", op, v)
	}
	if applied != 1 {
		return 0, false, nil
	}
	return n, true, nil
}

// RegisterStats summarises a register's log.
type RegisterStats struct {
	Writes   int   // writes applied
	Rejected int   // operations rejected for a superseded token
	Value    int64 // final value
}

// Audit checks the register's log against acked, the number of writes its callers saw
// applied, and returns the M4 violations (see AuditLog).
func (r *Register) Audit(ctx context.Context, acked int) (RegisterStats, []Violation, error) {
	entries, err := r.client.LRange(ctx, r.log, 0, -1).Result()
	if err != nil {
		return RegisterStats{}, nil, fmt.Errorf("chaos: register audit: %w", err)
	}
	return AuditLog(r.name, entries, acked)
}

// AuditLog checks entries, the log of the register named name in the order the storage
// applied them, against acked, the number of writes its callers saw applied, and
// returns the M4 violations: an applied operation whose token is below one applied
// before it (a stale operation accepted), an applied write that is not the previous
// value plus one (a lost update), or a final value other than acked. Each violation
// names the register's name as its key, and the tokens involved.
func AuditLog(name string, entries []string, acked int) (RegisterStats, []Violation, error) {
	var (
		st        RegisterStats
		vs        []Violation
		highest   int64
		lastWrite int64 // the token of the last applied write
	)
	bad := func(toks []int64, format string, args ...any) {
		vs = append(vs, Violation{Inv: M4, Key: name, Tokens: toks,
			Detail: fmt.Sprintf("register %q: ", name) + fmt.Sprintf(format, args...)})
	}
	for i, e := range entries {
		f := strings.Fields(e)
		if len(f) < 4 {
			return st, vs, fmt.Errorf("chaos: register audit: malformed log entry %d: %q", i, e)
		}
		if f[0] == "x" {
			st.Rejected++
			continue
		}
		token, err1 := strconv.ParseInt(f[1], 10, 64)
		value, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return st, vs, fmt.Errorf("chaos: register audit: malformed log entry %d: %q", i, e)
		}
		if token < highest {
			bad([]int64{token, highest}, "%s by %s with token %d applied after token %d: a stale operation accepted", f[0], f[3], token, highest)
		}
		highest = max(highest, token)
		if f[0] == "w" {
			st.Writes++
			if value != st.Value+1 {
				bad(tokens(lastWrite, token), "write by %s with token %d set %d after %d: an update was lost", f[3], token, value, st.Value)
			}
			st.Value = value
			lastWrite = token
		}
	}
	if st.Value != int64(acked) || st.Writes != acked {
		bad(nil, "value %d after %d applied writes, but %d sections were acknowledged", st.Value, st.Writes, acked)
	}
	return st, vs, nil
}
