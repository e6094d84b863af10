package feed

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// TurnGrace is how long a turn that came with nobody waiting is kept for a goroutine
// about to wait before it is passed on to the next Locker (see the package doc, 5).
const TurnGrace = 100 * time.Millisecond

// PubSub is one Pub/Sub connection, as *redis.PubSub provides it. ReceiveTimeout returns
// a *redis.Message, a *redis.Subscription or a *redis.Pong.
type PubSub interface {
	Subscribe(ctx context.Context, channels ...string) error
	SSubscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	SUnsubscribe(ctx context.Context, channels ...string) error
	ReceiveTimeout(ctx context.Context, timeout time.Duration) (any, error)
	Ping(ctx context.Context, payload ...string) error
	Close() error
}

// Route is a feed that carries a channel's notifications.
type Route struct {
	// ID names the feed: routes with one ID share one connection.
	ID string
	// Sharded reports a sharded feed (SSUBSCRIBE): it carries only the channels
	// subscribed on it. A classic feed carries every channel the Hub has.
	Sharded bool
	// Open opens the feed's connection, the first time the ID is routed to.
	Open func() PubSub
}

// Source is the deployment the Hub's feeds and calls go to.
type Source interface {
	// Routes returns the feeds that carry channel's notifications: one, or one per
	// server of a quorum.
	Routes(ctx context.Context, channel string) ([]Route, error)
	// Refresh is told of every connection error, so that a Cluster's map can be
	// reloaded.
	Refresh(err error)
	// Leave removes this process from the wait queue of channel's lock, aside.
	Leave(channel string)
	// PassOn gives this process's turn on channel's lock to the next process queued,
	// aside.
	PassOn(channel string)
	// Aside runs fn on a goroutine the owner waits for at its closing, and reports
	// false, without running it, when the owner is closed.
	Aside(fn func()) bool
}

// Config is what a Hub is made of.
type Config struct {
	// ID is the process's (the Locker's) ID: the notifications it heeds name it, or "*".
	ID string
	// Source is the deployment.
	Source Source
	// Done is closed when the owner closes: sleeps end.
	Done <-chan struct{}
	// Timeout bounds each subscription call.
	Timeout time.Duration
}

// Hub delivers release notifications to every key this process waits on.
type Hub struct {
	cfg      Config
	active   atomic.Int32 // len(keys), readable without mu
	yielding atomic.Int32 // len(yields), readable without mu

	mu     sync.Mutex
	keys   map[string]*Key        // by channel
	yields map[string]time.Time   // by channel: until when newcomers are polite
	turns  map[string]*time.Timer // by channel: a turn that came with nobody waiting
	feeds  map[string]*feed       // by route ID
	closed bool
	loops  sync.WaitGroup
}

// feed is one Pub/Sub connection and the goroutine that reads it.
type feed struct {
	id      string
	sharded bool
	ps      PubSub
	retired bool // replaced or emptied: its loop ends; guarded by Hub.mu
}

// New returns a Hub; feeds start with the first waiter.
func New(cfg Config) *Hub { return &Hub{cfg: cfg} }

// State reports whether release notifications for channel already reach this process,
// whether goroutines of this process already wait for it, and whether this process just
// handed its lock to another one (see Yield).
func (hb *Hub) State(channel string) (subscribed, queued, yielding bool) {
	if hb.active.Load() == 0 && hb.yielding.Load() == 0 {
		return false, false, false
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if until, ok := hb.yields[channel]; ok {
		if yielding = time.Now().Before(until); !yielding {
			delete(hb.yields, channel)
			hb.yielding.Store(int32(len(hb.yields)))
		}
	}
	if k := hb.keys[channel]; k != nil {
		subscribed, queued = k.live, k.refs > 0
	}
	return subscribed, queued, yielding
}

// Yield makes this process's newcomers polite on channel's lock for d: its release just
// woke another process, which should get the lock rather than a goroutine of this one
// that asks again at once.
func (hb *Hub) Yield(channel string, d time.Duration) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if hb.yields == nil {
		hb.yields = make(map[string]time.Time)
	}
	hb.yields[channel] = time.Now().Add(d)
	hb.yielding.Store(int32(len(hb.yields)))
}

// Join registers a waiter for channel's lock, subscribing to the channel if it is the
// first. Each Join is ended by one Leave.
func (hb *Hub) Join(channel string) *Key {
	hb.mu.Lock()
	turn := hb.turns[channel] != nil // a turn kept for a goroutine about to wait: this one
	if turn {
		hb.turns[channel].Stop()
		delete(hb.turns, channel)
	}
	k := hb.keys[channel]
	if k != nil {
		k.refs++
		hb.mu.Unlock()
		if turn {
			k.Signal()
		}
		return k
	}
	k = newKey(channel)
	if hb.closed {
		hb.mu.Unlock()
		return k // not subscribed: the caller polls, and sees its owner closing
	}
	if hb.keys == nil {
		hb.keys = make(map[string]*Key)
	}
	hb.keys[channel] = k
	hb.active.Store(int32(len(hb.keys)))
	hb.mu.Unlock()
	// Subscribe aside: it may have to dial, which the caller's deadline must not wait
	// for (AwaitSubscribed waits for the confirmation within it). A failed subscribe
	// leaves the key unconfirmed: its waiters poll on their backoff.
	hb.subscribeAside(k, 0)
	if turn {
		k.Signal()
	}
	return k
}

