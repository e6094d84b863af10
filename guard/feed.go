package guard

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// # Wake-ups and turns
//
// This is the whole protocol by which a waiter learns that a lock may be free, stated
// once; the code that carries it out is in this file, in wait.go (waitRun, keyWait) and
// in the scripts (queue.lua's enqueue, wake_next and wake_all, which every kind's acquire
// and release scripts share, and wake.lua).
//
//  1. Redis queues processes, not goroutines. An attempt that finds the lock busy puts
//     its Locker's ID at the end of the lock's wait queue (KEYS[3], a list, once per
//     Locker, expiring 3 TTLs after the last waiter queued), unless it will not wait
//     (a try). A process whose last waiter gives up without the lock removes itself
//     (waiters.leave).
//  2. In a process, one goroutine per key asks Redis at a time: the key's gate
//     (keyWait.enter/exit). The others queue behind it in arrival order, so Redis sees
//     one waiter per process however many goroutines wait. The read-write and fair locks
//     skip the gate (waitOwn: every waiter asks for itself); the semaphore's next
//     goroutine asks at once when it takes the gate (waitShared). See waitStyle.
//  3. A release that frees the lock pops the first Locker ID of the queue and announces
//     it on the lock's channel ("<lock>:release", PUBLISH, or SPUBLISH on a Redis 7
//     Cluster): only that process wakes (dispatch ignores another's ID). With nobody
//     queued but someone having waited for this very hold (#w), it announces "*" and every
//     process wakes. A kind whose release may admit several (the last reader, a writer
//     leaving) wakes all. The release reports who was told: the caller's own Locker
//     (releaseOwnTurn: it wakes its own waiters, without a message), another
//     (releaseHandedOn: this process then yields, below), or nobody.
//  4. A woken process signals the key's keyWait: the goroutine at the gate attempts at
//     once; waitOwn waiters all do (broadcast).
//  5. A turn that reaches a process with nobody waiting there (the goroutine that was
//     about to wait is between its attempt and joining) is kept for turnGrace for the
//     first goroutine that joins; past that it is passed on to the next Locker of the
//     queue (wake.lua), so that a turn is never lost with the process that got it.
//  6. A process that handed the lock to another (releaseHandedOn) makes its own
//     newcomers polite for courtesyWindow (yield): their first attempt reenters the
//     owner's hold but leaves a free lock to the queue, so the woken process gets it
//     rather than a goroutine here that asks again at once. A newcomer of a process
//     whose goroutines already queue for the key is polite too.
//  7. Nothing depends on a message arriving. Notifications are lost when a Pub/Sub
//     connection breaks, before a subscription is confirmed, or with a dropped reply:
//     every waiter also sleeps only until its backoff delay or the holder's TTL (cut
//     from the busy reply), whichever is first, and asks again. A release whose reply
//     was lost wakes this process's waiters anyway, or passes the turn on.
//  8. Subscriptions are per key and outlive a single wait: a key's channel is
//     subscribed at its first waiter and dropped idleUnsub after its last, so a key
//     under steady contention keeps it. A new waiter waits up to confirmWait for the
//     subscription's confirmation before its first sleep, and attempts again once it
//     is confirmed, since a release may have been announced before.
//
// waiters delivers release notifications for every key this process waits on. On a
// single server, Sentinel and Redis 6.2 Cluster it reads them from one Pub/Sub connection
// (one feed) shared by all keys. On a Redis 7 Cluster releases are announced with sharded
// Pub/Sub (SPUBLISH), which reaches only the shard that owns the lock, and the process
// reads them from one feed per primary it waits on, however many keys and hash slots: a
// key's channel is subscribed (SSUBSCRIBE, one slot at a time) on the feed of the primary
// that owns its slot. guard, not go-redis, resubscribes a feed's channels when its
// connection breaks or its node stops serving a slot (go-redis would resubscribe them in
// one command, which a node refuses when they span slots): the feed is retired and each
// channel subscribed again on the feed of its slot's primary now. The loss of one node
// silences only its own feed.
type waiters struct {
	l        *Locker      // its ID, background calls and closing
	c        *conn        // where subscriptions and queue calls go
	active   atomic.Int32 // len(keys), readable without mu
	yielding atomic.Int32 // len(yields), readable without mu
	sharded  atomic.Int32 // 0 unknown, 1 classic Pub/Sub, 2 sharded Pub/Sub

	mu     sync.Mutex
	keys   map[string]*keyWait    // by channel
	yields map[string]time.Time   // by channel: until when newcomers are polite
	turns  map[string]*time.Timer // by channel: a turn that came with nobody waiting
	feeds  map[int]*feed          // by node (see nodes), or classicFeed (and below, a quorum's)
	nodes  map[string]int         // a Cluster primary's address → its feeds key (≥ 0)
	closed bool
	loops  sync.WaitGroup
}

