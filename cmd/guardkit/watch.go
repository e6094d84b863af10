package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/guardkit/guardkit/guard"
)

// clearScreen moves the cursor home and clears the terminal (ANSI).
const clearScreen = "\x1b[H\x1b[2J"

// watch redraws the table of the locks matching pattern every interval until ctx ends or
// the operator types q: a bare q when standard input is a terminal (put in cbreak mode
// for the time watch runs, and restored), q then Enter otherwise.
func (c *cli) watch(ctx context.Context, pattern string) error {
	quit := make(chan struct{})
	keys := false
	if f, ok := c.stdin.(*os.File); ok {
		if restore := keysMode(f); restore != nil {
			defer restore()
			keys = true
		}
	}
	go readQuit(c.stdin, keys, quit)
	quits := "q Enter or Ctrl-C quits"
	if keys {
		quits = "q or Ctrl-C quits"
	}
	ticker := time.NewTicker(c.cfg.interval)
	defer ticker.Stop()
	since := map[string]time.Time{} // each waiter seen, by lock and waiter: when first seen
	for {
		start := time.Now()
		locks, calls, err := c.listAll(ctx, pattern)
		if ctx.Err() != nil {
			return nil
		}
		waited := waits(locks, since, start)
		sortForWatch(locks, waited)
		if c.cfg.json {
			out := make([]jsonLock, len(locks))
			for i, st := range locks {
				out[i] = jsonState(st)
				if d, ok := waited[st]; ok {
					out[i].WaitedMs = max(d.Milliseconds(), 1)
				}
			}
			if err != nil {
				fmt.Fprintln(c.errOut, "guardkit:", c.cfg.explain(err))
			} else if err := writeJSON(c.out, out); err != nil {
				return err
			}
		} else {
			var b strings.Builder
			b.WriteString(clearScreen)
			fmt.Fprintf(&b, "guardkit watch %s — %d locks, %d calls in %s, every %s — %s — %s\n",
				pattern, len(locks), calls, time.Since(start).Round(time.Millisecond), c.cfg.interval, quits, start.Format("15:04:05"))
			if err != nil {
				fmt.Fprintf(&b, "error: %v\n", c.cfg.explain(err))
			}
			writeList(&b, locks, waited)
			if _, err := fmt.Fprint(c.out, b.String()); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-quit:
			return nil
		case <-ticker.C:
		}
	}
}

// readQuit closes quit when the operator asks to quit on in: a q or Q key when keys (a
// terminal in cbreak mode), a line "q" otherwise.
func readQuit(in io.Reader, keys bool, quit chan<- struct{}) {
	if keys {
		b := make([]byte, 64)
		for {
			n, err := in.Read(b)
			if strings.ContainsAny(string(b[:n]), "qQ") {
				close(quit)
				return
			}
			if err != nil {
				return
			}
		}
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "q" {
			close(quit)
			return
		}
	}
}

// waits returns, per lock with waiters, the longest any of its waiters has been seen
// waiting, and updates since: waiters seen for the first time start at now, those gone
// are forgotten.
func waits(locks []*guard.LockState, since map[string]time.Time, now time.Time) map[*guard.LockState]time.Duration {
	waited := map[*guard.LockState]time.Duration{}
	seen := map[string]bool{}
	note := func(st *guard.LockState, who string) {
		id := st.Key + "\x00" + st.Kind.String() + "\x00" + who
		seen[id] = true
		first, ok := since[id]
		if !ok {
			first = now
			since[id] = now
		}
		if d := now.Sub(first); d >= waited[st] {
			waited[st] = d
		}
	}
	for _, st := range locks {
		for _, w := range st.Waiters {
			note(st, w.Locker+" "+string(w.Owner))
		}
		if st.WriterWaiting > 0 {
			note(st, "writer")
		}
	}
	for id := range since {
		if !seen[id] {
			delete(since, id)
		}
	}
	return waited
}

// sortForWatch puts the locks with waiters first, the longest wait first, then the
// longest held.
func sortForWatch(locks []*guard.LockState, waited map[*guard.LockState]time.Duration) {
	sort.SliceStable(locks, func(i, j int) bool {
		a, b := locks[i], locks[j]
		wa, oka := waited[a]
		wb, okb := waited[b]
		if oka != okb {
			return oka
		}
		if wa != wb {
			return wa > wb
		}
		ha, _, _ := summary(a)
		hb, _, _ := summary(b)
		if ha != hb {
			return ha > hb
		}
		return a.Key < b.Key
	})
}
