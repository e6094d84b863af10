package feed

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// Receive-loop tuning.
const (
	idleUnsub        = 10 * time.Second // drop a key's subscription after this long unused
	reconnectWait    = 100 * time.Millisecond
	reconnectWaitMax = time.Second
)

// Receive-loop timing; variables so that tests can shorten them (SetTiming).
var (
	receivePoll = time.Second      // read timeout of the receive loop
	pingIdle    = 3 * time.Second  // ping the connection after this long without traffic
	deadIdle    = 10 * time.Second // replace the connection after this long without traffic
)

// SetTiming shortens the receive loops' timing for a test: the read timeout, the silence
// after which a connection is pinged and the one after which it is replaced. It returns
// a function that restores them. Call it before the Hub under test first has a waiter.
func SetTiming(poll, ping, dead time.Duration) (restore func()) {
	p, pi, d := receivePoll, pingIdle, deadIdle
	receivePoll, pingIdle, deadIdle = poll, ping, dead
	return func() { receivePoll, pingIdle, deadIdle = p, pi, d }
}

// ErrSlotMoved is what the Source is told (Refresh) when a sharded feed's node stopped
// serving a subscribed channel's slot.
var ErrSlotMoved = errors.New("guard: a shard stopped serving a subscribed channel")

// receive dispatches the traffic of feed f until the Hub closes or f is retired.
func (hb *Hub) receive(f *feed) {
	defer hb.loops.Done()
	ctx := context.Background()
	lastTraffic, lastSweep := time.Now(), time.Now()
	failures := 0
	for {
		msg, err := f.ps.ReceiveTimeout(ctx, receivePoll)
		if hb.isRetired(f) {
			return
		}
		if err != nil {
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				hb.cfg.Source.Refresh(err)
				if f.sharded { // not redialled: its channels move to their primaries' feeds
					hb.replace(f, reconnectWait)
					return
				}
				// A classic connection broke; go-redis reconnects and resubscribes on
				// the next receive. Notifications meanwhile are lost: waiters wake on
				// their backoff or the holder's TTL.
				hb.unconfirm(f)
				failures++
				if !hb.sleep(min(reconnectWait*time.Duration(failures), reconnectWaitMax)) {
					return
				}
				continue
			}
			// A connection that answers nothing (a black-holed network path) raises no
			// error: ping it when quiet, and replace it when even pings go unanswered.
			switch idle := time.Since(lastTraffic); {
			case hb.active.Load() == 0:
				lastTraffic = time.Now()
			case idle > deadIdle:
				hb.cfg.Source.Refresh(err)
				hb.replace(f, 0)
				return
			case idle > pingIdle:
				_ = f.ps.Ping(ctx)
			}
		} else {
			failures = 0
			lastTraffic = time.Now()
			switch m := msg.(type) {
			case *redis.Message:
				hb.dispatch(m.Channel, m.Payload)
			case *redis.Subscription:
				hb.confirm(f, m)
			}
		}
		if time.Since(lastSweep) > idleUnsub/2 {
			lastSweep = time.Now()
			if hb.sweep(f) {
				return
			}
		}
	}
}

func (hb *Hub) isRetired(f *feed) bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.closed || f.retired
}

// replace retires feed f and subscribes its channels again, after delay, on the feeds
// their routes give now: for a sharded feed, at the primary that owns their slot now.
func (hb *Hub) replace(f *feed, delay time.Duration) {
	hb.mu.Lock()
	if f.retired {
		hb.mu.Unlock()
		return
	}
	f.retired = true
	if hb.feeds[f.id] == f {
		delete(hb.feeds, f.id)
	}
	var moved []*Key
	for _, k := range hb.keys {
		if f.carries(k) {
			k.live = false
			k.feed = nil
			moved = append(moved, k)
		}
	}
	closed := hb.closed
	hb.mu.Unlock()
	_ = f.ps.Close()
	if closed {
		return
	}
	for _, k := range moved {
		hb.subscribeAside(k, delay)
	}
}

