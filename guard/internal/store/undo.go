package store

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Undos that Redis did not answer. An acquire attempt whose caller gave up before Redis
// answered may still run: a frozen server (SIGSTOP, a VM pause) keeps the bytes in its
// socket and runs them when it wakes, however long after, on whichever connection it
// reads first. The undo of such an attempt leaves a mark that refuses the attempt should
// it arrive later (hold.lua's drop_hold), so the attempt is harmless once one undo has
// run — but only then: an undo abandoned at its timeout while the server was still
// frozen may never have been sent. So an undo that got no answer is not dropped: it
// goes to its server's lane, which tries it again, with a backoff of up to a second,
// until the server answers (any reply, an error reply included: scripts are atomic) or
// the Locker is closed. A server that wakes finds the undo either in its socket already
// or within a second.
const (
	// undoBackoff and undoBackoffMax space a lane's tries while its server is silent.
	undoBackoff    = 50 * time.Millisecond
	undoBackoffMax = time.Second
	// undoLaneMax bounds the undos a lane keeps; past it the newest are dropped (and
	// logged): those attempts' holds, if they ever run, end with their TTL.
	undoLaneMax = 1 << 16
)

// undoLanes are the Locker's lanes of unanswered undos, one per server (conn).
type undoLanes struct {
	cfg   *Config
	mu    sync.Mutex
	lanes map[*Conn]*undoLane
}

// undoLane is one server's unanswered undos, tried in order by one goroutine while any
// are left.
type undoLane struct {
	pending []func(context.Context) error
	running bool
	dropped int
}

// retry puts call, an undo on c that got no answer, in c's lane. Once the Locker is
// closed it does nothing.
func (u *undoLanes) retry(c *Conn, call func(context.Context) error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.lanes == nil {
		u.lanes = make(map[*Conn]*undoLane)
	}
	lane := u.lanes[c]
	if lane == nil {
		lane = &undoLane{}
		u.lanes[c] = lane
	}
	if len(lane.pending) >= undoLaneMax {
		lane.dropped++
		if lane.dropped == 1 {
			slog.Warn("guard: too many undos waiting for a silent Redis; dropping the newest (their holds, if they ever run, end with their TTL)",
				slog.Int("pending", len(lane.pending)))
		}
		return
	}
	lane.pending = append(lane.pending, call)
	if !lane.running && u.cfg.Aside(func() { u.drain(lane) }) {
		lane.running = true
	}
}

// drain tries lane's undos in order until none is left or the Locker is closed.
func (u *undoLanes) drain(lane *undoLane) {
	backoff := undoBackoff
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		u.mu.Lock()
		if len(lane.pending) == 0 {
			lane.running, lane.pending, lane.dropped = false, nil, 0
			u.mu.Unlock()
			return
		}
		call := lane.pending[0]
		u.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), u.cfg.Timeout)
		err := call(ctx)
		cancel()
		if answered(err) {
			u.mu.Lock()
			lane.pending[0] = nil
			lane.pending = lane.pending[1:]
			u.mu.Unlock()
			backoff = undoBackoff
			continue
		}
		if timer == nil {
			timer = time.NewTimer(backoff)
		} else {
			timer.Reset(backoff)
		}
		select {
		case <-u.cfg.Done:
			return
		case <-timer.C:
		}
		backoff = min(2*backoff, undoBackoffMax)
	}
}
