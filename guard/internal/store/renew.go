package store

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// group sorts the leases of batch that still have a TTL to ask for (a TTL under 1 ms is
// set to 0: nothing is sent) into one group for the leases that wait for no replica (a
// Cluster pipeline splits it by node itself) and one per primary for those that do. A
// lease whose primary cannot be found gets its error in errs.
func (s *Single) groupRenewals(ctx context.Context, batch []*Hold, ttls []time.Duration, errs []error) (plain *renewGroup, synced []*renewGroup) {
	plain = &renewGroup{}
	for i, h := range batch {
		if ttls[i] < time.Millisecond {
			ttls[i] = 0
			continue
		}
		if h.Terms.SyncReplicas == 0 {
			plain.idx = append(plain.idx, i)
			continue
		}
		node, err := s.syncNode(ctx, h.Keys.Lock)
		if err != nil {
			s.Refresh(err)
			errs[i] = err
			continue
		}
		j := slices.IndexFunc(synced, func(g *renewGroup) bool { return g.node == node })
		if j < 0 {
			synced = append(synced, &renewGroup{node: node, legacy: &s.legacy})
			j = len(synced) - 1
		}
		g := synced[j]
		g.idx = append(g.idx, i)
		g.want = max(g.want, h.Terms.SyncReplicas)
		g.wait = max(g.wait, h.Terms.SyncTimeout)
	}
	return plain, synced
}

// renewOutcomes reads the replies of group g into errs: nil, ErrGone, a *Shortfall or
// the call's error for each of its leases (see Store.Renew).
func (s *Single) renewOutcomes(g *renewGroup, batch []*Hold, errs []error) {
	for k, i := range g.idx {
		h := batch[i]
		n, err := g.cmds[k].Int64()
		switch {
		case err != nil:
			s.Refresh(err)
			errs[i] = err
		case n != 1:
			errs[i] = ErrGone
		case g.want > 0 && (g.waitErr[k] != nil || g.acked[k] < int64(h.Terms.SyncReplicas)):
			errs[i] = &Shortfall{Want: h.Terms.SyncReplicas, Acked: int(g.acked[k]), Err: g.waitErr[k]}
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
func (g *renewGroup) run(ctx context.Context, batch []*Hold, ttls []time.Duration) {
	g.cmds = make([]*redis.Cmd, len(g.idx))
	g.acked = make([]int64, len(g.idx))
	g.waitErr = make([]error, len(g.idx))
	exec := func(pos []int, form func(*script.Script) (string, any)) {
		pipe := g.node.Pipeline()
		for _, k := range pos {
			h := batch[g.idx[k]]
			cmd, src := form(h.Terms.Spec.Renew)
			keys := h.renewKeys()
			args := make([]any, 0, 6+len(keys))
			args = append(args, cmd, src, len(keys))
			for _, key := range keys {
				args = append(args, key)
			}
			g.cmds[k] = pipe.Do(ctx, append(args, h.args.owner, ttls[g.idx[k]].Milliseconds(), h.args.retention)...)
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