// Leave unregisters a waiter. The subscription is dropped later by the receive loop, so
// that a key under steady contention keeps it. When the last waiter of the process
// leaves without the lock, the process leaves the lock's Redis wait queue too.
func (hb *Hub) Leave(k *Key, acquired bool) {
	hb.mu.Lock()
	k.refs--
	last := k.refs == 0
	if last {
		k.idle = time.Now()
	}
	hb.mu.Unlock()
	if last && !acquired {
		hb.cfg.Source.Leave(k.channel)
	}
}

// Wake tells this process's waiters on channel's lock that it was released here, and
// reports whether any was waiting. A goroutine that queued behind a local holder has
// made no attempt against it, so the release may not be announced over Pub/Sub: this
// is what wakes it.
func (hb *Hub) Wake(channel string) bool {
	if hb.active.Load() == 0 {
		return false
	}
	hb.mu.Lock()
	k := hb.keys[channel]
	waiting := k != nil && k.refs > 0
	hb.mu.Unlock()
	if waiting {
		k.Signal()
	}
	return waiting
}

// KeepTurn holds this process's turn on channel's lock, which came while nobody here
// waits: a goroutine may be between its attempt and joining the waiters. The turn goes
// to the first goroutine that joins within TurnGrace, else on to the next process.
func (hb *Hub) KeepTurn(channel string) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if hb.closed || hb.turns[channel] != nil {
		return
	}
	if hb.turns == nil {
		hb.turns = make(map[string]*time.Timer)
	}
	var t *time.Timer
	t = time.AfterFunc(TurnGrace, func() {
		hb.mu.Lock()
		mine := hb.turns[channel] == t
		if mine {
			delete(hb.turns, channel)
		}
		hb.mu.Unlock()
		if mine {
			hb.cfg.Source.PassOn(channel)
		}
	})
	hb.turns[channel] = t
}

// Close stops the feeds and their goroutines.
func (hb *Hub) Close() {
	hb.mu.Lock()
	hb.closed = true
	for _, t := range hb.turns {
		t.Stop()
	}
	hb.turns = nil
	feeds := make([]*feed, 0, len(hb.feeds))
	for _, f := range hb.feeds {
		feeds = append(feeds, f)
	}
	hb.mu.Unlock()
	for _, f := range feeds {
		_ = f.ps.Close()
	}
	hb.loops.Wait()
}

// subscribeAside subscribes k's channel on a background goroutine, after delay.
func (hb *Hub) subscribeAside(k *Key, delay time.Duration) {
	sub := func() {
		if delay > 0 && !hb.sleep(delay) {
			return
		}
		hb.subscribe(k)
	}
	if !hb.cfg.Source.Aside(sub) {
		sub()
	}
}

// subscribe subscribes k's channel on the feeds that carry it, starting them if needed,
// all at once. A failure leaves the channel unconfirmed on that feed: its waiters then
// wake on their backoff or the holder's TTL (a broken connection is the receive loop's
// to replace).
func (hb *Hub) subscribe(k *Key) {
	ctx, cancel := context.WithTimeout(context.Background(), hb.cfg.Timeout)
	defer cancel()
	routes, err := hb.cfg.Source.Routes(ctx, k.channel)
	if err != nil {
		hb.cfg.Source.Refresh(err)
		return
	}
	hb.mu.Lock()
	if hb.closed || hb.keys[k.channel] != k {
		hb.mu.Unlock()
		return // closed, or swept meanwhile
	}
	feeds := make([]*feed, len(routes))
	for i, r := range routes {
		f := hb.feeds[r.ID]
		if f == nil {
			f = &feed{id: r.ID, sharded: r.Sharded, ps: r.Open()}
			hb.start(f)
		}
		if f.sharded {
			k.feed = f
		}
		feeds[i] = f
	}
	hb.mu.Unlock()
	if len(feeds) == 1 {
		hb.subscribeOn(ctx, feeds[0], k.channel)
		return
	}
	var wg sync.WaitGroup
	for _, f := range feeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hb.subscribeOn(ctx, f, k.channel)
		}()
	}
	wg.Wait()
}

func (hb *Hub) subscribeOn(ctx context.Context, f *feed, channel string) {
	subscribe := f.ps.Subscribe
	if f.sharded {
		subscribe = f.ps.SSubscribe
	}
	if err := subscribe(ctx, channel); err != nil {
		hb.cfg.Source.Refresh(err)
	}
}

// carries reports whether feed f carries the notifications of k's channel: a sharded
// feed those of the keys subscribed on it, a classic feed those of every key. hb.mu is
// held.
func (f *feed) carries(k *Key) bool { return !f.sharded || k.feed == f }

// start records feed f and starts its receive loop. hb.mu is held.
func (hb *Hub) start(f *feed) {
	if hb.feeds == nil {
		hb.feeds = make(map[string]*feed)
	}
	hb.feeds[f.id] = f
	hb.loops.Add(1)
	go hb.receive(f)
}

// sleep waits d unless the owner closes first; it reports whether it slept.
func (hb *Hub) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-hb.cfg.Done:
		return false
	}
}