// classicFeed is the feeds key of the one classic Pub/Sub feed.
const classicFeed = -1

// feed is one Pub/Sub connection and the goroutine that reads it.
type feed struct {
	slot    int // its feeds key: a Cluster primary's (≥ 0), classicFeed, or a quorum server's
	ps      *redis.PubSub
	retired bool // replaced or emptied: its loop ends; guarded by waiters.mu
}

// sharded reports whether f is a Cluster primary's sharded feed.
func (f *feed) sharded() bool { return f.slot >= 0 }

// sharded reports whether release notifications for the lock of channel ch travel over
// sharded Pub/Sub: on a Redis Cluster whose nodes run Redis 7 or newer (release.lua makes
// the same choice on the node that runs it). The answer is asked once, of the node that
// owns ch, and kept.
func (w *waiters) isSharded(ctx context.Context, ch string) (bool, error) {
	switch w.sharded.Load() {
	case 1:
		return false, nil
	case 2:
		return true, nil
	}
	if _, ok := w.c.client.(*redis.ClusterClient); !ok || w.l.q != nil {
		w.sharded.Store(1)
		return false, nil
	}
	v, err := versionScript.Run(ctx, w.c.client, []string{ch}).Int64()
	if err != nil {
		return false, err
	}
	mode := int32(1)
	if v >= 0x070000 {
		mode = 2
	}
	w.sharded.Store(mode)
	return mode == 2, nil
}

// state reports whether release notifications for k already reach this process,
// whether goroutines of this process already wait for k, and whether this process just
// handed k to another one (see yield).
func (w *waiters) state(k redisKeys) (subscribed, queued, yielding bool) {
	if w.active.Load() == 0 && w.yielding.Load() == 0 {
		return false, false, false
	}
	ch := k.channel()
	w.mu.Lock()
	defer w.mu.Unlock()
	if until, ok := w.yields[ch]; ok {
		if yielding = time.Now().Before(until); !yielding {
			delete(w.yields, ch)
			w.yielding.Store(int32(len(w.yields)))
		}
	}
	if kw := w.keys[ch]; kw != nil {
		subscribed, queued = kw.live, kw.refs > 0
	}
	return subscribed, queued, yielding
}

// yield makes this process's newcomers polite on k for d: its release just woke another
// process, which should get the lock rather than a goroutine of this one that asks again
// at once.
func (w *waiters) yield(k redisKeys, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.yields == nil {
		w.yields = make(map[string]time.Time)
	}
	w.yields[k.channel()] = time.Now().Add(d)
	w.yielding.Store(int32(len(w.yields)))
}

