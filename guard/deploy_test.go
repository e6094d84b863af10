package guard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// The deployments the Cluster and Sentinel tests share (TestMain stops them). Their
// timeouts are short so that failovers finish in a few seconds.
var (
	nodeTimeout = time.Second
	cluster     = redistest.ShareCluster(redistest.ClusterNodeTimeout(nodeTimeout))
	downAfter   = time.Second
	sentinel    = redistest.ShareSentinel(redistest.SentinelDownAfter(downAfter))
)

// recoveryBound is how long after a deployment has recovered guard may take to be
// usable again: the "about a second", plus room for a loaded test machine.
const recoveryBound = 5 * time.Second

// keyOn returns a lock key whose Redis hash lives on primary p of cluster c.
func keyOn(t *testing.T, c *redistest.Cluster, p *redistest.Server, prefix string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if c.NodeForKey(lockName(k)) == p {
			return k
		}
	}
	t.Fatalf("no key with prefix %q on %s", prefix, p)
	return ""
}

// waitFor acquires key on l in the background with a backoff far beyond the test, so
// that only a release notification (or a lost holder's TTL) ends the wait. The channel
// receives the outcome and when it came.
type waitOutcome struct {
	lease *guard.Lease
	err   error
	at    time.Time
}

func waitFor(ctx context.Context, l *guard.Locker, key string) <-chan waitOutcome {
	out := make(chan waitOutcome, 1)
	go func() {
		le, err := l.Acquire(ctx, key, guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0))))
		out <- waitOutcome{le, err, time.Now()}
	}()
	return out
}

// shardSubscribers is how many sharded subscriptions node s has for key's channel.
func shardSubscribers(t *testing.T, s *redistest.Server, key string) int64 {
	t.Helper()
	c := s.Client(t)
	defer c.Close()
	ch := lockName(key) + ":release"
	v, err := c.Do(context.Background(), "PUBSUB", "SHARDNUMSUB", ch).Slice()
	if err != nil || len(v) != 2 {
		return -1
	}
	n, _ := v[1].(int64)
	return n
}

func mustWoken(t *testing.T, what string, out <-chan waitOutcome) waitOutcome {
	t.Helper()
	o := <-out
	if o.err != nil {
		t.Fatalf("%s: the waiter was not woken: %v", what, o.err)
	}
	return o
}

// TestClusterSteadyState: on every primary, a waiter in another Locker is woken by the
// release, and the notification is a sharded publish on the lock's own primary only.
func TestClusterSteadyState(t *testing.T) {
	c := cluster.Get(t)
	holder := lockerOn(t, c.Client(t))
	waiter := lockerOn(t, c.Client(t))
	ctx := ctxTimeout(t, 30*time.Second)
	for i, p := range c.Primaries() {
		key := keyOn(t, c, p, fmt.Sprintf("steady%d", i))
		le := mustAcquire(t, holder, ctx, key)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out := waitFor(wctx, waiter, key)
		waitUntil(t, 5*time.Second, "the waiter's sharded subscription", func() bool { return shardSubscribers(t, p, key) == 1 })
		before := make(map[*redistest.Server]int64)
		for _, q := range c.Primaries() {
			before[q] = q.CommandCalls(t)["spublish"]
		}
		mustRelease(t, le)
		o := mustWoken(t, "steady state", out)
		cancel()
		mustRelease(t, o.lease)
		for _, q := range c.Primaries() {
			got := q.CommandCalls(t)["spublish"] - before[q]
			want := int64(0)
			if q == p {
				want = 1
			}
			if got != want {
				t.Errorf("primary %s ran %d SPUBLISH for a release on %s, want %d", q, got, p, want)
			}
		}
	}
}

// TestClusterPlannedFailover: a held lease survives CLUSTER FAILOVER (renewed on the new
// primary), and a waiter whose subscription was on the old primary is still woken.
func TestClusterPlannedFailover(t *testing.T) {
	c := cluster.Get(t)
	holder := lockerOn(t, c.Client(t), guard.TTL(3*time.Second))
	waiter := lockerOn(t, c.Client(t))
	ctx := ctxTimeout(t, 60*time.Second)
	p := c.Primaries()[0]
	key := keyOn(t, c, p, "planned")
	le := mustAcquire(t, holder, ctx, key)
	out := waitFor(ctx, waiter, key)
	waitUntil(t, 5*time.Second, "the waiter's subscription", func() bool { return shardSubscribers(t, p, key) == 1 })

	took := c.Failover(t, c.ReplicasOf(p)[0])
	t.Logf("CLUSTER FAILOVER took %s", took)
	time.Sleep(2 * 3 * time.Second) // two TTLs: the lease lives only if renewed on the new primary
	if err := le.Err(); err != nil {
		t.Fatalf("the lease was lost across a planned failover: %v", err)
	}
	released := time.Now()
	mustRelease(t, le)
	o := mustWoken(t, "after a planned failover", out)
	t.Logf("waiter woken %s after the release", o.at.Sub(released))
	mustRelease(t, o.lease)
}

