package guard

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/watchdog"
	"github.com/redis/go-redis/v9"
)

// newWatchdog returns l's watchdog: one goroutine, started when the first lease is held
// and ended a little after none is, that renews every due lease in one pipelined round
// trip (see package watchdog) through sendRenewals and tells each lease the outcome
// through reportRenewals.
func newWatchdog(l *Locker) *watchdog.Dog[*held] {
	return watchdog.New(watchdog.Config[*held]{
		Interval: func(h *held) time.Duration { return h.s.renewInterval() },
		Send:     l.sendRenewals,
		Report:   l.reportRenewals,
		Busy:     l.listenForce,
	})
}

// reportRenewals tells each live lease of a batch, and telemetry, how its renewal went:
// renewed (its validity moves on), lost, or failed for now.
func (l *Locker) reportRenewals(batch []*held, live []bool, sent time.Time, res []watchdog.Result) {
	for i, h := range batch {
		if !live[i] {
			continue // released meanwhile
		}
		switch r := res[i]; {
		case r.Lost:
			l.tel.renewed(h, renewLost, nil)
			l.lose(h, "lock deleted or taken by another owner", nil)
		case r.Err != nil:
			l.tel.renewed(h, renewFailed, r.Err)
			h.renewFailed(r.Err)
		case r.TTL > 0:
			h.renewed(sent, r.TTL)
			l.tel.renewed(h, renewOK, nil)
		}
	}
}

var errNotOwner = &LeaseLostError{Reason: "not the owner"}

// sendRenewals renews batch in one pipeline, or, for leases with SyncReplicas, one
// pipeline per primary that ends with a WAIT, the pipelines running at once. For each
// lease it returns the TTL it asked for (0 when MaxHold allows no more renewal, in which
// case nothing was sent for it) and its error: nil, errNotOwner (Lost), or a *RedisError
// (failed, or renewed but too few replicas acknowledged it in time: a *replicaError).
func (l *Locker) sendRenewals(batch []*held, sent time.Time) []watchdog.Result {
	errs := make([]error, len(batch))
	ttls, timeout := renewTTLs(batch, sent)
	l.st.renew(timeout, batch, ttls, errs)
	return renewResults(errs, ttls)
}

// renewResults pairs each lease's error and TTL as the watchdog takes them.
func renewResults(errs []error, ttls []time.Duration) []watchdog.Result {
	res := make([]watchdog.Result, len(errs))
	for i, err := range errs {
		res[i] = watchdog.Result{TTL: ttls[i], Err: err, Lost: err == errNotOwner}
	}
	return res
}

// renewTTLs returns the TTL each lease of batch asks for, cut to what MaxHold leaves it
// from sent, and the shortest TTL of the batch, which bounds the renewal calls.
func renewTTLs(batch []*held, sent time.Time) (ttls []time.Duration, timeout time.Duration) {
	ttls = make([]time.Duration, len(batch))
	for i, h := range batch {
		ttls[i] = h.s.ttl
		if lim := h.holdLimit(); !lim.IsZero() {
			ttls[i] = min(ttls[i], lim.Sub(sent))
		}
		if timeout == 0 || h.s.ttl < timeout {
			timeout = h.s.ttl
		}
	}
	return ttls, timeout
}

// group sorts the leases of batch that still have a TTL to ask for (a TTL under 1 ms is
// set to 0: nothing is sent) into one group for the leases that wait for no replica (a
// Cluster pipeline splits it by node itself) and one per primary for those that do. A
// lease whose primary cannot be found gets its error in errs.
func (c *conn) groupRenewals(ctx context.Context, batch []*held, ttls []time.Duration, errs []error) (plain *renewGroup, synced []*renewGroup) {
	plain = &renewGroup{}
	for i, h := range batch {
		if ttls[i] < time.Millisecond {
			ttls[i] = 0
			continue
		}
		if h.s.syncReplicas == 0 {
			plain.idx = append(plain.idx, i)
			continue
		}
		node, err := c.syncNode(ctx, h.rk.lock)
		if err != nil {
			c.refresh(err)
			errs[i] = &RedisError{Op: "renew", Key: h.hk.key, Err: err}
			continue
		}
		j := slices.IndexFunc(synced, func(g *renewGroup) bool { return g.node == node })
		if j < 0 {
			synced = append(synced, &renewGroup{node: node, legacy: &c.legacy})
			j = len(synced) - 1
		}
		g := synced[j]
		g.idx = append(g.idx, i)
		g.want = max(g.want, h.s.syncReplicas)
		g.wait = max(g.wait, h.s.syncTimeout)
	}
	return plain, synced
}

