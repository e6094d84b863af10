package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
)

// The quorum scenarios run Redlock over independent servers: guardkit's quorum Locker
// (guard.NewQuorum) and redsync's mutex with one pool per server, side by side, with
// the single-server locks (raw, guardkit) on the first of the servers as the reference.

// quorumServers is the number of independent servers of the quorum scenarios.
const quorumServers = 3

// quorumReadyMark is the key by which a server tells guardkit's quorum Locker that its
// data set has served quorum locks (guard/internal/script/lua/gate.lua). The scenarios' servers are
// new and have granted nothing: marking them lets the runs start at once, where a
// restarted server would wait out its RestartDelay; the check itself still runs.
const quorumReadyMark = "guard:quorum:ready"

// startQuorumEnv starts quorumServers redis-servers and returns the env of the quorum
// scenarios, with base's durations and TTL, and the function that stops them.
func startQuorumEnv(base *env) (*env, func(), error) {
	var servers []*server
	stopAll := func() {
		for _, s := range servers {
			s.close()
		}
	}
	e := &env{dur: base.dur, ttl: base.ttl}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range quorumServers {
		s, err := startServer()
		if err != nil {
			stopAll()
			return nil, nil, err
		}
		servers = append(servers, s)
		e.quorum = append(e.quorum, s.addr)
		c := redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 1})
		e.primaries = append(e.primaries, c)
		if err := c.Set(ctx, quorumReadyMark, "1", 0).Err(); err != nil {
			closeClients(e.primaries)
			stopAll()
			return nil, nil, fmt.Errorf("bench: mark a quorum server ready: %w", err)
		}
	}
	e.addr = e.quorum[0]
	return e, func() {
		closeClients(e.primaries)
		stopAll()
	}, nil
}

// quorumClients is one go-redis client per server, all counted by one round-trip hook.
type quorumClients struct {
	cs []redis.UniversalClient
	rt rtCounter
}

func newQuorumClients(cfg libConfig, contextTimeout bool) (*quorumClients, error) {
	if len(cfg.quorum) == 0 {
		return nil, errors.New("bench: a quorum variant needs the quorum scenarios' servers")
	}
	q := &quorumClients{}
	for _, addr := range cfg.quorum {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: contextTimeout})
		c.AddHook(&q.rt)
		q.cs = append(q.cs, c)
	}
	return q, nil
}

func (q *quorumClients) RoundTrips() int64 { return q.rt.n.Load() }

func (q *quorumClients) Close() error {
	var errs []error
	for _, c := range q.cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// quorumGuard is guardkit's quorum Locker behind Lib.
type quorumGuard struct {
	*quorumClients
	g guardLib // the Locker's Lib methods (its goRedis unused)
}

func newGuardQuorum(cfg libConfig) (Lib, error) {
	q, err := newQuorumClients(cfg, true)
	if err != nil {
		return nil, err
	}
	l, err := guard.NewQuorum(q.cs, guard.TTL(cfg.ttl))
	if err != nil {
		q.Close()
		return nil, err
	}
	return &quorumGuard{quorumClients: q, g: guardLib{l: l}}, nil
}

func (g *quorumGuard) TryLock(ctx context.Context, key string) (Lease, error) {
	return g.g.TryLock(ctx, key)
}

func (g *quorumGuard) Lock(ctx context.Context, key string) (Lease, error) {
	return g.g.Lock(ctx, key)
}

func (g *quorumGuard) Close() error { return errors.Join(g.g.l.Close(), g.quorumClients.Close()) }

// quorumRedsync is redsync's mutex over one pool per server behind Lib.
type quorumRedsync struct {
	*quorumClients
	rs *redsyncLib
}

func newRedsyncQuorum(best bool) func(libConfig) (Lib, error) {
	return func(cfg libConfig) (Lib, error) {
		q, err := newQuorumClients(cfg, false)
		if err != nil {
			return nil, err
		}
		var pools []redsyncredis.Pool
		for _, c := range q.cs {
			pools = append(pools, redsyncgoredis.NewPool(c))
		}
		rs := &redsyncLib{rs: redsync.New(pools...), cfg: cfg}
		if best {
			rs.opts = []redsync.Option{redsync.WithExpiry(cfg.ttl), redsync.WithTries(1 << 30), redsync.WithRetryDelay(time.Millisecond)}
		}
		return &quorumRedsync{quorumClients: q, rs: rs}, nil
	}
}

func (r *quorumRedsync) TryLock(ctx context.Context, key string) (Lease, error) {
	return r.rs.TryLock(ctx, key)
}

func (r *quorumRedsync) Lock(ctx context.Context, key string) (Lease, error) {
	return r.rs.Lock(ctx, key)
}
