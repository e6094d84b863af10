package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/guardkit/guardkit/guard"
)

// Lib is one lock library, configured one way, behind the interface every scenario
// drives. Implementations are safe for concurrent use.
type Lib interface {
	// TryLock makes one attempt; a lock held by someone else fails with errBusy.
	TryLock(ctx context.Context, key string) (Lease, error)
	// Lock waits for the lock until ctx ends. A library whose configured retry budget
	// ran out before ctx ended fails with errGaveUp.
	Lock(ctx context.Context, key string) (Lease, error)
	// RoundTrips is the number of client round trips counted by a go-redis hook so
	// far, or -1 when the library's client cannot be counted that way.
	RoundTrips() int64
	// Close releases the library's clients.
	Close() error
}

// Lease is one held lock.
type Lease interface {
	// Unlock releases the lock.
	Unlock(ctx context.Context) error
	// Lost reports whether the lease ended before Unlock: its renewal failed or its
	// context was cancelled by the library.
	Lost() bool
}

// Reenterer is a Lib whose locks are reentrant: Reenter acquires key again on behalf of
// outer's holder.
type Reenterer interface {
	Reenter(outer Lease, key string) (Lease, error)
}

var (
	errBusy   = errors.New("bench: lock busy")
	errGaveUp = errors.New("bench: retry budget exhausted")
)

// libConfig is what a scenario asks of a Lib.
type libConfig struct {
	addr string
	// cluster, when set, holds the seed addresses of a Redis Cluster: a go-redis adapter
	// then runs on a *redis.ClusterClient instead of addr.
	cluster []string
	// ttl is the lease time of the "best" configurations; "defaults" configurations
	// keep the library's own where it has one.
	ttl time.Duration
	// quorum, when set, holds the addresses of independent servers: the quorum variants
	// (quorum.go) run on one client per server, the others on addr.
	quorum []string
	// renew keeps held leases alive every ttl/3. Libraries without a watchdog get one
	// goroutine per lease in the adapter, which is how their users do it.
	renew bool
}

// variant is one row of the tables: a library in one configuration.
type variant struct {
	name   string // row label
	lib    string // library, for grouping
	config string // how it is configured, for the notes
	isLock bool   // false for the ceiling, which excludes nothing
	// replicated marks a variant that needs a primary with replicas: it fails on a
	// server without them.
	replicated bool
	// quorum marks a variant that needs the independent servers of the quorum scenarios.
	quorum bool
	// perWorker gives every contended worker its own instance (its own clients), the way
	// separate processes would run.
	perWorker bool
	// exclusive makes the read-write scenario's readers and writer take the exclusive
	// lock: the same work without sharing.
	exclusive bool
	// shared marks a variant whose locks several owners may hold at once (a read lock, a
	// semaphore): scenario kinds-uncontended only.
	shared bool
	new    func(libConfig) (Lib, error)
}

