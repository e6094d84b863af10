package feed

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakePS is a Pub/Sub connection whose traffic the test writes: subscriptions are
// confirmed at once, notifications are sent with publish, and break makes the next
// receive fail as a broken connection does.
type fakePS struct {
	in     chan any
	mu     sync.Mutex
	subs   []string // SUBSCRIBE and SSUBSCRIBE calls, in order
	unsubs []string
	closed bool
	done   chan struct{}
}

func newFakePS() *fakePS { return &fakePS{in: make(chan any, 64), done: make(chan struct{})} }

func (p *fakePS) sub(kind string, chs []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("closed")
	}
	for _, ch := range chs {
		p.subs = append(p.subs, kind+" "+ch)
		p.in <- &redis.Subscription{Kind: kind, Channel: ch, Count: 1}
	}
	return nil
}

func (p *fakePS) Subscribe(_ context.Context, chs ...string) error  { return p.sub("subscribe", chs) }
func (p *fakePS) SSubscribe(_ context.Context, chs ...string) error { return p.sub("ssubscribe", chs) }
func (p *fakePS) Unsubscribe(_ context.Context, chs ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unsubs = append(p.unsubs, chs...)
	return nil
}
func (p *fakePS) SUnsubscribe(ctx context.Context, chs ...string) error {
	return p.Unsubscribe(ctx, chs...)
}
func (p *fakePS) Ping(context.Context, ...string) error { return nil }
func (p *fakePS) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.done)
	}
	return nil
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func (p *fakePS) ReceiveTimeout(_ context.Context, d time.Duration) (any, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case m := <-p.in:
		if err, ok := m.(error); ok {
			return nil, err
		}
		return m, nil
	case <-p.done:
		return nil, errors.New("closed")
	case <-t.C:
		return nil, timeoutErr{}
	}
}

func (p *fakePS) publish(ch, payload string) {
	p.in <- &redis.Message{Channel: ch, Payload: payload}
}

func (p *fakePS) subscriptions() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.subs)
}

// fakeSource routes every channel to the feeds named in routes (one classic feed by
// default) and records the calls the protocol makes.
type fakeSource struct {
	mu      sync.Mutex
	sharded bool
	routes  []string           // route IDs
	opened  map[string]*fakePS // by route ID, the latest connection
	opens   map[string]int
	left    []string
	passed  []string
	refresh []error
	bg      sync.WaitGroup
}

func (s *fakeSource) Routes(_ context.Context, ch string) ([]Route, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.routes
	if len(ids) == 0 {
		ids = []string{""}
	}
	var rs []Route
	for _, id := range ids {
		rs = append(rs, Route{ID: id, Sharded: s.sharded, Open: func() PubSub {
			s.mu.Lock()
			defer s.mu.Unlock()
			p := newFakePS()
			if s.opened == nil {
				s.opened, s.opens = map[string]*fakePS{}, map[string]int{}
			}
			s.opened[id] = p
			s.opens[id]++
			return p
		}})
	}
	return rs, nil
}

func (s *fakeSource) feed(id string) *fakePS {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened[id]
}

func (s *fakeSource) Refresh(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refresh = append(s.refresh, err)
}
func (s *fakeSource) Leave(ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.left = append(s.left, ch)
}
func (s *fakeSource) PassOn(ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.passed = append(s.passed, ch)
}
func (s *fakeSource) Aside(fn func()) bool {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		fn()
	}()
	return true
}
func (s *fakeSource) calls() (left, passed []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.left), slices.Clone(s.passed)
}