// renewOutcomes reads the replies of group g into errs: nil, errNotOwner, a
// *RedisError for each of its leases (see sendRenewals).
func (c *conn) renewOutcomes(g *renewGroup, batch []*held, errs []error) {
	for k, i := range g.idx {
		h := batch[i]
		n, err := g.cmds[k].Int64()
		switch {
		case err != nil:
			c.refresh(err)
			errs[i] = &RedisError{Op: "renew", Key: h.hk.key, Err: err}
		case n != 1:
			errs[i] = errNotOwner
		case g.want > 0 && (g.waitErr[k] != nil || g.acked[k] < int64(h.s.syncReplicas)):
			errs[i] = replicaShortfall(h.hk.key, h.s.syncReplicas, int(g.acked[k]), g.waitErr[k], true)
		}
	}
}

// renewGroup is the renewals sent in one pipeline to one node: with want > 0, followed
// by WAIT want wait on the same connection.
type renewGroup struct {
	node    redis.Cmdable
	legacy  *atomic.Bool // the conn's: the servers take the scripts' plain form (see script)
	idx     []int        // indexes in the batch
	want    int
	wait    time.Duration
	cmds    []*redis.Cmd // by position in idx
	acked   []int64      // replicas that acknowledged, by position in idx (want > 0)
	waitErr []error      // the WAIT's error, by position in idx (want > 0)
}

// run sends the group's renewals; renewals that met NOSCRIPT are sent again with EVAL
// (and once more in the scripts' plain form when the server cannot parse their "#!lua"
// line, which legacy then records).
func (g *renewGroup) run(ctx context.Context, batch []*held, ttls []time.Duration) {
	g.cmds = make([]*redis.Cmd, len(g.idx))
	g.acked = make([]int64, len(g.idx))
	g.waitErr = make([]error, len(g.idx))
	exec := func(pos []int, form func(*script.Script) (string, any)) {
		pipe := g.node.Pipeline()
		for _, k := range pos {
			h := batch[g.idx[k]]
			cmd, src := form(h.s.spec.renew)
			keys := h.renewKeys()
			args := make([]any, 0, 5+len(keys))
			args = append(args, cmd, src, len(keys))
			for _, key := range keys {
				args = append(args, key)
			}
			g.cmds[k] = pipe.Do(ctx, append(args, string(h.hk.owner), ttls[g.idx[k]].Milliseconds())...)
		}
		var w *redis.Cmd
		if g.want > 0 {
			w = pipe.Do(ctx, "wait", g.want, g.wait.Milliseconds())
		}
		_, _ = pipe.Exec(ctx)
		if w != nil {
			acked, err := w.Int64()
			for _, k := range pos {
				g.acked[k], g.waitErr[k] = acked, err
			}
		}
	}
	legacy := g.legacy.Load()
	all := make([]int, len(g.idx))
	for k := range all {
		all[k] = k
	}
	exec(all, func(s *script.Script) (string, any) { sha, _ := s.Form(legacy); return "evalsha", sha })
	if again := g.failed(all, func(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }); len(again) > 0 {
		exec(again, func(s *script.Script) (string, any) { _, src := s.Form(legacy); return "eval", src })
		if again = g.failed(again, flagsRefused); !legacy && len(again) > 0 {
			exec(again, func(s *script.Script) (string, any) { return "eval", s.Plain() })
			if len(g.failed(again, flagsRefused)) == 0 {
				g.legacy.Store(true)
			}
		}
	}
}

// failed returns the positions among pos whose renewal's error matches.
func (g *renewGroup) failed(pos []int, match func(error) bool) []int {
	var out []int
	for _, k := range pos {
		if err := g.cmds[k].Err(); err != nil && match(err) {
			out = append(out, k)
		}
	}
	return out
}