// dispatch handles a release notification. Its payload names the process it wakes (the
// first in the lock's Redis wait queue), or is "*" for all of them.
func (hb *Hub) dispatch(channel, payload string) {
	if payload != "*" && payload != hb.cfg.ID {
		return // another process's turn
	}
	hb.mu.Lock()
	k := hb.keys[channel]
	waiting := k != nil && k.refs > 0
	hb.mu.Unlock()
	switch {
	case waiting:
		k.Signal()
	case payload == hb.cfg.ID:
		hb.KeepTurn(channel)
	}
}

// confirm handles a subscription change reported on feed f.
func (hb *Hub) confirm(f *feed, m *redis.Subscription) {
	subscribed := m.Kind == "subscribe" || m.Kind == "ssubscribe"
	hb.mu.Lock()
	k := hb.keys[m.Channel]
	moved := false
	switch {
	case k == nil:
	case subscribed:
		k.live = true
		// A release may have been announced before the subscription took effect: wake
		// the key's waiters, before a goroutine that waits for the confirmation
		// (AwaitSubscribed) can go on and drain its wake-ups, so that it sees this one
		// done, never arriving after its drain.
		k.Signal()
		if !k.okOnce {
			k.okOnce = true
			close(k.ok)
		}
	case m.Kind == "unsubscribe":
		// An unsubscribe of an idle key crossed a new waiter's subscribe.
		k.live = false
	case m.Kind == "sunsubscribe":
		// The node no longer serves the slot (a failover or a resharding), or an
		// unsubscribe of an idle key crossed a new waiter's subscribe.
		k.live = false
		moved = true
	}
	hb.mu.Unlock()
	switch {
	case k == nil, subscribed:
	case moved:
		hb.cfg.Source.Refresh(ErrSlotMoved)
		hb.replace(f, reconnectWait)
	default:
		_ = f.ps.Subscribe(context.Background(), m.Channel)
	}
}

// unconfirm marks the subscriptions of feed f as not confirmed after its connection
// broke.
func (hb *Hub) unconfirm(f *feed) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	for _, k := range hb.keys {
		if f.carries(k) {
			k.live = false
		}
	}
}

// sweep drops the subscriptions of f's keys that nobody has waited on for idleUnsub, on
// f and on every other classic feed (a quorum's servers' feeds all carry every key),
// and reports whether f, a sharded feed left with no key, was retired.
func (hb *Hub) sweep(f *feed) bool {
	hb.mu.Lock()
	drop, left := hb.idleKeys(f)
	hb.active.Store(int32(len(hb.keys)))
	retire := left == 0 && f.sharded
	if retire {
		f.retired = true
		delete(hb.feeds, f.id)
	}
	var others []*feed
	if len(drop) > 0 && !f.sharded {
		for _, o := range hb.feeds {
			if o != f && !o.sharded {
				others = append(others, o)
			}
		}
	}
	hb.mu.Unlock()
	for _, o := range others {
		_ = o.ps.Unsubscribe(context.Background(), drop...)
	}
	switch {
	case retire:
		_ = f.ps.Close()
	case len(drop) > 0 && !f.sharded:
		_ = f.ps.Unsubscribe(context.Background(), drop...)
	case len(drop) > 0:
		_ = f.ps.SUnsubscribe(context.Background(), drop...)
	}
	return retire
}

// idleKeys removes the keys carried by f that nobody has waited on for idleUnsub, and
// returns their channels and how many of f's keys are left. hb.mu is held.
func (hb *Hub) idleKeys(f *feed) (drop []string, left int) {
	for ch, k := range hb.keys {
		if !f.carries(k) {
			continue
		}
		if k.refs == 0 && time.Since(k.idle) > idleUnsub {
			delete(hb.keys, ch)
			drop = append(drop, ch)
		} else {
			left++
		}
	}
	return drop, left
}