func newHub(t *testing.T, src *fakeSource) *Hub {
	t.Helper()
	done := make(chan struct{})
	hb := New(Config{ID: "me", Source: src, Done: done, Timeout: time.Second})
	t.Cleanup(func() {
		close(done)
		hb.Close()
		src.bg.Wait()
	})
	return hb
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func received(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A notification wakes the key's waiters only when it names this process or "*"; the
// subscription is confirmed before (its confirmation wakes them once, before it counts as
// confirmed).
func TestDispatch(t *testing.T) {
	src := &fakeSource{}
	hb := newHub(t, src)
	k := hb.Join("lock:a:release")
	k.AwaitSubscribed(context.Background(), time.Time{}, 10*time.Second)
	if sub, queued, _ := hb.State("lock:a:release"); !sub || !queued {
		t.Fatalf("State = subscribed %v, queued %v after Join and confirmation", sub, queued)
	}
	k.Drain()
	all := k.Broadcast()
	ps := src.feed("")
	ps.publish("lock:a:release", "another")
	ps.publish("lock:b:release", "me") // a key nobody here waits for: its turn is kept
	waitFor(t, "the turn kept for lock:b (the feed read past the first message)", func() bool {
		hb.mu.Lock()
		defer hb.mu.Unlock()
		return hb.turns["lock:b:release"] != nil
	})
	if received(k.Notify()) || received(all) {
		t.Fatal("a notification naming another process woke this one")
	}
	ps.publish("lock:a:release", "me")
	select {
	case <-k.Notify():
	case <-time.After(10 * time.Second):
		t.Fatal("the notification naming this process did not wake the gate")
	}
	waitFor(t, "the broadcast", func() bool { return received(all) })
	all = k.Broadcast()
	ps.publish("lock:a:release", "*")
	waitFor(t, "the broadcast of *", func() bool { return received(all) })
	hb.Leave(k, true)
	if left, _ := src.calls(); len(left) != 0 {
		t.Errorf("a waiter that took the lock left the Redis queue: %v", left)
	}
}

// A turn that comes while nobody here waits is kept for the next goroutine that joins;
// kept for nobody, it is passed on after TurnGrace.
func TestTurns(t *testing.T) {
	src := &fakeSource{}
	hb := newHub(t, src)
	// A key with a feed, then nobody waiting: its turn comes.
	k := hb.Join("lock:t:release")
	k.AwaitSubscribed(context.Background(), time.Time{}, 10*time.Second)
	hb.Leave(k, true)
	hb.KeepTurn("lock:t:release")
	k2 := hb.Join("lock:t:release")
	if !received(k2.Notify()) {
		t.Fatal("the goroutine that joined within the grace was not given the kept turn")
	}
	hb.Leave(k2, true)
	hb.KeepTurn("lock:u:release")
	waitFor(t, "the turn passed on", func() bool {
		_, passed := src.calls()
		return slices.Equal(passed, []string{"lock:u:release"})
	})
	if _, passed := src.calls(); len(passed) != 1 {
		t.Errorf("turns passed on: %v, want only the one kept for nobody", passed)
	}
}

// The last waiter that leaves without the lock takes the process out of the lock's
// Redis queue; a waiter leaving while others wait does not.
func TestLeave(t *testing.T) {
	src := &fakeSource{}
	hb := newHub(t, src)
	a := hb.Join("lock:l:release")
	b := hb.Join("lock:l:release")
	hb.Leave(a, false)
	if left, _ := src.calls(); len(left) != 0 {
		t.Fatalf("left the queue with a waiter still here: %v", left)
	}
	hb.Leave(b, false)
	if left, _ := src.calls(); !slices.Equal(left, []string{"lock:l:release"}) {
		t.Fatalf("left = %v, want the lock's queue once", left)
	}
}

// On a quorum each server's feed carries every key: a release announced on any of them
// wakes the waiter, and every one is subscribed.
func TestSeveralFeeds(t *testing.T) {
	src := &fakeSource{routes: []string{"server 0", "server 1", "server 2"}}
	hb := newHub(t, src)
	k := hb.Join("lock:q:release")
	waitFor(t, "three subscriptions", func() bool {
		for _, id := range src.routes {
			if p := src.feed(id); p == nil || len(p.subscriptions()) != 1 {
				return false
			}
		}
		return true
	})
	for _, id := range src.routes {
		k.Drain()
		src.feed(id).publish("lock:q:release", "*")
		select {
		case <-k.Notify():
		case <-time.After(10 * time.Second):
			t.Fatalf("a release announced on %s did not wake the waiter", id)
		}
	}
	hb.Leave(k, true)
}

// A sharded feed whose node stops serving a channel's slot is replaced: the Source is
// told, and the channel is routed and subscribed again on a new connection.
func TestShardMoved(t *testing.T) {
	src := &fakeSource{sharded: true, routes: []string{"node a"}}
	hb := newHub(t, src)
	k := hb.Join("lock:s:release")
	k.AwaitSubscribed(context.Background(), time.Time{}, 10*time.Second)
	old := src.feed("node a")
	if subs := old.subscriptions(); !slices.Equal(subs, []string{"ssubscribe lock:s:release"}) {
		t.Fatalf("subscriptions %v, want one SSUBSCRIBE", subs)
	}
	old.in <- &redis.Subscription{Kind: "sunsubscribe", Channel: "lock:s:release"}
	waitFor(t, "a new feed", func() bool {
		p := src.feed("node a")
		return p != old && p != nil && len(p.subscriptions()) == 1
	})
	src.mu.Lock()
	moved := slices.Contains(src.refresh, ErrSlotMoved)
	src.mu.Unlock()
	if !moved {
		t.Error("the Source was not told that the slot moved")
	}
	if sub, _, _ := hb.State("lock:s:release"); !sub {
		waitFor(t, "the new subscription's confirmation", func() bool {
			sub, _, _ := hb.State("lock:s:release")
			return sub
		})
	}
	hb.Leave(k, true)
}

// A classic feed whose connection breaks marks its keys unconfirmed (notifications may
// have been lost); the keys are live again once resubscribed.
func TestBrokenClassicFeed(t *testing.T) {
	src := &fakeSource{}
	hb := newHub(t, src)
	k := hb.Join("lock:c:release")
	k.AwaitSubscribed(context.Background(), time.Time{}, 10*time.Second)
	ps := src.feed("")
	ps.in <- errors.New("connection reset by peer")
	waitFor(t, "the key unconfirmed", func() bool {
		sub, _, _ := hb.State("lock:c:release")
		return !sub
	})
	ps.in <- &redis.Subscription{Kind: "subscribe", Channel: "lock:c:release"}
	waitFor(t, "the key confirmed again", func() bool {
		sub, _, _ := hb.State("lock:c:release")
		return sub
	})
	hb.Leave(k, true)
}

// The gate admits one goroutine at a time, in turn, telling the next whether the one
// before took the lock; a wait for it ends with the deadline, the owner's closing, a
// deadlock's choice or the context.
func TestGate(t *testing.T) {
	src := &fakeSource{}
	hb := newHub(t, src)
	k := hb.Join("lock:g:release")
	ctx := context.Background()
	if err := k.Enter(ctx, time.Time{}, nil, nil); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	close(closed)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		want       error
		ctx        context.Context
		deadline   time.Time
		done, dead <-chan struct{}
	}{
		{ErrDeadline, ctx, time.Now().Add(time.Millisecond), nil, nil},
		{ErrClosed, ctx, time.Time{}, closed, nil},
		{ErrChosen, ctx, time.Time{}, nil, closed},
		{context.Canceled, cctx, time.Time{}, nil, nil},
	} {
		if err := k.Enter(c.ctx, c.deadline, c.done, c.dead); err != c.want {
			t.Errorf("Enter of a taken gate = %v, want %v", err, c.want)
		}
	}
	entered := make(chan bool)
	go func() {
		err := k.Enter(ctx, time.Time{}, nil, nil)
		entered <- err == nil && k.PredecessorAcquired()
		k.Exit(false)
	}()
	k.Exit(true)
	if !<-entered {
		t.Error("the next goroutine did not take the gate, told that the lock was taken")
	}
	hb.Leave(k, true)
}