func variants() []variant {
	vs := []variant{
		{name: "raw", lib: "raw", isLock: true,
			config: "SET NX PX + Lua compare-and-delete; blocking polls every 1 ms; renewal: one goroutine per lease (Lua compare-and-pexpire)",
			new:    newRaw},
		{name: "guardkit", lib: "guardkit", isLock: true,
			config: "guard.New(client, guard.TTL(ttl)) on a client with ContextTimeoutEnabled; everything else default (waiters queued in process and in Redis, woken by release notifications, pipelined watchdog)",
			new:    newGuard},
		{name: "guardkit/exclusive", lib: "guardkit", isLock: true, exclusive: true,
			config: "as guardkit, but in the rw scenario readers and writer all take the exclusive lock: the same work without sharing",
			new:    newGuard},
		{name: "guardkit/read", lib: "guardkit", isLock: true, shared: true,
			config: "as guardkit, every lock the read mode of a read-write lock (guard.Read()); scenario kinds-uncontended",
			new:    newGuardKind(guard.Read())},
		{name: "guardkit/write", lib: "guardkit", isLock: true,
			config: "as guardkit, every lock the write mode of a read-write lock (guard.Write()); scenario kinds-uncontended",
			new:    newGuardKind(guard.Write())},
		{name: "guardkit/semaphore", lib: "guardkit", isLock: true, shared: true,
			config: fmt.Sprintf("as guardkit, every lock a semaphore of %d permits (guard.Permits(%d)); scenario kinds-uncontended", kindUncontendedPermits, kindUncontendedPermits),
			new:    newGuardKind(guard.Permits(kindUncontendedPermits))},
		{name: "guardkit/fair", lib: "guardkit", isLock: true,
			config: "as guardkit, every lock a fair lock (guard.Fair()); scenario kinds-uncontended",
			new:    newGuardKind(guard.Fair())},
		{name: "guardkit/set", lib: "guardkit", isLock: true,
			config: "as guardkit; scenario sets: the K keys taken as one lock with Locker.AcquireAll",
			new:    newGuard},
		{name: "guardkit/nested", lib: "guardkit", isLock: true,
			config: "as guardkit; scenario sets: the K keys taken by K nested TryAcquires in canonical order, released in reverse",
			new:    newGuard},
		{name: "guardkit/locker-per-worker", lib: "guardkit", isLock: true, perWorker: true,
			config: "as guardkit, but every contended worker has its own client and Locker, as separate processes would",
			new:    newGuard},
		{name: "guardkit/sync-replicas", lib: "guardkit", isLock: true, replicated: true,
			config: fmt.Sprintf("as guardkit, plus guard.SyncReplicas(%d, %s): an acquisition counts once WAIT confirms that %d replica has it; the acquire script and WAIT go in one pipeline to the lock's primary", syncReplicas.n, syncReplicas.timeout, syncReplicas.n),
			new: func(cfg libConfig) (Lib, error) {
				return newGuardWith(cfg, guard.SyncReplicas(syncReplicas.n, syncReplicas.timeout))
			}},
		{name: "guardkit/no-deadlock-detection", lib: "guardkit", isLock: true,
			config: "as guardkit, with guard.DeadlockDetection(0): no waiter looks for deadlocks (by default one that has waited 1s does), to show what detection costs",
			new: func(cfg libConfig) (Lib, error) {
				return newGuardWith(cfg, guard.DeadlockDetection(0))
			}},
		{name: "guardkit/autopipeline", lib: "guardkit", isLock: true,
			config: "as guardkit, on go-redis's auto-pipelining client (client.AutoPipeline()): first attempts and releases nobody in the process waits for join its batches, the calls of a handoff go out at once",
			new:    newGuardAutoPipelined},
		{name: "redsync", lib: "redsync", isLock: true,
			config: "best: WithExpiry(ttl), WithTries(2^30), WithRetryDelay(1ms); goredis v9 pool; renewal: one goroutine per lease (Extend)",
			new:    newRedsync(true)},
		{name: "redsync/defaults", lib: "redsync", isLock: true,
			config: "defaults: expiry 8s, 32 tries, retry delay rand(50ms, 250ms); an exhausted Lock is called again",
			new:    newRedsync(false)},
		{name: "redislock", lib: "redislock", isLock: true,
			config: "best: RetryStrategy LinearBackoff(1ms); renewal: one goroutine per lease (Refresh)",
			new:    newRedislock(func() redislock.RetryStrategy { return redislock.LinearBackoff(time.Millisecond) })},
		{name: "redislock/defaults", lib: "redislock", isLock: true,
			config: "defaults: NoRetry; the caller calls Obtain again at once until it succeeds",
			new:    newRedislock(nil)},
		{name: "rueidislock", lib: "rueidislock", isLock: true,
			config: "best: KeyMajority 1, NoLoopTracking, KeyValidity ttl, ExtendInterval ttl/3 (waiters woken by client-side-caching invalidations, built-in renewal)",
			new:    newRueidis(true)},
		{name: "rueidislock/defaults", lib: "rueidislock", isLock: true,
			config: "defaults: KeyMajority 2 (3 keys), KeyValidity 5s, ExtendInterval 2.5s, tracking without NOLOOP",
			new:    newRueidis(false)},
		{name: "guardkit/quorum", quorum: true, lib: "guardkit", isLock: true,
			config: "guard.NewQuorum(one client per server, guard.TTL(ttl)) over the independent servers of the quorum scenarios, clients with ContextTimeoutEnabled; the restart check on (RestartDelay = TTL; the fresh servers are marked ready before the runs)",
			new:    newGuardQuorum},
		{name: "redsync/quorum", quorum: true, lib: "redsync", isLock: true,
			config: "redsync.New(one goredis v9 pool per server) over the independent servers of the quorum scenarios; best: WithExpiry(ttl), WithTries(2^30), WithRetryDelay(1ms); renewal: one goroutine per lease (Extend)",
			new:    newRedsyncQuorum(true)},
		{name: "redsync/quorum-defaults", quorum: true, lib: "redsync", isLock: true,
			config: "as redsync/quorum with redsync's defaults: expiry 8s, 32 tries, retry delay rand(50ms, 250ms); an exhausted Lock is called again",
			new:    newRedsyncQuorum(false)},
		{name: "floor", lib: "floor", isLock: true,
			config: "not a library: the fewest Redis calls of an owner-checked, reentrant lock with fencing tokens, a Lua script each way (acquire: HMGET, INCR of a token counter, HSET, PEXPIRE; release: HGET, DEL) on a client with ContextTimeoutEnabled — without guardkit's retry safety, token clock floor, wake-up queue, renewal or leases",
			new:    newFloor},
		{name: "floor/autopipeline", lib: "floor", isLock: true,
			config: "not a library: the floor on go-redis's auto-pipelining client (client.AutoPipeline())",
			new:    newFloorAutoPipelined},
		{name: "sketch/packed", lib: "scripts", isLock: true,
			config: "not a library: a sketch of a layout guardkit does not ship, acquire.lua's and release.lua's contracts with the hold's owner, lease end, count and token packed into one hash field (bench/sketch.go: 16 fields read and written per pair against layout 3's 29), run as the scripts rows run (scenario guarantees)",
			new:    newSketch},
		{name: "sketch/commands", lib: "scripts",
			config: "not a lock: the packed sketch's common pair with nothing between its commands (the same commands and fields, values of the same sizes as constants), the commands' share of its time (scenario guarantees)",
			new:    newSketchCommands},
		{name: "scripts/commands", lib: "scripts",
			config: "not a lock: guardkit's own pair (the scripts row) with nothing between its commands — the commands acquire.lua and release.lua called on the scenario's path, recorded from the real scripts when the row is built (after 40 pairs, so that the release record has its steady size) and replayed with the recorded arguments as constants (bench/commands.go): what the layout's commands cost, the rest of the scripts row being the Lua work around them (scenario guarantees)",
			new:    newScriptsCommands},
		{name: "ceiling", lib: "ceiling",
			config: "not a lock: go-redis EVALSHA of `return 1` for each half of a pair, the round-trip limit",
			new:    newCeiling},
		{name: "ceiling/autopipeline", lib: "ceiling",
			config: "not a lock: the ceiling on go-redis's auto-pipelining client (client.AutoPipeline()), the limit of any library on that client",
			new:    newCeilingAutoPipelined},
	}
	for _, c := range guaranteeCuts {
		how := "as they are"
		if len(c.edits) > 0 {
			how = "without " + cutDescription(c.edits)
		}
		vs = append(vs, variant{name: c.name, lib: "scripts", isLock: true,
			config: "not a library: guardkit's acquire.lua and release.lua run directly on the raw row's client settings, " + how + " (scenario guarantees)",
			new:    newScriptsLib(c.edits)})
	}
	return vs
}

