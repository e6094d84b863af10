package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/guardkit/guardkit/guard"
)

// jsonLock is a lock as --json prints it. Durations are in milliseconds, times in RFC 3339.
type jsonLock struct {
	Key             string       `json:"key"`
	Kind            string       `json:"kind"`
	Held            bool         `json:"held"`
	Fence           int64        `json:"fence"`
	Time            time.Time    `json:"time"`
	Contended       bool         `json:"contended"`
	WriterWaitingMs int64        `json:"writer_waiting_ms,omitempty"`
	WaitedMs        int64        `json:"waited_ms,omitempty"` // watch: the longest wait seen
	Holders         []jsonHolder `json:"holders"`
	Waiters         []jsonWaiter `json:"waiters"`
	Server          string       `json:"server,omitempty"`
	Error           string       `json:"error,omitempty"`
	Servers         []jsonLock   `json:"servers,omitempty"`
}

type jsonHolder struct {
	Owner      string     `json:"owner"`
	Kind       string     `json:"kind"`
	Holds      int        `json:"holds"`
	Token      int64      `json:"token"`
	TTLMs      int64      `json:"ttl_ms"`
	AcquiredAt *time.Time `json:"acquired_at,omitempty"`
	HeldForMs  int64      `json:"held_for_ms,omitempty"`
	Locker     string     `json:"locker,omitempty"`
	Label      string     `json:"label,omitempty"`
	TraceID    string     `json:"trace_id,omitempty"`
	Local      bool       `json:"local"`
	Granted    bool       `json:"granted,omitempty"`
}

type jsonWaiter struct {
	Locker string `json:"locker"`
	Owner  string `json:"owner,omitempty"`
	TTLMs  int64  `json:"ttl_ms,omitempty"`
	Local  bool   `json:"local"`
}

func jsonState(st *guard.LockState) jsonLock {
	j := jsonLock{
		Key: st.Key, Kind: st.Kind.String(), Held: len(st.Holders) > 0, Fence: st.Fence, Time: st.Time.UTC(),
		Contended: st.Contended, WriterWaitingMs: st.WriterWaiting.Milliseconds(),
		Holders: []jsonHolder{}, Waiters: []jsonWaiter{}, Server: st.Server,
	}
	if st.Err != nil {
		j.Error = st.Err.Error()
	}
	for _, h := range st.Holders {
		jh := jsonHolder{Owner: string(h.Owner), Kind: h.Kind.String(), Holds: h.Holds, Token: h.Token,
			TTLMs: h.TTL.Milliseconds(), Locker: h.Locker, Label: h.Label, TraceID: h.TraceID,
			Local: h.Local, Granted: h.Granted}
		if !h.AcquiredAt.IsZero() {
			at := h.AcquiredAt.UTC()
			jh.AcquiredAt = &at
			jh.HeldForMs = st.Time.Sub(h.AcquiredAt).Milliseconds()
		}
		j.Holders = append(j.Holders, jh)
	}
	for _, w := range st.Waiters {
		j.Waiters = append(j.Waiters, jsonWaiter{Locker: w.Locker, Owner: string(w.Owner), TTLMs: w.TTL.Milliseconds(), Local: w.Local})
	}
	for _, s := range st.Servers {
		j.Servers = append(j.Servers, jsonState(s))
	}
	return j
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// dur formats d for a table: 850ms, 12.3s, 3m04s, 2h03m.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// heldFor is how long h has been held when st was read, -1 when unknown.
func heldFor(st *guard.LockState, h guard.Holder) time.Duration {
	if h.AcquiredAt.IsZero() {
		return -1
	}
	return st.Time.Sub(h.AcquiredAt)
}

func labelSuffix(h guard.Holder) string {
	if h.Label == "" {
		return ""
	}
	return ", " + h.Label
}

// who names a holder for a person: its label, or its Locker, or "?".
func who(h guard.Holder) string {
	s := h.Label
	if s == "" && h.Locker != "" {
		s = "locker " + h.Locker
	}
	if h.Local {
		s = strings.TrimSpace(s + " (this process)")
	}
	if h.TraceID != "" {
		s += " trace " + h.TraceID
	}
	if s == "" {
		return "-"
	}
	return s
}

// writeState prints one lock: a summary line, its holders, its waiters, and on a quorum
// Locker each server's view.
func writeState(w io.Writer, st *guard.LockState) {
	state := "free"
	if len(st.Holders) > 0 {
		state = "held"
	}
	fmt.Fprintf(w, "%s (%s): %s, %d waiter(s), fence %d, read at %s\n",
		st.Key, st.Kind, state, len(st.Waiters), st.Fence, st.Time.UTC().Format(time.RFC3339Nano))
	if len(st.Holders) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "HOLDER\tMODE\tHOLDS\tTOKEN\tTTL\tHELD FOR\tLOCKER\tLABEL")
		for _, h := range st.Holders {
			mode := h.Kind.String()
			if h.Granted {
				mode += " (granted, unclaimed)"
			}
			locker := h.Locker
			if locker == "" {
				locker = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", h.Owner, mode, h.Holds, h.Token,
				dur(h.TTL), dur(heldFor(st, h)), locker, who(guard.Holder{Label: h.Label, TraceID: h.TraceID, Local: h.Local}))
		}
		_ = tw.Flush()
	}
	if len(st.Waiters) > 0 {
		fmt.Fprintln(w, "WAITERS, in the order served:")
		for i, wt := range st.Waiters {
			line := fmt.Sprintf("  %d. locker %s", i+1, wt.Locker)
			if wt.Owner != "" {
				line += fmt.Sprintf(", owner %s, keeps its place %s", wt.Owner, dur(wt.TTL))
			}
			if wt.Local {
				line += " (this process)"
			}
			fmt.Fprintln(w, line)
		}
	}
	if st.WriterWaiting > 0 {
		fmt.Fprintf(w, "A writer waits: new readers are held back for %s unless it asks again.\n", dur(st.WriterWaiting))
	}
	if len(st.Servers) > 0 {
		writeServers(w, st.Servers)
	}
}