// join registers a waiter for k, subscribing to its channel if it is the first.
func (w *waiters) join(ctx context.Context, k redisKeys) *keyWait {
	ch := k.channel()
	w.mu.Lock()
	turn := w.turns[ch] != nil // a turn kept for a goroutine about to wait: this one
	if turn {
		w.turns[ch].Stop()
		delete(w.turns, ch)
	}
	kw := w.keys[ch]
	if kw != nil {
		kw.refs++
		w.mu.Unlock()
		if turn {
			kw.signal()
		}
		return kw
	}
	kw = &keyWait{
		channel: ch,
		refs:    1,
		gate:    make(chan struct{}, 1),
		notify:  make(chan struct{}, 1),
		ok:      make(chan struct{}),
	}
	if w.closed {
		w.mu.Unlock()
		return kw // not subscribed: the caller polls, and sees the Locker closing
	}
	if w.keys == nil {
		w.keys = make(map[string]*keyWait)
	}
	w.keys[ch] = kw
	w.active.Store(int32(len(w.keys)))
	w.mu.Unlock()
	// Subscribe aside: it may have to dial, which the caller's deadline must not wait for
	// (awaitSubscribed waits for the confirmation within it). A failed subscribe leaves
	// the key unconfirmed: its waiters poll on their backoff.
	w.subscribeAside(kw, 0)
	if turn {
		kw.signal()
	}
	return kw
}

// subscribeAside subscribes kw's channel on a background goroutine, after delay.
func (w *waiters) subscribeAside(kw *keyWait, delay time.Duration) {
	sub := func() {
		if delay > 0 && !w.sleep(delay) {
			return
		}
		w.subscribe(kw)
	}
	if !w.l.background(sub) {
		sub()
	}
}

// subscribe subscribes kw's channel on the feed that carries it, starting that feed if
// needed. A failure leaves the channel unconfirmed: its waiters then wake on their backoff
// or the holder's TTL.
func (w *waiters) subscribe(kw *keyWait) {
	ctx, cancel := context.WithTimeout(context.Background(), w.l.cfg.releaseTimeout)
	defer cancel()
	if w.l.q != nil {
		w.subscribeQuorum(ctx, kw)
		return
	}
	sharded, err := w.isSharded(ctx, kw.channel)
	if err != nil {
		w.c.refresh(err)
		return
	}
	if sharded {
		w.subscribeSharded(ctx, kw)
		return
	}
	w.mu.Lock()
	if w.closed || w.keys[kw.channel] != kw {
		w.mu.Unlock()
		return // closed, or swept meanwhile
	}
	f := w.feeds[classicFeed]
	if f == nil {
		f = &feed{slot: classicFeed, ps: w.c.client.Subscribe(context.Background())}
		w.start(f)
	}
	w.mu.Unlock()
	if err := f.ps.Subscribe(ctx, kw.channel); err != nil {
		w.c.refresh(err)
	}
}

// subscribeSharded subscribes kw's channel with SSUBSCRIBE on the feed of the primary
// that owns its slot, starting that feed if needed.
func (w *waiters) subscribeSharded(ctx context.Context, kw *keyWait) {
	node, err := w.c.client.(*redis.ClusterClient).MasterForKey(ctx, kw.channel)
	if err != nil {
		w.c.refresh(err)
		return
	}
	addr := node.Options().Addr
	w.mu.Lock()
	if w.closed || w.keys[kw.channel] != kw {
		w.mu.Unlock()
		return // closed, or swept meanwhile
	}
	if w.nodes == nil {
		w.nodes = make(map[string]int)
	}
	id, ok := w.nodes[addr]
	if !ok {
		id = len(w.nodes)
		w.nodes[addr] = id
	}
	f := w.feeds[id]
	if f == nil {
		// A node's own client: the connection goes to that node, and a broken one is
		// not redialled by go-redis, whose resubscription would send every channel in
		// one SSUBSCRIBE (see receive).
		f = &feed{slot: id, ps: node.Subscribe(context.Background())}
		w.start(f)
	}
	kw.feed = f
	w.mu.Unlock()
	if err := f.ps.SSubscribe(ctx, kw.channel); err != nil {
		// The channel stays unconfirmed: its waiters wake on their backoff or the
		// holder's TTL. A broken connection is the receive loop's to replace.
		w.c.refresh(err)
	}
}

