package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// SetScope is which exclusive locks a store can take in one script call, all or none
// (SetAcquirer).
type SetScope uint8

// The scopes of a store's set calls.
const (
	SetNone   SetScope = iota // one by one only (a Ring, an auto-pipelining client)
	SetSlot                   // those of one Cluster hash slot
	SetServer                 // any: one server, or a Sentinel group's primary
)

// SetAcquirer is a store that takes several exclusive locks in one script call (guard's
// AcquireAll).
type SetAcquirer interface {
	// SetScope says which locks one call may take.
	SetScope() SetScope
	// AcquireSet makes one attempt at every hold of hs, all exclusive and within one
	// scope, for one owner, with nonces (one per hold) in manner (MannerWait or
	// MannerTry). It returns a Grant per hold, and -1, when it took them all or when
	// the call failed or its reply could not be read (each Grant then carries the
	// error, Err or Bad, and the outcome is unknown as for Acquire); nil and i when hold
	// i was not free for the owner and nothing was written.
	AcquireSet(ctx context.Context, hs []*Hold, nonces []string, manner string) ([]Grant, int)
	// ReleaseSet drops one hold of each of hs, exclusive and within one scope, each with
	// its release nonce, in one call, and returns each one's reply as Release does; on an
	// error the outcome of every release is unknown.
	ReleaseSet(ctx context.Context, hs []*Hold, nonces []string, urgent bool) ([]script.Released, error)
}

// SetScope is SetServer on a *redis.Client (a server, or a Sentinel group's primary),
// SetSlot on a Cluster, and SetNone on any other client: a Ring picks a shard per key,
// and an auto-pipelining client may wrap a Cluster, whose keys of different slots one
// call cannot take.
func (s *Single) SetScope() SetScope {
	switch s.client.(type) {
	case *redis.Client:
		return SetServer
	case *redis.ClusterClient:
		return SetSlot
	}
	return SetNone
}

// AcquireSet runs acquire_set.lua (see SetAcquirer).
func (s *Single) AcquireSet(ctx context.Context, hs []*Hold, nonces []string, manner string) ([]Grant, int) {
	h0 := hs[0]
	args := make([]any, 0, 3+3*len(hs)+8)
	args = append(args, nil, nil, 2*len(hs))
	for _, h := range hs {
		args = append(args, h.args.lock, h.args.queue)
	}
	label := h0.args.label
	if label == nil {
		label = argNoLabel
	}
	args = append(args, h0.args.owner, h0.Terms.ttlArg, "", h0.args.retention, argManner[manner], s.cfg.ID, label, "")
	for _, n := range nonces {
		args = append(args, n)
	}
	v, err := s.RunScript(ctx, script.AcquireSet, args, false).Result()
	if err != nil {
		return sameGrant(len(hs), Grant{Err: err}), -1
	}
	r, _ := v.([]any)
	if len(r) == 2 {
		if tag, _ := r[0].(int64); tag == 0 {
			if i, ok := r[1].(int64); ok && i >= 1 && int(i) <= len(hs) {
				return nil, int(i) - 1
			}
		}
	}
	if len(r) != len(hs)+1 {
		return sameGrant(len(hs), Grant{Bad: fmt.Errorf("unexpected acquire reply %v", v)}), -1
	}
	out := make([]Grant, len(hs))
	for i := range hs {
		out[i] = decode(r[i+1], nil)
	}
	return out, -1
}

// ReleaseSet runs release_set.lua (see SetAcquirer).
func (s *Single) ReleaseSet(ctx context.Context, hs []*Hold, nonces []string, urgent bool) ([]script.Released, error) {
	h0 := hs[0]
	args := make([]any, 0, 3+5*len(hs)+6)
	args = append(args, nil, nil, 2*len(hs))
	for _, h := range hs {
		args = append(args, h.args.lock, h.args.queue)
	}
	args = append(args, "", "", "", h0.args.retention, s.cfg.ID, s.shardedArg())
	for i, h := range hs {
		args = append(args, h.args.owner, nonces[i], liveFlag(h))
	}
	v, err := s.RunScript(ctx, script.ReleaseSet, args, urgent).Result()
	if err != nil {
		return nil, err
	}
	r, _ := v.([]any)
	if len(r) != len(hs) {
		return nil, fmt.Errorf("unexpected release reply %v", v)
	}
	out := make([]script.Released, len(hs))
	for i := range hs {
		n, _ := r[i].(int64)
		if out[i], err = script.ParseRelease(n, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sameGrant returns n copies of g.
func sameGrant(n int, g Grant) []Grant {
	out := make([]Grant, n)
	for i := range out {
		out[i] = g
	}
	return out
}