// cutDescription says what a guarantees variant's edits cut out.
func cutDescription(edits []scriptEdit) string {
	s := ""
	for i, e := range edits {
		if i > 0 {
			s += " and "
		}
		s += e.describe
	}
	return s
}

// rtCounter is a go-redis hook that counts round trips: one per command, one per
// pipeline. A new connection's handshake (HELLO, CLIENT SETINFO, CLIENT
// MAINT_NOTIFICATIONS), which go-redis also sends through the hooks, is not counted:
// it is a connection's, not a lock call's, and comes whenever a library opens one (a
// Pub/Sub connection, say, whose own traffic is not counted either).
type rtCounter struct{ n atomic.Int64 }

func (c *rtCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *rtCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *rtCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !handshake(cmds[0]) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// handshake reports whether cmd is one of the commands go-redis sends on a new
// connection before any of the caller's.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello":
		return true
	case "client":
		if args := cmd.Args(); len(args) > 1 {
			sub := strings.ToLower(fmt.Sprint(args[1]))
			return sub == "setinfo" || sub == "maint_notifications"
		}
	}
	return false
}

// goRedis is a go-redis client with its shipped defaults and a round-trip counter.
type goRedis struct {
	c  redis.UniversalClient
	rt rtCounter
}

// newGoRedis returns a client for cfg's server or cluster; contextTimeout sets
// ContextTimeoutEnabled. On a cluster the counter hooks every node's client, so that it
// counts what reaches the servers, including the commands a library sends to one node
// directly (guardkit's WAIT) and the client's own slot-map reloads.
func newGoRedis(cfg libConfig, contextTimeout bool) *goRedis {
	g := &goRedis{}
	if cfg.cluster != nil {
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 cfg.cluster,
			ContextTimeoutEnabled: contextTimeout,
			NewClient: func(o *redis.Options) *redis.Client {
				c := redis.NewClient(o)
				c.AddHook(&g.rt)
				return c
			},
		})
		// A cluster client loads its slot map and dials each node on first use. Doing it
		// here keeps that out of the measurements, which otherwise charge it to the
		// first run of every client (64 of them with a Locker per worker). An error
		// shows again in the first measured call.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
		cancel()
		g.c = cc
		return g
	}
	c := redis.NewClient(&redis.Options{Addr: cfg.addr, ContextTimeoutEnabled: contextTimeout})
	c.AddHook(&g.rt)
	g.c = c
	return g
}