// subscribeQuorum subscribes kw's channel on every server of a quorum Locker, each
// server's feed being the feeds entry classicFeed - its index: a release announced by
// any server wakes the waiters, and a server that is down silences only its own feed.
func (w *waiters) subscribeQuorum(ctx context.Context, kw *keyWait) {
	w.mu.Lock()
	if w.closed || w.keys[kw.channel] != kw {
		w.mu.Unlock()
		return
	}
	feeds := make([]*feed, len(w.l.q.nodes))
	for i, c := range w.l.q.nodes {
		slot := classicFeed - i
		f := w.feeds[slot]
		if f == nil {
			f = &feed{slot: slot, ps: c.client.Subscribe(context.Background())}
			w.start(f)
		}
		feeds[i] = f
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, f := range feeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = f.ps.Subscribe(ctx, kw.channel)
		}()
	}
	wg.Wait()
}

// carries reports whether feed f carries the notifications of kw's channel: a sharded
// feed those of the keys subscribed on it, the classic feed and every feed of a quorum
// Locker those of every key. w.mu is held.
func (w *waiters) carries(f *feed, kw *keyWait) bool {
	return !f.sharded() || kw.feed == f
}

// start records feed f and starts its receive loop. w.mu is held.
func (w *waiters) start(f *feed) {
	if w.feeds == nil {
		w.feeds = make(map[int]*feed)
	}
	w.feeds[f.slot] = f
	w.loops.Add(1)
	go w.receive(f)
}

// leave unregisters a waiter. The subscription is dropped later by the receive loop, so
// that a key under steady contention keeps it. When the last waiter of the process leaves
// without the lock, the process leaves the lock's Redis wait queue too.
func (w *waiters) leave(kw *keyWait, acquired bool) {
	w.mu.Lock()
	kw.refs--
	last := kw.refs == 0
	if last {
		kw.idle = time.Now()
	}
	w.mu.Unlock()
	if last && !acquired {
		w.everywhere(kw.channel, func(ctx context.Context, c *conn, k redisKeys) error {
			return c.client.LRem(ctx, k.queue, 0, w.l.id).Err()
		})
	}
}

// wake tells this process's waiters on k that the lock was released here, and reports
// whether any was waiting. A goroutine that queued behind a local holder has made no
// attempt against it, so the release may not be announced over Pub/Sub: this is what
// wakes it.
func (w *waiters) wake(k redisKeys) bool {
	if w.active.Load() == 0 {
		return false
	}
	w.mu.Lock()
	kw := w.keys[k.channel()]
	waiting := kw != nil && kw.refs > 0
	w.mu.Unlock()
	if waiting {
		kw.signal()
	}
	return waiting
}

// Receive-loop tuning.
const (
	idleUnsub        = 10 * time.Second // drop a key's subscription after this long unused
	reconnectWait    = 100 * time.Millisecond
	reconnectWaitMax = time.Second
)

// Receive-loop timing; variables so that tests can shorten them.
var (
	receivePoll = time.Second      // read timeout of the receive loop
	pingIdle    = 3 * time.Second  // ping the connection after this long without traffic
	deadIdle    = 10 * time.Second // replace the connection after this long without traffic
)

