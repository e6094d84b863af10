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

const (
	// How long a new waiter waits for its release-notification subscription to be
	// confirmed before it falls back to sleeping on its backoff alone.
	confirmWait = time.Second
	// How long, at most, a process that handed a lock to another one keeps its newcomers
	// from taking it back (see yield).
	courtesyWindow = 50 * time.Millisecond
	// How long a turn that came with nobody waiting is kept for a goroutine about to wait
	// before it is passed on to the next Locker.
	turnGrace = 100 * time.Millisecond
)

// wait acquires h in Redis under retry policy p. Between attempts it sleeps until the
// lock's release is announced (Pub/Sub), its backoff delay, the holder's TTL, its
// deadline or the end of ctx, whichever comes first. Only one goroutine per key and
// process makes attempts at a time (the key's gate); the others queue behind it in
// arrival order, so Redis sees one waiter per process however many goroutines wait.
func (l *Locker) wait(ctx context.Context, a *acquisition, h *held, p RetryPolicy, deadline time.Time) (granted, error) {
	subscribed, queued, yielding := l.waits.state(h.rk)
	var (
		kw       *keyWait
		entered  bool // kw's gate is ours
		acquired bool
		timer    *time.Timer
		attempts int
		ttl      = time.Duration(-1) // the holder's TTL at the last busy attempt, <0 if unknown
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		if entered {
			kw.exit(acquired)
		}
		if kw != nil {
			l.waits.leave(kw, acquired)
		}
	}()
	busy := func(cause error) error {
		return &LockedError{Key: h.hk.key, RetryAfter: max(ttl, 0), Attempts: attempts, Err: cause}
	}
	// queue joins the key's waiters and waits for the gate.
	queue := func() error {
		kw = l.waits.join(ctx, h.rk)
		a.startWaiting(ctx)
		if err := kw.enter(ctx, deadline, l.done); err != nil {
			return l.waitError(err, busy)
		}
		entered = true
		kw.awaitSubscribed(ctx, deadline, confirmWait)
		return nil
	}
	// A newcomer makes its first attempt at once, even when others of this process queue
	// for the key: its owner may hold the lock through another process (a downstream
	// service reached with the owner's token), which only Redis can tell, and a newcomer
	// waiting behind the queue would then deadlock with it. With a queue, the attempt is
	// polite: it reenters the owner's hold but leaves a free lock to the queue.
	first := mannerWait
	switch {
	case p.limit == limitAttempts && p.attempts == 1:
		first = mannerTry
	case queued || yielding:
		first = mannerPolite
	}
	for {
		if kw != nil {
			kw.drain()
		}
		attempts++
		a.attempts = attempts
		manner := mannerWait
		switch {
		case attempts == 1:
			manner = first
		case p.limit == limitAttempts && attempts >= p.attempts:
			manner = mannerTry // the last one
		}
		g, err := l.attempt(ctx, h, manner)
		if err != nil && attempts > 1 && ctx.Err() != nil {
			// The context ended the wait during an attempt: the lock was busy before.
			return granted{}, busy(ctx.Err())
		}
		late := false
		if err == nil && g.acquired && !time.Now().Before(g.sent.Add(h.s.ttl-h.s.driftMargin())) {
			// Granted, but the reply came so late (Redis was down and the client retried)
			// that the lease's validity, measured from the send, has already run out:
			// give the hold back rather than hand out a lost lease. It was an attempt
			// like any other: the policy decides whether another one follows.
			l.undo(h, g.nonce)
			late, g = true, granted{pttl: -1}
		}
		if err != nil || g.acquired {
			acquired = g.acquired
			return g, err
		}
		ttl = g.pttl
		if p.limit == limitAttempts && attempts >= p.attempts ||
			!deadline.IsZero() && !time.Now().Before(deadline) {
			if late {
				return granted{}, &RedisError{Op: "acquire", Key: h.hk.key, Err: errLateGrant}
			}
			return granted{}, busy(nil)
		}
		if late {
			continue // the lock was free: try again at once
		}
		if kw == nil {
			if err := queue(); err != nil {
				return granted{}, err
			}
			switch {
			case !subscribed:
				continue // the lock may have been freed before the subscription existed
			case ttl < 0 && queued:
				// A polite attempt left the lock free to this process's queue, which this
				// goroutine now heads: the lock may still be free.
				continue
			case queued && !kw.predecessorAcquired():
				continue // the goroutine ahead gave up: the lock may be free
			}
			// Otherwise a release since the last attempt left a notification.
		}
		delay := p.delay().Delay(max(attempts, 1))
		if ttl >= 0 && ttl+time.Millisecond < delay {
			delay = ttl + time.Millisecond
		}
		if !deadline.IsZero() {
			delay = min(delay, time.Until(deadline))
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-kw.notify:
		case <-timer.C:
		case <-ctx.Done():
			return granted{}, busy(ctx.Err())
		case <-l.done:
			return granted{}, ErrClosed
		}
	}
}