func (g *goRedis) RoundTrips() int64 { return g.rt.n.Load() }
func (g *goRedis) Close() error      { return g.c.Close() }

// watchdog renews one lease every period until stopped, for libraries that have none.
type watchdog struct {
	stop chan struct{}
	done chan struct{}
	lost atomic.Bool
}

func startWatchdog(period time.Duration, refresh func(context.Context) error) *watchdog {
	w := &watchdog{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), period)
				err := refresh(ctx)
				cancel()
				if err != nil {
					w.lost.Store(true)
					return
				}
			}
		}
	}()
	return w
}

// halt stops the watchdog and waits for a renewal in flight.
func (w *watchdog) halt() {
	if w != nil {
		close(w.stop)
		<-w.done
	}
}

func (w *watchdog) isLost() bool { return w != nil && w.lost.Load() }

// sleepCtx sleeps d unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// --- raw: the physical reference ---

var (
	rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	rawRefresh = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)
)

type rawLib struct {
	*goRedis
	cfg    libConfig
	prefix string
	seq    atomic.Uint64
}

func newRaw(cfg libConfig) (Lib, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return &rawLib{goRedis: newGoRedis(cfg, false), cfg: cfg, prefix: base64.RawURLEncoding.EncodeToString(b[:]) + ":"}, nil
}

type rawLease struct {
	l        *rawLib
	key, tok string
	wd       *watchdog
}