// receive dispatches the traffic of feed f until the Locker closes or f is retired.
func (w *waiters) receive(f *feed) {
	defer w.loops.Done()
	ctx := context.Background()
	lastTraffic, lastSweep := time.Now(), time.Now()
	failures := 0
	for {
		msg, err := f.ps.ReceiveTimeout(ctx, receivePoll)
		if w.isRetired(f) {
			return
		}
		if err != nil {
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				w.c.refresh(err)
				if f.sharded() { // not redialled: its channels move to their primaries' feeds
					w.replace(f, reconnectWait)
					return
				}
				// The classic connection broke; go-redis reconnects and resubscribes on the
				// next receive. Notifications meanwhile are lost: waiters wake on their
				// backoff or the holder's TTL.
				w.unconfirm(f)
				failures++
				if !w.sleep(min(reconnectWait*time.Duration(failures), reconnectWaitMax)) {
					return
				}
				continue
			}
			// A connection that answers nothing (a black-holed network path) raises no
			// error: ping it when quiet, and replace it when even pings go unanswered.
			switch idle := time.Since(lastTraffic); {
			case !w.hasKeys():
				lastTraffic = time.Now()
			case idle > deadIdle:
				w.c.refresh(err)
				w.replace(f, 0)
				return
			case idle > pingIdle:
				_ = f.ps.Ping(ctx)
			}
		} else {
			failures = 0
			lastTraffic = time.Now()
			switch m := msg.(type) {
			case *redis.Message:
				w.dispatch(m.Channel, m.Payload)
			case *redis.Subscription:
				w.confirm(f, m)
			}
		}
		if time.Since(lastSweep) > idleUnsub/2 {
			lastSweep = time.Now()
			if w.sweep(f) {
				return
			}
		}
	}
}

func (w *waiters) hasKeys() bool { return w.active.Load() > 0 }

func (w *waiters) isRetired(f *feed) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed || f.retired
}

// replace retires feed f and subscribes its channels again, after delay, on new feeds:
// for a sharded feed, at the primary that owns its slot now.
func (w *waiters) replace(f *feed, delay time.Duration) {
	w.mu.Lock()
	if f.retired {
		w.mu.Unlock()
		return
	}
	f.retired = true
	if w.feeds[f.slot] == f {
		delete(w.feeds, f.slot)
	}
	var moved []*keyWait
	for _, kw := range w.keys {
		if w.carries(f, kw) {
			kw.live = false
			kw.feed = nil
			moved = append(moved, kw)
		}
	}
	closed := w.closed
	w.mu.Unlock()
	_ = f.ps.Close()
	if closed {
		return
	}
	for _, kw := range moved {
		w.subscribeAside(kw, delay)
	}
}

// sleep waits d unless the Locker closes first; it reports whether it slept.
func (w *waiters) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.l.done:
		return false
	}
}

// dispatch handles a release notification. Its payload names the Locker it wakes (the
// first in the lock's Redis wait queue), or is "*" for all of them.
func (w *waiters) dispatch(ch, payload string) {
	if payload != "*" && payload != w.l.id {
		return // another process's turn
	}
	w.mu.Lock()
	kw := w.keys[ch]
	waiting := kw != nil && kw.refs > 0
	w.mu.Unlock()
	switch {
	case waiting:
		kw.signal()
	case payload == w.l.id:
		w.keepTurn(ch)
	}
}

// keepTurn holds this Locker's turn on the lock of channel ch, which came while nobody
// here waits: a goroutine may be between its attempt and joining the waiters. The turn
// goes to the first goroutine that joins within turnGrace, else on to the next Locker.
func (w *waiters) keepTurn(ch string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.turns[ch] != nil {
		return
	}
	if w.turns == nil {
		w.turns = make(map[string]*time.Timer)
	}
	var t *time.Timer
	t = time.AfterFunc(turnGrace, func() {
		w.mu.Lock()
		mine := w.turns[ch] == t
		if mine {
			delete(w.turns, ch)
		}
		w.mu.Unlock()
		if mine {
			w.passOn(ch)
		}
	})
	w.turns[ch] = t
}

// passOn gives the turn of this Locker, which no longer waits, to the next one queued for
// the lock of channel ch.
func (w *waiters) passOn(ch string) {
	w.everywhere(ch, func(ctx context.Context, c *conn, k redisKeys) error {
		return wakeScript.Run(ctx, c.client, []string{k.queue}, ch, c.shardedFlag()).Err()
	})
}

// everywhere runs call aside about the lock of channel ch on the Locker's deployment, or
// on each server of a quorum Locker.
func (w *waiters) everywhere(ch string, call func(context.Context, *conn, redisKeys) error) {
	if w.l.q == nil {
		w.background(ch, func(ctx context.Context, k redisKeys) error { return call(ctx, w.c, k) })
		return
	}
	k := keysOfChannel(ch)
	w.l.each(nil, false, func(ctx context.Context, c *conn) error { return call(ctx, c, k) })
}

