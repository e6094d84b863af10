package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/internal/testproc"
)

// holderEnv, when set, makes the test binary a holder process: it takes the lock its
// holderSpec names, says "held <token>" on stdout, and keeps the lease (renewing it)
// until it is killed or its stdin closes. Tests kill it with SIGKILL to crash a holder.
const holderEnv = "GUARDKIT_TEST_HOLDER"

type holderSpec struct {
	Addr    string        `json:"addr"`
	Key     string        `json:"key"`
	Kind    string        `json:"kind"` // "read", "write", "semaphore", "fair", "" exclusive
	Permits int           `json:"permits"`
	TTL     time.Duration `json:"ttl"`
	Owner   string        `json:"owner"`
	// Freeze makes the holder spin, once it holds the lock, until it sees its own clock
	// jump by more than TTL (the test stopped it with SIGSTOP), and then say at once what
	// its lease reports: "resumed lost=<Err matches ErrLeaseLost> ctx=<its Context ended
	// with that cause>". It runs with GOMAXPROCS=1, so that nothing else of the process —
	// the lease's validity timer included — runs between the resumption and that check.
	Freeze bool `json:"freeze"`
	// Set, when not empty, makes the holder take these keys as one lock (AcquireAll)
	// instead of Key.
	Set []string `json:"set"`
}

func (s holderSpec) options() []guard.Option {
	opts := []guard.Option{guard.TTL(s.TTL)}
	switch s.Kind {
	case "read":
		opts = append(opts, guard.Read())
	case "write":
		opts = append(opts, guard.Write())
	case "semaphore":
		opts = append(opts, guard.Permits(s.Permits))
	case "fair":
		opts = append(opts, guard.Fair())
	}
	return opts
}

func runHolder(raw string) int {
	var s holderSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 2
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	l, err := guard.New(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 2
	}
	ctx := ctxid.NewContext(context.Background(), ctxid.ID(s.Owner))
	var le *guard.Lease
	if len(s.Set) > 0 {
		le, err = l.AcquireAll(ctx, s.Set, s.options()...)
	} else {
		le, err = l.Acquire(ctx, s.Key, s.options()...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	fmt.Printf("held %d %s\n", le.Token(), le.Owner())
	if s.Freeze {
		return frozen(le, s.TTL)
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes stdin or kills us
	_ = le.Release(context.Background())
	return 0
}

// frozen is the holder's Freeze mode (see holderSpec).
func frozen(le *guard.Lease, ttl time.Duration) int {
	lctx := le.Context()
	start := time.Now()
	said := false
	for last := start; ; {
		now := time.Now()
		if !said && now.Sub(start) > 50*time.Millisecond {
			fmt.Println("spinning") // from inside the loop: a stop from now on is seen
			said = true
		}
		if now.Sub(last) > ttl {
			lost := errors.Is(le.Err(), guard.ErrLeaseLost)
			ended := lctx.Err() != nil && errors.Is(context.Cause(lctx), guard.ErrLeaseLost)
			fmt.Printf("resumed lost=%t ctx=%t\n", lost, ended)
			return 0
		}
		last = now
	}
}

// holder is a holder process started by startHolder.
type holder struct {
	cmd   *exec.Cmd
	held  chan int64  // the token, once the lock is held
	owner string      // the holding section, set before held is sent
	lines chan string // the other lines it prints
}

// startHolder starts a process that takes key as spec says (Addr, Key and TTL filled in).
func startHolder(t *testing.T, srv *redistest.Server, key string, spec holderSpec) *holder {
	t.Helper()
	spec.Addr, spec.Key = srv.Addr(), key
	if spec.Owner == "" {
		spec.Owner = string(ctxid.New())
	}
	var extra []string
	if spec.Freeze {
		extra = append(extra, "GOMAXPROCS=1")
	}
	p := testproc.Start(t, holderEnv, spec, extra...)
	h := &holder{cmd: p.Cmd, held: make(chan int64, 1), lines: make(chan string, 16)}
	go func() { // ends when the process's output does
		for line := range p.Lines {
			var token int64
			var owner string
			if n, _ := fmt.Sscanf(line, "held %d %s", &token, &owner); n >= 1 {
				h.owner = owner
				h.held <- token
			} else {
				select {
				case h.lines <- line:
				default:
				}
			}
		}
	}()
	return h
}

// await waits for the holder to hold its lock and returns its token.
func (h *holder) await(t *testing.T, d time.Duration) int64 {
	t.Helper()
	select {
	case token := <-h.held:
		return token
	case <-time.After(d):
		t.Fatalf("holder process did not take its lock within %s", d)
		return 0
	}
}

// kill crashes the holder process (SIGKILL): its leases are neither released nor renewed.
func (h *holder) kill(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
}