func (l *rawLib) TryLock(ctx context.Context, key string) (Lease, error) {
	tok := l.prefix + strconv.FormatUint(l.seq.Add(1), 36)
	ok, err := l.c.SetNX(ctx, key, tok, l.cfg.ttl).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errBusy
	}
	le := &rawLease{l: l, key: key, tok: tok}
	if l.cfg.renew {
		ms := l.cfg.ttl.Milliseconds()
		le.wd = startWatchdog(l.cfg.ttl/3, func(ctx context.Context) error {
			n, err := rawRefresh.Run(ctx, l.c, []string{key}, tok, ms).Int64()
			if err == nil && n != 1 {
				err = errors.New("raw: lock lost")
			}
			return err
		})
	}
	return le, nil
}

func (l *rawLib) Lock(ctx context.Context, key string) (Lease, error) {
	return pollLock(ctx, key, l.TryLock)
}

// pollLock is a blocking Lock made of try: it tries again every millisecond until the
// lock is free or ctx ends.
func pollLock(ctx context.Context, key string, try func(context.Context, string) (Lease, error)) (Lease, error) {
	for {
		le, err := try(ctx, key)
		if !errors.Is(err, errBusy) {
			return le, err
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func (le *rawLease) Unlock(ctx context.Context) error {
	le.wd.halt()
	n, err := rawRelease.Run(ctx, le.l.c, []string{le.key}, le.tok).Int64()
	if err == nil && n != 1 {
		err = errors.New("raw: lock not held")
	}
	return err
}

func (le *rawLease) Lost() bool { return le.wd.isLost() }

// --- guardkit ---

type guardLib struct {
	*goRedis
	l   *guard.Locker
	acq []guard.Option // given to every acquisition: the lock's kind
}

func newGuard(cfg libConfig) (Lib, error) { return newGuardWith(cfg) }

// newGuardWith builds the guardkit adapter with extra options for guard.New.
func newGuardWith(cfg libConfig, opts ...guard.Option) (Lib, error) {
	// ContextTimeoutEnabled is guardkit's recommended client setting: the client then
	// enforces context deadlines itself and guard makes its calls inline.
	g := newGoRedis(cfg, true)
	l, err := guard.New(g.c, append([]guard.Option{guard.TTL(cfg.ttl)}, opts...)...)
	if err != nil {
		g.Close()
		return nil, err
	}
	return &guardLib{goRedis: g, l: l}, nil
}

// newGuardKind is newGuard taking every lock as the kind opt makes it (guard.Read(), …).
func newGuardKind(opt guard.Option) func(libConfig) (Lib, error) {
	return func(cfg libConfig) (Lib, error) {
		l, err := newGuard(cfg)
		if err != nil {
			return nil, err
		}
		g := l.(*guardLib)
		g.acq = []guard.Option{opt}
		return g, nil
	}
}

// newGuardAutoPipelined is newGuard on go-redis's auto-pipelining face of the client.
func newGuardAutoPipelined(cfg libConfig) (Lib, error) {
	g := &goRedis{c: redis.NewClient(&redis.Options{Addr: cfg.addr, ContextTimeoutEnabled: true})}
	g.c.AddHook(&g.rt)
	ap, err := g.c.AutoPipeline()
	if err == nil {
		var l *guard.Locker
		if l, err = guard.New(ap, guard.TTL(cfg.ttl)); err == nil {
			return &guardLib{goRedis: g, l: l}, nil
		}
	}
	g.Close() // closes the auto-pipeliner too
	return nil, err
}

type guardLease struct{ le *guard.Lease }

func (l *guardLib) TryLock(ctx context.Context, key string) (Lease, error) {
	le, err := l.l.TryAcquire(ctx, key, l.acq...)
	if errors.Is(err, guard.ErrLocked) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return guardLease{le}, nil
}

func (l *guardLib) Lock(ctx context.Context, key string) (Lease, error) {
	le, err := l.l.Acquire(ctx, key, l.acq...)
	if err != nil {
		return nil, err
	}
	return guardLease{le}, nil
}

func (l *guardLib) Reenter(outer Lease, key string) (Lease, error) {
	le, err := l.l.Acquire(outer.(guardLease).le.Context(), key, l.acq...)
	if err != nil {
		return nil, err
	}
	if !le.Reentrant() {
		_ = le.Release(context.Background())
		return nil, errors.New("guardkit: nested acquisition was not reentrant")
	}
	return guardLease{le}, nil
}

func (l *guardLib) Close() error {
	return errors.Join(l.l.Close(), l.goRedis.Close())
}

func (le guardLease) Unlock(ctx context.Context) error { return le.le.Release(ctx) }
func (le guardLease) Lost() bool                       { return le.le.Err() != nil }

// --- redsync ---

type redsyncLib struct {
	*goRedis
	rs   *redsync.Redsync
	opts []redsync.Option
	cfg  libConfig
}

func newRedsync(best bool) func(libConfig) (Lib, error) {
	return func(cfg libConfig) (Lib, error) {
		g := newGoRedis(cfg, false)
		l := &redsyncLib{goRedis: g, rs: redsync.New(redsyncgoredis.NewPool(g.c)), cfg: cfg}
		if best {
			l.opts = []redsync.Option{redsync.WithExpiry(cfg.ttl), redsync.WithTries(1 << 30), redsync.WithRetryDelay(time.Millisecond)}
		}
		return l, nil
	}
}

type redsyncLease struct {
	m  *redsync.Mutex
	wd *watchdog
}

func (l *redsyncLib) lease(m *redsync.Mutex) Lease {
	le := &redsyncLease{m: m}
	if l.cfg.renew {
		le.wd = startWatchdog(l.cfg.ttl/3, func(ctx context.Context) error {
			ok, err := m.ExtendContext(ctx)
			if err == nil && !ok {
				err = redsync.ErrExtendFailed
			}
			return err
		})
	}
	return le
}

func (l *redsyncLib) TryLock(ctx context.Context, key string) (Lease, error) {
	m := l.rs.NewMutex(key, l.opts...)
	if err := m.TryLockContext(ctx); err != nil {
		if isRedsyncBusy(err) {
			return nil, errBusy
		}
		return nil, err
	}
	return l.lease(m), nil
}

func (l *redsyncLib) Lock(ctx context.Context, key string) (Lease, error) {
	m := l.rs.NewMutex(key, l.opts...)
	if err := m.LockContext(ctx); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if isRedsyncBusy(err) {
			return nil, errGaveUp
		}
		return nil, err
	}
	return l.lease(m), nil
}

func isRedsyncBusy(err error) bool {
	var taken *redsync.ErrTaken
	return errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed)
}

func (le *redsyncLease) Unlock(ctx context.Context) error {
	le.wd.halt()
	ok, err := le.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock failed")
	}
	return err
}

