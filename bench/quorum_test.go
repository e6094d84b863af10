package main

import (
	"testing"
	"time"
)

// TestQuorumVariants checks the quorum variants on three independent servers: each
// acquires, excludes, releases and wakes a blocked Lock (guardkit's also reenters), and
// an uncontended run of guardkit's makes the round trips section 8 explains: at most one
// per server for the attempt and for the release, no write-back (the servers take the
// attempt's proposed token), fewer when the two goroutines' calls to a server share a
// pipeline.
func TestQuorumVariants(t *testing.T) {
	e, stop, err := startQuorumEnv(&env{dur: tiny, ttl: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cfg := libConfig{quorum: e.quorum, ttl: 10 * time.Second}
	for _, v := range variants() {
		if !v.quorum {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			checkLock(t, newLib(t, v, cfg), newLib(t, v, cfg), "quorum:"+v.name)
		})
	}
	// Long enough for a few hundred pairs: a 50 ms window on a loaded machine made 7,
	// and one write-back or undo that fell in it moved the ratio by more than the
	// tolerance (10.14 round trips per pair in a clean-clone make test).
	e.dur.uncontended = time.Second
	m, _, err := e.uncontended(variantByName(t, "guardkit/quorum"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if m["errors"] != 0 || m["pairs_per_s"] <= 0 {
		t.Errorf("uncontended: %v errors, %v pairs/s", m["errors"], m["pairs_per_s"])
	}
	// 3 per half at most, and one pipeline per server for the two goroutines' calls at
	// least: between 3 and 6, give or take a call that falls after the window.
	near(t, m, "rt_per_pair_hook", 1.5*quorumServers, 0.5*quorumServers+0.5)
}