// background runs a best-effort call about the lock of channel ch aside, bounded by the
// ReleaseTimeout.
func (w *waiters) background(ch string, call func(context.Context, redisKeys) error) {
	k := keysOfChannel(ch)
	w.l.background(func() {
		ctx, cancel := context.WithTimeout(context.Background(), w.l.cfg.releaseTimeout)
		defer cancel()
		if err := call(ctx, k); err != nil {
			w.c.refresh(err)
		}
	})
}

// confirm handles a subscription change reported on feed f.
func (w *waiters) confirm(f *feed, m *redis.Subscription) {
	subscribed := m.Kind == "subscribe" || m.Kind == "ssubscribe"
	w.mu.Lock()
	kw := w.keys[m.Channel]
	moved := false
	switch {
	case kw == nil:
	case subscribed:
		kw.live = true
		if !kw.okOnce {
			kw.okOnce = true
			close(kw.ok)
		}
	case m.Kind == "unsubscribe":
		// An unsubscribe of an idle key crossed a new waiter's subscribe.
		kw.live = false
	case m.Kind == "sunsubscribe":
		// The node no longer serves the slot (a failover or a resharding), or an
		// unsubscribe of an idle key crossed a new waiter's subscribe.
		kw.live = false
		moved = true
	}
	w.mu.Unlock()
	switch {
	case kw == nil:
	case subscribed:
		// A release may have been announced before the subscription took effect.
		kw.signal()
	case moved:
		w.c.refresh(errSlotMoved)
		w.replace(f, reconnectWait)
	default:
		_ = f.ps.Subscribe(context.Background(), m.Channel)
	}
}

var errSlotMoved = errors.New("guard: a shard stopped serving a subscribed channel")

// unconfirm marks the subscriptions of feed f as not confirmed after its connection broke.
func (w *waiters) unconfirm(f *feed) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, kw := range w.keys {
		if w.carries(f, kw) {
			kw.live = false
		}
	}
}

// sweep drops the subscriptions of f's keys that nobody has waited on for idleUnsub, and
// reports whether f, a sharded feed left with no key, was retired.
func (w *waiters) sweep(f *feed) bool {
	var drop []string
	left := 0
	w.mu.Lock()
	for ch, kw := range w.keys {
		if !w.carries(f, kw) {
			continue
		}
		if kw.refs == 0 && time.Since(kw.idle) > idleUnsub {
			delete(w.keys, ch)
			drop = append(drop, ch)
		} else {
			left++
		}
	}
	w.active.Store(int32(len(w.keys)))
	retire := left == 0 && f.sharded()
	if retire {
		f.retired = true
		delete(w.feeds, f.slot)
	}
	var others []*feed // a quorum's other servers' feeds carry the dropped keys too
	if w.l.q != nil && len(drop) > 0 {
		for _, o := range w.feeds {
			if o != f {
				others = append(others, o)
			}
		}
	}
	w.mu.Unlock()
	for _, o := range others {
		_ = o.ps.Unsubscribe(context.Background(), drop...)
	}
	switch {
	case retire:
		_ = f.ps.Close()
	case len(drop) > 0 && !f.sharded():
		_ = f.ps.Unsubscribe(context.Background(), drop...)
	case len(drop) > 0:
		_ = f.ps.SUnsubscribe(context.Background(), drop...)
	}
	return retire
}

func (w *waiters) close() {
	w.mu.Lock()
	w.closed = true
	for _, t := range w.turns {
		t.Stop()
	}
	w.turns = nil
	feeds := make([]*feed, 0, len(w.feeds))
	for _, f := range w.feeds {
		feeds = append(feeds, f)
	}
	w.mu.Unlock()
	for _, f := range feeds {
		_ = f.ps.Close()
	}
	w.loops.Wait()
}