// writeServers prints a quorum's servers' views of one lock.
func writeServers(w io.Writer, servers []*guard.LockState) {
	fmt.Fprintln(w, "SERVERS (the majority's view above):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  SERVER\tHOLDERS\tTTL\tTOKEN\tFENCE\tWAITERS\tERROR")
	for _, s := range servers {
		if s.Err != nil {
			fmt.Fprintf(tw, "  %s\t-\t-\t-\t-\t-\t%v\n", s.Server, s.Err)
			continue
		}
		var owners []string
		ttl, token := time.Duration(-1), int64(0)
		for _, h := range s.Holders {
			owners = append(owners, string(h.Owner))
			ttl, token = h.TTL, h.Token
		}
		if len(owners) == 0 {
			owners = []string{"-"}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t-\n", s.Server, strings.Join(owners, ","), dur(ttl), token, s.Fence, len(s.Waiters))
	}
	_ = tw.Flush()
}

func sortByKey(locks []*guard.LockState) {
	sort.Slice(locks, func(i, j int) bool {
		if locks[i].Key != locks[j].Key {
			return locks[i].Key < locks[j].Key
		}
		return locks[i].Kind < locks[j].Kind
	})
}

// summary returns a lock's longest hold, its shortest time left and its first holder.
func summary(st *guard.LockState) (held, ttl time.Duration, first guard.Holder) {
	held, ttl = -1, -1
	for i, h := range st.Holders {
		if d := heldFor(st, h); d > held {
			held = d
		}
		if i == 0 || h.TTL < ttl {
			ttl = h.TTL
		}
	}
	if len(st.Holders) > 0 {
		first = st.Holders[0]
	}
	return held, ttl, first
}

// writeList prints one line per lock; waited, when not nil, adds the WAITED column
// (watch).
func writeList(w io.Writer, locks []*guard.LockState, waited map[*guard.LockState]time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "KEY\tKIND\tHOLDERS\tWAITERS\t"
	if waited != nil {
		head += "WAITED\t"
	}
	fmt.Fprintln(tw, head+"HELD FOR\tTTL\tHELD BY")
	for _, st := range locks {
		if le := (*guard.LayoutError)(nil); errors.As(st.Err, &le) {
			// Another version's lock: nothing of it is read (guard.List).
			line := fmt.Sprintf("%s\t%s\t?\t?\t", st.Key, st.Kind)
			if waited != nil {
				line += "-\t"
			}
			fmt.Fprintf(tw, "%s-\t-\tguardkit data layout %s, not %s (docs/operators.md: upgrading)\n", line, le.Found, le.Want)
			continue
		}
		held, ttl, first := summary(st)
		waiters := strconv.Itoa(len(st.Waiters))
		if st.WriterWaiting > 0 {
			waiters += "+writer"
		}
		line := fmt.Sprintf("%s\t%s\t%d\t%s\t", st.Key, st.Kind, len(st.Holders), waiters)
		if waited != nil {
			d, ok := waited[st]
			if !ok {
				d = -1
			}
			line += dur(d) + "\t"
		}
		by := "-"
		if len(st.Holders) > 0 {
			by = who(first)
			if by == "-" {
				by = string(first.Owner)
			}
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\n", line, dur(held), dur(ttl), by)
	}
	_ = tw.Flush()
}