// waitError turns the error of a wait that ended before an attempt into the call's error.
func (l *Locker) waitError(err error, busy func(error) error) error {
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case errors.Is(err, errDeadline):
		return busy(nil)
	}
	return busy(err)
}

var errDeadline = errors.New("guard: retry policy deadline")

// errLateGrant ends an acquisition whose last attempt took the lock but whose reply came
// back after the lease's validity, counted from the send, had run out.
var errLateGrant = errors.New("the lock was granted, but the reply arrived after the lease's validity had run out; the grant was undone")

// keyWait is the waiting state of one key in this process.
type keyWait struct {
	channel string
	refs    int           // goroutines waiting; guarded by waiters.mu
	idle    time.Time     // when refs fell to zero; guarded by waiters.mu
	gate    chan struct{} // holds a token while one goroutine makes attempts
	notify  chan struct{} // a release was seen since the last drain

	handedAcquired atomic.Bool   // the last goroutine to leave the gate took the lock
	ok             chan struct{} // closed at the first confirmation of the subscription
	okOnce         bool          // ok is closed; guarded by waiters.mu
	live           bool          // the subscription is confirmed now; guarded by waiters.mu
}

func (kw *keyWait) drain() {
	select {
	case <-kw.notify:
	default:
	}
}

func (kw *keyWait) signal() {
	select {
	case kw.notify <- struct{}{}:
	default:
	}
}

// enter takes the key's gate.
func (kw *keyWait) enter(ctx context.Context, deadline time.Time, done <-chan struct{}) error {
	select {
	case kw.gate <- struct{}{}:
		return nil
	default:
	}
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case kw.gate <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timeout:
		return errDeadline
	case <-done:
		return ErrClosed
	}
}

// exit gives the gate to the next goroutine, telling it whether this one took the lock.
func (kw *keyWait) exit(acquired bool) {
	kw.handedAcquired.Store(acquired)
	<-kw.gate
}

// predecessorAcquired reports whether the goroutine that held the gate last took the lock.
func (kw *keyWait) predecessorAcquired() bool { return kw.handedAcquired.Load() }

// awaitSubscribed waits, at most d, for the key's subscription to be confirmed.
func (kw *keyWait) awaitSubscribed(ctx context.Context, deadline time.Time, d time.Duration) {
	select {
	case <-kw.ok:
		return
	default:
	}
	if !deadline.IsZero() {
		d = min(d, time.Until(deadline))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-kw.ok:
	case <-t.C:
	case <-ctx.Done():
	}
}