// TestClusterPrimaryKilled: a primary is killed. Wake-ups for keys of the healthy
// primaries keep coming; once the replica is promoted, fresh acquisitions, the held
// lease's renewal and release, and the waiter's wake-up on the dead primary's keys work
// again within recoveryBound; and nobody holds a lock while another owner does.
func TestClusterPrimaryKilled(t *testing.T) {
	c := cluster.Get(t)
	const ttl = 5 * time.Second
	holder := lockerOn(t, c.Client(t), guard.TTL(ttl))
	waiter := lockerOn(t, c.Client(t))
	fresh := lockerOn(t, c.Client(t))
	ctx := ctxTimeout(t, 90*time.Second)
	victim, healthy := c.Primaries()[0], c.Primaries()[1]
	deadKey, liveKey := keyOn(t, c, victim, "dead"), keyOn(t, c, healthy, "live")
	deadLease := mustAcquire(t, holder, ctx, deadKey)
	liveLease := mustAcquire(t, holder, ctx, liveKey)
	deadOut, liveOut := waitFor(ctx, waiter, deadKey), waitFor(ctx, waiter, liveKey)
	waitUntil(t, 5*time.Second, "both waiters' subscriptions", func() bool {
		return shardSubscribers(t, victim, deadKey) == 1 && shardSubscribers(t, healthy, liveKey) == 1
	})

	victim.Kill(t)
	killed := time.Now()
	// A healthy primary's wake-up does not depend on the dead node.
	mustRelease(t, liveLease)
	o := mustWoken(t, "key on a healthy primary", liveOut)
	t.Logf("healthy primary's waiter woken %s after the kill", o.at.Sub(killed))
	mustRelease(t, o.lease)

	promoted := c.WaitHealthy(t, 30*time.Second)
	t.Logf("replica promoted %s after the kill", promoted)
	recovered := time.Now()
	var usable time.Duration
	for {
		le, err := fresh.TryAcquire(ctx, keyOn(t, c, c.NodeForKey(lockName(deadKey)), "fresh"))
		if err == nil {
			usable = time.Since(recovered)
			mustRelease(t, le)
			break
		}
		if !errors.Is(err, guard.ErrUnavailable) && !errors.Is(err, guard.ErrLocked) {
			t.Fatalf("fresh acquisition on the dead primary's slots: %v", err)
		}
		if time.Since(recovered) > recoveryBound {
			t.Fatalf("fresh acquisitions on the dead primary's slots still fail %s after the promotion: %v", recoveryBound, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("fresh acquisitions on the dead primary's slots work %s after the promotion", usable)

	// The held lease was renewed on the promoted replica, or it was lost; never both
	// held and granted to the waiter.
	time.Sleep(ttl) // beyond the validity the lease had at the kill
	releasedAt, kept := time.Now(), deadLease.Err() == nil
	if !kept {
		t.Logf("held lease lost across the kill: %v", deadLease.Err())
	} else {
		if err := deadLease.Release(context.Background()); err != nil {
			t.Fatalf("releasing the held lease after recovery: %v", err)
		}
		t.Logf("held lease kept and renewed on the promoted replica")
	}
	select {
	case o := <-deadOut:
		if o.err != nil {
			t.Fatalf("the dead primary's waiter: %v", o.err)
		}
		if kept && o.at.Before(releasedAt) {
			t.Fatalf("the waiter got the lock at %s while the holder still held it", o.at)
		}
		t.Logf("the dead primary's waiter got the lock %s after the release", o.at.Sub(releasedAt))
		mustRelease(t, o.lease)
	case <-time.After(recoveryBound + ttl):
		t.Fatalf("the dead primary's waiter was not woken within %s of the release", recoveryBound+ttl)
	}
}

// TestSentinelFailover: a held lease survives SENTINEL FAILOVER, a waiter is woken after
// it, and after the primary is killed the Locker works again soon after the sentinels
// agree on a new one.
func TestSentinelFailover(t *testing.T) {
	g := sentinel.Get(t)
	const ttl = 3 * time.Second
	holder := lockerOn(t, g.Client(t), guard.TTL(ttl))
	waiter := lockerOn(t, g.Client(t))
	ctx := ctxTimeout(t, 90*time.Second)

	le := mustAcquire(t, holder, ctx, "sentinel")
	out := waitFor(ctx, waiter, "sentinel")
	g.Failover(t)
	time.Sleep(2 * ttl)
	if err := le.Err(); err != nil {
		t.Fatalf("the lease was lost across SENTINEL FAILOVER: %v", err)
	}
	mustRelease(t, le)
	mustRelease(t, mustWoken(t, "after SENTINEL FAILOVER", out).lease)

	old := g.Primary()
	old.Kill(t)
	_, took := g.WaitNewPrimary(t, old, 30*time.Second)
	t.Logf("new primary agreed %s after the kill", took)
	recovered := time.Now()
	for {
		le, err := holder.TryAcquire(ctx, "sentinel-fresh")
		if err == nil {
			t.Logf("acquisitions work %s after the sentinels agreed", time.Since(recovered))
			mustRelease(t, le)
			break
		}
		if time.Since(recovered) > recoveryBound {
			t.Fatalf("acquisitions still fail %s after the sentinels agreed: %v", recoveryBound, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSyncReplicas: with SyncReplicas a grant counts once a replica acknowledged it; with
// the replica paused the grant is undone and the call fails with a *RedisError saying that
// too few replicas acknowledged it, leaving
// the lock free. On Cluster the WAIT goes to the lock's own primary.
func TestSyncReplicas(t *testing.T) {
	t.Run("Sentinel", func(t *testing.T) {
		g := sentinel.Get(t)
		l := lockerOn(t, g.Client(t), guard.SyncReplicas(1, 300*time.Millisecond))
		plain := lockerOn(t, g.Client(t))
		checkSyncReplicas(t, l, plain, g.Replicas()[0], "sync")
	})
	t.Run("Cluster", func(t *testing.T) {
		c := cluster.Get(t)
		l := lockerOn(t, c.Client(t), guard.SyncReplicas(1, 300*time.Millisecond))
		plain := lockerOn(t, c.Client(t))
		p := c.Primaries()[1]
		checkSyncReplicas(t, l, plain, c.ReplicasOf(p)[0], keyOn(t, c, p, "sync"))
	})
}

func checkSyncReplicas(t *testing.T, l, plain *guard.Locker, replica *redistest.Server, key string) {
	t.Helper()
	ctx := ctxTimeout(t, 20*time.Second)
	mustRelease(t, mustAcquire(t, l, ctx, key))
	replica.Pause(t)
	// Too few acknowledgements fail the call at once, whatever its budget (the grant is
	// undone): they are not an outage to wait out.
	_, err := l.Acquire(ctx, key, guard.Retry(guard.MaxWait(time.Minute, guard.Fixed(100*time.Millisecond, 0))))
	_, tryErr := l.TryAcquire(ctx, key)
	replica.Resume(t)
	for _, err := range []error{err, tryErr} {
		var re *guard.RedisError
		want, acked, renewal, ok := guard.ReplicaShortfall(err)
		if !errors.As(err, &re) || re.Op != "acquire" || !errors.Is(err, guard.ErrUnavailable) || !ok || want != 1 || acked != 0 || renewal {
			t.Fatalf("acquire with the replica paused = %v, want a *RedisError for a replica shortfall (0 of 1)", err)
		}
	}
	le, err := plain.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("the unacknowledged grant was not undone: %v", err)
	}
	mustRelease(t, le)
}

// TestSyncReplicasRenewal: with SyncReplicas, a lease's validity only extends from
// renewals the replicas acknowledged. While the replica stalls the lease keeps renewing on
// the primary but is lost at the end of its acknowledged validity, with a renewal's replica
// shortfall (a *RedisError) as the cause; a lease without SyncReplicas on the same primary is untouched.
func TestSyncReplicasRenewal(t *testing.T) {
	t.Run("Sentinel", func(t *testing.T) {
		g := sentinel.Get(t)
		checkSyncedRenewal(t, g.Client(t), g.Replicas()[0], "renew", "renew-plain")
	})
	t.Run("Cluster", func(t *testing.T) {
		c := cluster.Get(t)
		p := c.Primaries()[2]
		checkSyncedRenewal(t, c.Client(t), c.ReplicasOf(p)[0], keyOn(t, c, p, "renew"), keyOn(t, c, p, "renew-plain"))
	})
}

func checkSyncedRenewal(t *testing.T, client redis.UniversalClient, replica *redistest.Server, key, plainKey string) {
	t.Helper()
	const ttl = time.Second
	ctx := ctxTimeout(t, 30*time.Second)
	l := lockerOn(t, client, guard.TTL(ttl), guard.SyncReplicas(1, 100*time.Millisecond))
	plain := lockerOn(t, client, guard.TTL(ttl))
	le := mustAcquire(t, l, ctx, key)
	pl := mustAcquire(t, plain, ctx, plainKey)
	// Acknowledged renewals keep the lease past its first TTL.
	time.Sleep(2 * ttl)
	if err := le.Err(); err != nil {
		t.Fatalf("lease lost with the replica healthy: %v", err)
	}
	replica.Pause(t)
	paused := time.Now()
	select {
	case <-le.Context().Done():
	case <-time.After(3 * ttl):
		replica.Resume(t)
		t.Fatalf("lease still valid %s after the replica stopped acknowledging (TTL %s); valid until %s",
			time.Since(paused), ttl, time.Until(le.ValidUntil()))
	}
	lost := time.Since(paused)
	replica.Resume(t)
	err := le.Err()
	var re *guard.RedisError
	want, _, renewal, ok := guard.ReplicaShortfall(err)
	if !errors.Is(err, guard.ErrLeaseLost) || !errors.As(err, &re) || re.Op != "renew" || !ok || !renewal || want != 1 {
		t.Fatalf("lease ended with %v, want ErrLeaseLost caused by a renewal's replica shortfall", err)
	}
	if err := pl.Err(); err != nil {
		t.Fatalf("the lease without SyncReplicas was lost too: %v", err)
	}
	t.Logf("lease lost %s after the replica paused (TTL %s): %v", lost.Round(time.Millisecond), ttl, err)
	mustRelease(t, pl)
	_ = le.Release(ctx)
}

// TestClusterClassicPubSub runs the Redis 6.2 path on the Cluster (classic Pub/Sub, which
// the cluster bus broadcasts to every node): a waiter is woken by a release on another
// primary, and after the node its subscription sat on is killed, a waiter subscribes
// through a live node and is woken again.
func TestClusterClassicPubSub(t *testing.T) {
	c := cluster.Get(t)
	holder, waiter := lockerOn(t, c.Client(t)), lockerOn(t, c.Client(t))
	guard.ClassicPubSub(holder)
	guard.ClassicPubSub(waiter)
	ctx := ctxTimeout(t, 90*time.Second)

	key := keyOn(t, c, c.Primaries()[0], "classic")
	le := mustAcquire(t, holder, ctx, key)
	out := waitFor(ctx, waiter, key)
	var sub *redistest.Server
	waitUntil(t, 5*time.Second, "the waiter's classic subscription", func() bool {
		sub = classicSubscriber(t, c, key)
		return sub != nil
	})
	for _, n := range c.Nodes() {
		if got := shardSubscribers(t, n, key); got != 0 {
			t.Fatalf("node %s has %d sharded subscriptions for %q; the classic path makes none", n.Addr(), got, key)
		}
	}
	released := time.Now()
	mustRelease(t, le)
	first := mustWoken(t, "classic Pub/Sub", out)
	if d := first.at.Sub(released); d > recoveryBound {
		t.Fatalf("the waiter was woken %s after the release: the notification was lost (it retries once a minute)", d)
	}
	mustRelease(t, first.lease)

	sub.Kill(t)
	killed := time.Now()
	healthy := c.WaitHealthy(t, 30*time.Second)
	t.Logf("cluster healthy again %s after the kill", healthy.Round(time.Millisecond))
	var live *redistest.Server
	for _, p := range c.Primaries() {
		if p != sub {
			live = p
			break
		}
	}
	key2 := keyOn(t, c, live, "classic-after")
	var le2 *guard.Lease
	waitUntil(t, recoveryBound, "an acquisition after the recovery", func() bool {
		var err error
		le2, err = holder.TryAcquire(ctx, key2)
		return err == nil
	})
	out2 := waitFor(ctx, waiter, key2)
	var sub2 *redistest.Server
	waitUntil(t, recoveryBound, "the waiter's classic subscription on a live node", func() bool {
		sub2 = classicSubscriber(t, c, key2)
		return sub2 != nil
	})
	if sub2 == sub {
		t.Fatalf("the subscription is on the killed node %s", sub.Addr())
	}
	released = time.Now()
	mustRelease(t, le2)
	o := mustWoken(t, "classic Pub/Sub after the subscription's node was killed", out2)
	if d := o.at.Sub(released); d > recoveryBound {
		t.Fatalf("the waiter was woken %s after the release: the notification was lost (it retries once a minute)", d)
	}
	t.Logf("subscription moved from %s to %s; waiter woken %s after the kill", sub.Addr(), sub2.Addr(), o.at.Sub(killed).Round(time.Millisecond))
	mustRelease(t, o.lease)
}

// classicSubscriber returns the live node of c with a classic subscription to key's
// release channel, or nil.
func classicSubscriber(t *testing.T, c *redistest.Cluster, key string) *redistest.Server {
	t.Helper()
	ch := lockName(key) + ":release"
	for _, n := range c.Nodes() {
		if n.PID() == 0 {
			continue
		}
		cl := n.Client(t)
		v, err := cl.PubSubNumSub(context.Background(), ch).Result()
		_ = cl.Close()
		if err == nil && v[ch] > 0 {
			return n
		}
	}
	return nil
}

// TestClusterKinds runs the lock kinds on the Cluster, on a key of each primary: their
// four and five keys share one hash slot, and their wake-ups travel by sharded Pub/Sub
// (waiters here retry once a minute, so only a notification wakes them): a writer
// waiting for a reader, a fair waiter granted the lock at the release, a permit freed.
func TestClusterKinds(t *testing.T) {
	c := cluster.Get(t)
	holder, waiter := lockerOn(t, c.Client(t)), lockerOn(t, c.Client(t))
	ctx := ctxTimeout(t, 60*time.Second)
	slow := guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0)))
	for i, p := range c.Primaries() {
		for _, k := range []struct {
			name       string
			hold, wait guard.Option
		}{
			{"rw", guard.Read(), guard.Write()},
			{"fair", guard.Fair(), guard.Fair()},
			{"sem", guard.Permits(1), guard.Permits(1)},
		} {
			key := keyOn(t, c, p, fmt.Sprintf("kinds-%s-%d", k.name, i))
			le := mustAcquire(t, holder, ctx, key, k.hold)
			out := make(chan waitOutcome, 1)
			go func() {
				got, err := waiter.Acquire(ctx, key, k.wait, slow)
				out <- waitOutcome{got, err, time.Now()}
			}()
			waitUntil(t, 5*time.Second, "the waiter to queue", func() bool {
				n, _ := c.NodeForKey(lockName(key)).Client(t).Exists(ctx, lockName(key)+":"+k.name+":queue", lockName(key)+":fair:owners").Result()
				return n > 0
			})
			time.Sleep(100 * time.Millisecond) // let the waiter's sharded subscription settle
			released := time.Now()
			mustRelease(t, le)
			o := mustWoken(t, k.name+" on "+p.Addr(), out)
			if d := o.at.Sub(released); d > recoveryBound {
				t.Fatalf("%s on %s: the waiter was woken %s after the release", k.name, p.Addr(), d)
			}
			mustRelease(t, o.lease)
		}
	}
}

// TestWaiterRidesOutFailover: a waiter with budget left on a key of a killed primary
// waits the failover out as it waits out a holder, and is granted the lock once a
// replica is promoted — on a Cluster and under Sentinel.
func TestWaiterRidesOutFailover(t *testing.T) {
	t.Run("Cluster", func(t *testing.T) {
		c := cluster.Get(t)
		victim := c.Primaries()[0]
		key := keyOn(t, c, victim, "ride")
		rideOut(t, lockerOn(t, c.Client(t), guard.TTL(2*time.Second)), lockerOn(t, c.Client(t)), key, func() {
			victim.Kill(t)
			t.Logf("replica promoted %s after the kill", c.WaitHealthy(t, 30*time.Second))
		})
	})
	t.Run("Sentinel", func(t *testing.T) {
		g := sentinel.Get(t)
		rideOut(t, lockerOn(t, g.Client(t), guard.TTL(2*time.Second)), lockerOn(t, g.Client(t)), "ride", func() {
			old := g.Primary()
			old.Kill(t)
			_, took := g.WaitNewPrimary(t, old, 30*time.Second)
			t.Logf("new primary agreed %s after the kill", took)
		})
	})
}

// rideOut holds key on holder while a waiter on waiter queues for it, kills the key's
// primary (kill returns once a new one serves), and checks that the waiter, whose budget
// outlasts the failover, is granted the lock rather than giving up at the first refused
// connection.
func rideOut(t *testing.T, holder, waiter *guard.Locker, key string, kill func()) {
	t.Helper()
	ctx := ctxTimeout(t, 90*time.Second)
	le := mustAcquire(t, holder, ctx, key)
	out := make(chan waitOutcome, 1)
	go func() {
		le, err := waiter.Acquire(ctx, key, guard.Retry(guard.MaxWait(45*time.Second, guard.Fixed(100*time.Millisecond, 50*time.Millisecond))))
		out <- waitOutcome{le, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // the waiter found the lock busy
	killed := time.Now()
	kill()
	// The holder gives the lock up when it can; a grant the promoted replica never
	// received is free already, and either way the TTL frees it.
	_ = le.Release(context.Background())
	o := <-out
	if o.err != nil {
		t.Fatalf("the waiter gave up %s after the kill: %v", o.at.Sub(killed), o.err)
	}
	t.Logf("the waiter was granted the lock %s after the kill", o.at.Sub(killed))
	mustRelease(t, o.lease)
}

// TestClusterFeedsBounded: a process waiting on many keys of a Redis 7 Cluster, spread
// over every primary and thousands of hash slots, reads their release notifications from
// at most one sharded Pub/Sub connection per primary — and is still woken by each
// release. GUARDKIT_WAITED_KEYS sets how many keys (default 2,000); the connection counts
// and the nodes' memory are logged.
func TestClusterFeedsBounded(t *testing.T) {
	n := envInt("GUARDKIT_WAITED_KEYS", 2000)
	c := cluster.Get(t)
	holder := lockerOn(t, c.Client(t), guard.TTL(time.Minute))
	waiter := lockerOn(t, c.Client(t))
	ctx := ctxTimeout(t, 5*time.Minute)
	keys := make([]string, n)
	leases := make([]*guard.Lease, n)
	parallel(t, n, func(i int) error {
		keys[i] = fmt.Sprintf("wide:%d", i)
		le, err := holder.TryAcquire(ctx, keys[i])
		leases[i] = le
		return err
	})
	memory := func() (total int64) {
		for _, p := range c.Primaries() {
			total += p.Stat(t, "used_memory")
		}
		return total
	}
	before := memory()
	outs := make([]<-chan waitOutcome, n)
	for i, k := range keys {
		outs[i] = waitFor(ctx, waiter, k)
	}
	slots := map[int]bool{}
	for _, k := range keys {
		slots[redistest.Slot(lockName(k))] = true
	}
	// Polled slowly: each poll lists every channel of every primary.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		total := int64(0)
		for _, p := range c.Primaries() {
			total += shardChannels(t, p)
		}
		if total >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d waited keys subscribed after 2 minutes", total, n)
		}
	}
	for _, p := range c.Primaries() {
		conns := pubsubClients(t, p)
		t.Logf("%s: %d sharded channels on %d Pub/Sub connections", p, shardChannels(t, p), conns)
		if conns > 1 {
			t.Fatalf("%s has %d Pub/Sub connections for %d waited keys over %d slots, want 1 per primary", p, conns, n, len(slots))
		}
	}
	t.Logf("%d waited keys over %d hash slots: the primaries' used_memory +%d B while subscribed", n, len(slots), memory()-before)
	parallel(t, n, func(i int) error { return leases[i].Release(ctx) })
	for i, out := range outs {
		mustRelease(t, mustWoken(t, keys[i], out).lease)
	}
}

// shardChannels is how many sharded channels node s has subscribers for.
func shardChannels(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	c := s.Client(t)
	defer c.Close()
	chs, _ := c.Do(context.Background(), "PUBSUB", "SHARDCHANNELS").StringSlice()
	return int64(len(chs))
}

// pubsubClients is how many Pub/Sub connections node s has.
func pubsubClients(t *testing.T, s *redistest.Server) int {
	t.Helper()
	c := s.Client(t)
	defer c.Close()
	list, _ := c.ClientList(context.Background()).Result()
	n := 0
	for _, line := range strings.Split(list, "\n") {
		// Sharded feeds only: a Locker that holds leases also listens for force
		// releases on one classic connection (forced.go), on whichever node.
		if strings.Contains(line, "flags=P") && !strings.Contains(line, " ssub=0 ") {
			n++
		}
	}
	return n
}