func (le *redsyncLease) Lost() bool { return le.wd.isLost() }

// --- redislock ---

type redislockLib struct {
	*goRedis
	rl       *redislock.Client
	cfg      libConfig
	strategy func() redislock.RetryStrategy // nil: the default, NoRetry
}

func newRedislock(strategy func() redislock.RetryStrategy) func(libConfig) (Lib, error) {
	return func(cfg libConfig) (Lib, error) {
		g := newGoRedis(cfg, false)
		return &redislockLib{goRedis: g, rl: redislock.New(g.c), cfg: cfg, strategy: strategy}, nil
	}
}

type redislockLease struct {
	lk *redislock.Lock
	wd *watchdog
}

func (l *redislockLib) lease(lk *redislock.Lock) Lease {
	le := &redislockLease{lk: lk}
	if l.cfg.renew {
		le.wd = startWatchdog(l.cfg.ttl/3, func(ctx context.Context) error { return lk.Refresh(ctx, l.cfg.ttl, nil) })
	}
	return le
}

func (l *redislockLib) TryLock(ctx context.Context, key string) (Lease, error) {
	lk, err := l.rl.Obtain(ctx, key, l.cfg.ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return l.lease(lk), nil
}

func (l *redislockLib) Lock(ctx context.Context, key string) (Lease, error) {
	var opt *redislock.Options
	if l.strategy != nil {
		opt = &redislock.Options{RetryStrategy: l.strategy()} // strategies keep per-call state
	}
	for {
		lk, err := l.rl.Obtain(ctx, key, l.cfg.ttl, opt)
		if errors.Is(err, redislock.ErrNotObtained) && ctx.Err() == nil {
			continue // the default strategy makes one attempt: the caller tries again
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
		return l.lease(lk), nil
	}
}

func (le *redislockLease) Unlock(ctx context.Context) error {
	le.wd.halt()
	return le.lk.Release(ctx)
}

func (le *redislockLease) Lost() bool { return le.wd.isLost() }

// --- rueidislock ---

type rueidisLib struct {
	l rueidislock.Locker
}

func newRueidis(best bool) func(libConfig) (Lib, error) {
	return func(cfg libConfig) (Lib, error) {
		opt := rueidislock.LockerOption{ClientOption: rueidis.ClientOption{InitAddress: []string{cfg.addr}}}
		if best {
			opt.KeyMajority = 1
			opt.NoLoopTracking = true
			opt.KeyValidity = cfg.ttl
			opt.ExtendInterval = cfg.ttl / 3
		}
		l, err := rueidislock.NewLocker(opt)
		if err != nil {
			return nil, fmt.Errorf("rueidislock: %w", err)
		}
		return &rueidisLib{l: l}, nil
	}
}

type rueidisLease struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func (l *rueidisLib) TryLock(ctx context.Context, key string) (Lease, error) {
	c, cancel, err := l.l.TryWithContext(ctx, key)
	if errors.Is(err, rueidislock.ErrNotLocked) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return &rueidisLease{ctx: c, cancel: cancel}, nil
}

func (l *rueidisLib) Lock(ctx context.Context, key string) (Lease, error) {
	c, cancel, err := l.l.WithContext(ctx, key)
	if err != nil {
		return nil, err
	}
	return &rueidisLease{ctx: c, cancel: cancel}, nil
}

func (l *rueidisLib) RoundTrips() int64 { return -1 }
func (l *rueidisLib) Close() error      { l.l.Close(); return nil }

// Unlock cancels the lock's context; rueidislock deletes its keys before the cancel
// function returns.
func (le *rueidisLease) Unlock(context.Context) error {
	if le.ctx.Err() != nil {
		le.cancel()
		return errors.New("rueidislock: lock lost before unlock")
	}
	le.cancel()
	return nil
}

func (le *rueidisLease) Lost() bool { return le.ctx.Err() != nil }

// --- floor: the least script pair of a reentrant, owner-checked, fenced lock ---

// floorAcquire takes a free lock (a hash: owner = hold count, #t = token) with a token one
// above the key's counter, reenters the owner's hold, or answers -1 when another owner
// holds it. Nothing else: no nonce (a retried call counts a hold twice), no clock floor (a
// counter lost with the server's data starts again at 1), no queue.
var floorAcquire = redis.NewScript(`local v = redis.call('HMGET', KEYS[1], ARGV[1], '#t')
if v[1] then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(v[2])
end
if v[2] then return -1 end
local t = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], 1, '#t', t)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return t`)

// floorRelease drops one of the owner's holds and deletes the lock at the last: 1 freed,
// 2 still held, 0 not the owner's (no nonce: a retried release reports 0).
var floorRelease = redis.NewScript(`local n = redis.call('HGET', KEYS[1], ARGV[1])
if not n then return 0 end
if n ~= '1' then
  redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  return 2
end
redis.call('DEL', KEYS[1])
return 1`)

type floorLib struct {
	*goRedis
	s           redis.Scripter // the client, or its auto-pipelining face
	prefix, ttl string
	seq         *atomic.Uint64
}

// newFloor builds the floor on the raw row's client settings, with owners made as raw
// makes its tokens.
func newFloor(cfg libConfig) (Lib, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	g := newGoRedis(cfg, false)
	return floorLib{goRedis: g, s: g.c, prefix: base64.RawURLEncoding.EncodeToString(b[:]) + ":",
		ttl: strconv.FormatInt(cfg.ttl.Milliseconds(), 10), seq: new(atomic.Uint64)}, nil
}

// newFloorAutoPipelined is newFloor on go-redis's auto-pipelining face of the client.
func newFloorAutoPipelined(cfg libConfig) (Lib, error) {
	l, err := newFloor(cfg)
	if err != nil {
		return nil, err
	}
	f := l.(floorLib)
	if f.s, err = autoPipelined(f.goRedis); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil // closing the client closes the auto-pipeliner too
}

type floorLease struct {
	s     redis.Scripter
	keys  []string
	owner string
}

func (l floorLib) TryLock(ctx context.Context, key string) (Lease, error) {
	le := &floorLease{s: l.s, keys: []string{key, key + ":t"}, owner: l.prefix + strconv.FormatUint(l.seq.Add(1), 36)}
	t, err := floorAcquire.Run(ctx, l.s, le.keys, le.owner, l.ttl).Int64()
	if err != nil {
		return nil, err
	}
	if t < 0 {
		return nil, errBusy
	}
	return le, nil
}

// Lock polls every millisecond, as raw does.
func (l floorLib) Lock(ctx context.Context, key string) (Lease, error) {
	return pollLock(ctx, key, l.TryLock)
}

func (le *floorLease) Unlock(ctx context.Context) error {
	n, err := floorRelease.Run(ctx, le.s, le.keys[:1], le.owner).Int64()
	if err == nil && n != 1 {
		err = errors.New("floor: lock not held")
	}
	return err
}

func (le *floorLease) Lost() bool { return false }

// --- ceiling: two trivial round trips, no lock ---

var trivial = redis.NewScript(`return 1`)

type ceilingLib struct {
	*goRedis
	s redis.Scripter // the client, or its auto-pipelining face
}

func newCeiling(cfg libConfig) (Lib, error) {
	g := newGoRedis(cfg, false)
	return ceilingLib{g, g.c}, nil
}

// newCeilingAutoPipelined is newCeiling on go-redis's auto-pipelining face of the client.
func newCeilingAutoPipelined(cfg libConfig) (Lib, error) {
	g := newGoRedis(cfg, false)
	ap, err := autoPipelined(g)
	if err != nil {
		g.Close()
		return nil, err
	}
	return ceilingLib{g, ap}, nil // closing the client closes the auto-pipeliner too
}

// autoPipelined returns the auto-pipelining face of g's client, a single server's.
func autoPipelined(g *goRedis) (redis.Scripter, error) {
	c, ok := g.c.(*redis.Client)
	if !ok {
		return nil, errors.New("auto-pipelining: needs a single server's client")
	}
	return c.AutoPipeline()
}

type ceilingLease struct{ s redis.Scripter }

func (l ceilingLib) TryLock(ctx context.Context, key string) (Lease, error) {
	if err := trivial.Run(ctx, l.s, []string{key}).Err(); err != nil {
		return nil, err
	}
	return ceilingLease{l.s}, nil
}

func (l ceilingLib) Lock(ctx context.Context, key string) (Lease, error) { return l.TryLock(ctx, key) }

func (le ceilingLease) Unlock(ctx context.Context) error {
	return trivial.Run(ctx, le.s, []string{"x"}).Err()
}

func (le ceilingLease) Lost() bool { return false }

// pool runs f(i) for i in [0, n) on w goroutines and returns the first error.
func pool(n, w int, f func(i int) error) error {
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range min(w, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errOnce.Do(func() { first = err })
					next.Store(math.MaxInt32)
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