// waiters multiplexes release notifications for every key this process waits on over
// one Pub/Sub connection.
type waiters struct {
	l        *Locker
	active   atomic.Int32 // len(keys), readable without mu
	yielding atomic.Int32 // len(yields), readable without mu

	mu     sync.Mutex
	keys   map[string]*keyWait    // by channel
	yields map[string]time.Time   // by channel: until when newcomers are polite
	turns  map[string]*time.Timer // by channel: a turn that came with nobody waiting
	ps     *redis.PubSub
	closed bool
	loop   sync.WaitGroup
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
	if w.ps == nil {
		w.ps = w.l.client.Subscribe(context.WithoutCancel(ctx))
		w.loop.Add(1)
		go w.receive(w.ps)
	}
	ps := w.ps
	w.mu.Unlock()
	// Subscribe aside: it may have to dial, which the caller's deadline must not wait for
	// (awaitSubscribed waits for the confirmation within it). A failed subscribe leaves
	// the key unconfirmed: its waiters poll on their backoff.
	sub := func() { _ = ps.Subscribe(context.Background(), ch) }
	if !w.l.background(sub) {
		sub()
	}
	if turn {
		kw.signal()
	}
	return kw
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
		w.background(kw.channel, func(ctx context.Context, k redisKeys) error {
			return w.l.client.LRem(ctx, k.queue(), 0, w.l.id).Err()
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
	idleUnsub     = 10 * time.Second // drop a key's subscription after this long unused
	reconnectWait = 100 * time.Millisecond
)

// Receive-loop timing; variables so that tests can shorten them.
var (
	receivePoll = time.Second      // read timeout of the receive loop
	pingIdle    = 3 * time.Second  // ping the connection after this long without traffic
	deadIdle    = 10 * time.Second // replace the connection after this long without traffic
)

// receive dispatches Pub/Sub traffic until the Locker closes.
func (w *waiters) receive(ps *redis.PubSub) {
	defer w.loop.Done()
	ctx := context.Background()
	lastTraffic, lastSweep := time.Now(), time.Now()
	failures := 0
	for {
		msg, err := ps.ReceiveTimeout(ctx, receivePoll)
		if err != nil {
			if w.isClosed() {
				return
			}
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				// The connection broke; go-redis reconnects and resubscribes on the next
				// receive. Notifications sent meanwhile are lost: waiters then wake on
				// their backoff or the holder's TTL.
				w.unconfirmAll()
				failures++
				if !w.sleep(min(reconnectWait*time.Duration(failures), 2*time.Second)) {
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
				ps = w.recycle(ps)
				lastTraffic = time.Now()
			case idle > pingIdle:
				_ = ps.Ping(ctx)
			}
		} else {
			failures = 0
			lastTraffic = time.Now()
			switch m := msg.(type) {
			case *redis.Message:
				w.dispatch(m.Channel, m.Payload)
			case *redis.Subscription:
				w.confirm(ps, m)
			}
		}
		if time.Since(lastSweep) > idleUnsub/2 {
			lastSweep = time.Now()
			w.sweep(ps)
		}
	}
}

func (w *waiters) hasKeys() bool { return w.active.Load() > 0 }

// recycle replaces the Pub/Sub connection with a new one subscribed to the same keys.
func (w *waiters) recycle(old *redis.PubSub) *redis.PubSub {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return old
	}
	chans := make([]string, 0, len(w.keys))
	for ch, kw := range w.keys {
		kw.live = false
		chans = append(chans, ch)
	}
	ps := w.l.client.Subscribe(context.Background())
	w.ps = ps
	w.mu.Unlock()
	_ = old.Close()
	if len(chans) > 0 {
		_ = ps.Subscribe(context.Background(), chans...)
	}
	return ps
}

func (w *waiters) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
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
	w.background(ch, func(ctx context.Context, k redisKeys) error {
		return wakeScript.Run(ctx, w.l.client, []string{k.queue()}, ch).Err()
	})
}

// background runs a best-effort call about the lock of channel ch aside, bounded by the
// ReleaseTimeout.
func (w *waiters) background(ch string, call func(context.Context, redisKeys) error) {
	k := keysOfChannel(ch)
	w.l.background(func() {
		ctx, cancel := context.WithTimeout(context.Background(), w.l.cfg.releaseTimeout)
		defer cancel()
		_ = call(ctx, k)
	})
}

func (w *waiters) confirm(ps *redis.PubSub, m *redis.Subscription) {
	w.mu.Lock()
	kw := w.keys[m.Channel]
	resubscribe := false
	switch {
	case kw == nil:
	case m.Kind == "subscribe":
		kw.live = true
		if !kw.okOnce {
			kw.okOnce = true
			close(kw.ok)
		}
	case m.Kind == "unsubscribe":
		// An unsubscribe of an idle key crossed a new waiter's subscribe.
		kw.live = false
		resubscribe = true
	}
	w.mu.Unlock()
	if resubscribe {
		_ = ps.Subscribe(context.Background(), m.Channel)
	}
	if kw != nil && m.Kind == "subscribe" {
		// A release may have been announced before the subscription took effect.
		kw.signal()
	}
}

// unconfirmAll marks every subscription as not confirmed after the connection broke.
func (w *waiters) unconfirmAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, kw := range w.keys {
		kw.live = false
	}
}

// sweep drops the subscriptions of keys nobody has waited on for idleUnsub.
func (w *waiters) sweep(ps *redis.PubSub) {
	var drop []string
	w.mu.Lock()
	for ch, kw := range w.keys {
		if kw.refs == 0 && time.Since(kw.idle) > idleUnsub {
			delete(w.keys, ch)
			drop = append(drop, ch)
		}
	}
	w.active.Store(int32(len(w.keys)))
	w.mu.Unlock()
	if len(drop) > 0 {
		_ = ps.Unsubscribe(context.Background(), drop...)
	}
}

func (w *waiters) close() {
	w.mu.Lock()
	w.closed = true
	for _, t := range w.turns {
		t.Stop()
	}
	w.turns = nil
	ps := w.ps
	w.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	w.loop.Wait()
}
