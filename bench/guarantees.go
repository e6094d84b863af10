package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/internal/lualink"
)

// The guarantees scenario prices each guarantee of guardkit's exclusive lock in server
// time: guardkit's own acquire.lua and release.lua, read from ../guard/internal/script/lua
// and linked with the fragments' functions they call as guard links them, run directly
// (no engine around them), whole and with one guarantee cut out at a time. The cuts are
// textual edits of the real scripts and fragments; an edit that no longer applies (the
// script changed) fails the run instead of measuring something else.

// scriptsDir is where guardkit's scripts are read from; the bench runs in bench/.
var scriptsDir = filepath.Join("..", "guard", "internal", "script", "lua")

// scriptFragments are the fragments guard links every script with, in order (see
// guard/internal/script/doc.go).
var scriptFragments = []string{"chain", "fence", "hold", "queue"}

// scriptEdit cuts one guarantee out of acquire.lua (file "acquire"), release.lua or one of
// scriptFragments.
type scriptEdit struct {
	file     string
	re       *regexp.Regexp
	with     string
	describe string
}

// guaranteeCuts are the variants of the scenario: the guarantee cut out, by name.
var guaranteeCuts = []struct {
	name, guarantee string
	edits           []scriptEdit
}{
	{"scripts", "none: guardkit's scripts as they are", nil},
	{"scripts/no-release-nonce", "a retried release reports the truth", []scriptEdit{{
		file: "hold", re: regexp.MustCompile(`return nil, noted\(x, ':', nonce\)`), with: "return nil, x or ''",
		describe: "the release nonce appended to the release record"}}},
	{"scripts/no-token-rewrite", "tokens rise per key while the fence record lives, whatever the clock", []scriptEdit{{
		file: "fence", re: regexp.MustCompile(`(?s)  if last ~= '' and \(#last > #s or .*?\n  end\n`),
		with:     "",
		describe: "the last token compared with the clock and raised above it (the token is the clock alone)"}}},
	{"scripts/no-clock-floor", "tokens rise after Redis restarts empty or fails over to a lagging replica", []scriptEdit{{
		file: "fence", re: regexp.MustCompile(`local s = t\[1\] \.\. us\n`), with: "local s = '0'\n",
		describe: "the clock's digits as the token's floor (the token is the record's last + 1; TIME stays, the leases need it)"}}},
	{"scripts/no-acquire-nonce", "a retried acquire counts once", []scriptEdit{{
		file: "acquire", re: regexp.MustCompile(`'#a', ARGV\[3\],`), with: "'#a', '',",
		describe: "the attempt's nonce written into the lock hash"}}},
	{"scripts/no-queue-pop", "a release wakes the next process queued for the lock", []scriptEdit{{
		file: "queue", re: regexp.MustCompile(`local next = redis\.call\('LPOP', KEYS\[2\]\)`), with: "local next = false",
		describe: "the pop of the lock's wait queue (made only when someone waited)"}}},
}

func init() {
	var all []scriptEdit
	for _, c := range guaranteeCuts {
		all = append(all, c.edits...)
	}
	guaranteeCuts = append(guaranteeCuts, struct {
		name, guarantee string
		edits           []scriptEdit
	}{"scripts/no-guarantees", "all five above", all})
}

// guardScripts returns guardkit's acquire and release scripts with edits applied, each
// linked with the functions of scriptFragments it calls.
func guardScripts(edits []scriptEdit) (acquire, release string, err error) {
	src, err := guardSources()
	if err != nil {
		return "", "", err
	}
	for _, e := range edits {
		if !e.re.MatchString(src[e.file]) {
			return "", "", fmt.Errorf("%s.lua no longer has %s (%s): update the cut in bench/guarantees.go", e.file, e.describe, e.re)
		}
		src[e.file] = e.re.ReplaceAllLiteralString(src[e.file], e.with)
	}
	return linkPair(src["acquire"], src["release"], src)
}

// guardSources returns the texts of acquire.lua, release.lua and scriptFragments, by
// name.
func guardSources() (map[string]string, error) {
	src := map[string]string{}
	for _, f := range append([]string{"acquire", "release"}, scriptFragments...) {
		b, err := os.ReadFile(filepath.Join(scriptsDir, f+".lua"))
		if err != nil {
			return nil, fmt.Errorf("guardkit's scripts (run the bench from bench/): %w", err)
		}
		src[f] = string(b)
	}
	return src, nil
}

// linkPair links the acquire and release bodies acq and rel with the functions of
// scriptFragments they call, the fragments' texts read from src by name.
func linkPair(acq, rel string, src map[string]string) (acquire, release string, err error) {
	frags := make([]lualink.Fragment, len(scriptFragments))
	for i, f := range scriptFragments {
		frags[i] = lualink.Fragment{Name: f + ".lua", Src: src[f]}
	}
	if acquire, err = lualink.Link(acq, frags...); err == nil {
		release, err = lualink.Link(rel, frags...)
	}
	return acquire, release, err
}

// scriptsLib runs guardkit's scripts, whole or cut, as try-acquire and release.
type scriptsLib struct {
	*goRedis
	acquire, release *redis.Script
	locker, ttl      string
	seq              *atomic.Uint64
}

func newScriptsLib(edits []scriptEdit) func(libConfig) (Lib, error) {
	return func(cfg libConfig) (Lib, error) {
		a, r, err := guardScripts(edits)
		if err != nil {
			return nil, err
		}
		return runScripts(cfg, a, r)
	}
}

// runScripts returns the Lib that runs the acquire and release script texts acq and rel
// with acquire.lua's and release.lua's arguments, on the raw row's client settings.
func runScripts(cfg libConfig, acq, rel string) (Lib, error) {
	var b [9]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	return scriptsLib{goRedis: newGoRedis(cfg, false), acquire: redis.NewScript(acq), release: redis.NewScript(rel),
		locker: base64.RawURLEncoding.EncodeToString(b[:]), ttl: strconv.FormatInt(cfg.ttl.Milliseconds(), 10),
		seq: new(atomic.Uint64)}, nil
}

type scriptsLease struct {
	l     scriptsLib
	keys  []string
	owner string
}

// retention is guardkit's default FenceRetention, in milliseconds.
const retention = "3600000"

func (l scriptsLib) TryLock(ctx context.Context, key string) (Lease, error) {
	n := strconv.FormatUint(l.seq.Add(1), 36)
	le := &scriptsLease{l: l, keys: []string{key, key + ":q"}, owner: l.locker + "." + n}
	// ARGV: owner, TTL, attempt nonce, fence retention, "2" (a caller that will not wait), Locker.
	v, err := l.acquire.Run(ctx, l.c, le.keys, le.owner, l.ttl, "a"+n, retention, "2", l.locker).Result()
	if err != nil {
		return nil, err
	}
	if _, ok := v.(int64); !ok {
		return nil, errBusy // {0, pttl}: held by another owner
	}
	return le, nil
}

// Lock polls every millisecond, as raw does.
func (l scriptsLib) Lock(ctx context.Context, key string) (Lease, error) {
	return pollLock(ctx, key, l.TryLock)
}

func (le *scriptsLease) Unlock(ctx context.Context) error {
	// ARGV: owner, release nonce, no undo nonce, fence retention, Locker, classic Pub/Sub,
	// no quorum attempt, "2": the lease is valid and the hash outlives the retention (the
	// engine's common case: the server's clock is not read, the TTL not touched).
	n, err := le.l.release.Run(ctx, le.l.c, le.keys, le.owner, "r"+le.owner, "", retention, le.l.locker, "0", "", "2").Int64()
	if err == nil && n != 1 && n != 3 && n != 4 {
		err = fmt.Errorf("scripts: release returned %d, want the lock freed", n)
	}
	return err
}

func (le *scriptsLease) Lost() bool { return false }

// turns runs rounds of pairs-long slices of try-acquire → release on one goroutine, one
// slice per variant in an order rotated every round, each variant on a Lib and a key of
// its own, for the scenarios that set variants side by side within a round (guarantees,
// kinds-uncontended). Each slice is a measurement of scenario, cell G=1, Rep its round,
// with the pairs per second, the errors, the per-pair counts (perOp), the script time
// ("script_us_per_pair", EVAL, EVALSHA and FCALL with the commands they call), the
// lock's time in Redis (scripts and SET) and the server CPU per pair; it returns them by
// round, each round in vs's order.
func (e *env) turns(scenario string, vs []variant, rounds, pairs int) ([][]measurement, error) {
	libs := make([]Lib, len(vs))
	keys := make([]string, len(vs))
	defer func() {
		for _, l := range libs {
			if l != nil {
				_ = l.Close()
			}
		}
	}()
	for i, v := range vs {
		l, err := v.new(libConfig{addr: e.addr, ttl: e.ttl})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		libs[i], keys[i] = l, e.keyFor(scenario, i)
	}
	ctx := context.Background()
	slice := func(i, n int) (ok, failed int) {
		for range n {
			le, err := libs[i].TryLock(ctx, keys[i])
			if err == nil {
				err = le.Unlock(ctx)
			}
			if err != nil {
				failed++
				continue
			}
			ok++
		}
		return ok, failed
	}
	for i := range vs {
		slice(i, pairs/5) // load the scripts, warm the connections
	}
	out := make([][]measurement, rounds)
	for round := range rounds {
		ms := make([]measurement, len(vs))
		for j := range vs {
			i := (j + round) % len(vs)
			a, t0 := e.counts(libs[i:i+1], false), time.Now()
			ok, failed := slice(i, pairs)
			el, b := time.Since(t0), e.counts(libs[i:i+1], false)
			m := map[string]float64{"pairs_per_s": float64(ok) / el.Seconds(), "errors": float64(failed)}
			d := perOp(m, a, b, int64(ok), "per_pair")
			n := float64(max(ok, 1))
			var scriptUsec int64
			for k, v := range d.usecBy {
				if strings.HasPrefix(k, "eval") || strings.HasPrefix(k, "fcall") {
					scriptUsec += v
				}
			}
			m["script_us_per_pair"] = float64(scriptUsec) / n
			m["set_us_per_pair"] = float64(d.usecBy["set"]) / n
			// The lock's own time in Redis: its scripts and SET (raw's).
			m["redis_us_per_pair"] = m["script_us_per_pair"] + m["set_us_per_pair"]
			m["server_cpu_us_per_pair"] = us(d.cpu) / n
			ms[i] = measurement{Scenario: scenario, Cell: "G=1", Variant: vs[i].name, Rep: round + 1,
				Commands: d.byCmd, Usec: d.usecBy, Metrics: m}
		}
		out[round] = ms
	}
	return out, nil
}

// guarantees runs the guarantees scenario in turns (see turns). The differences that
// section 9 reports — what a cut saves against `scripts`, the ratio to `raw` — are taken
// within a round, so that a slow phase of the machine, which lasts longer than a round,
// moves both sides of a difference alike. record gets every slice, once all have run.
func (e *env) guarantees(vs []variant, rounds, pairs int, record func(measurement)) error {
	base, raw := -1, -1
	for i, v := range vs {
		switch v.name {
		case "scripts":
			base = i
		case "raw":
			raw = i
		}
	}
	byRound, err := e.turns("guarantees", vs, rounds, pairs)
	if err != nil {
		return err
	}
	// A row whose pairs failed prices nothing: a cut that no longer leaves working
	// scripts (the text it edits changed meaning) must fail the run, as one that no
	// longer applies does, not print a figure.
	for r, ms := range byRound {
		for _, m := range ms {
			if n := m.Metrics["errors"]; n > 0 {
				return fmt.Errorf("guarantees: %s failed %.0f pairs in round %d: fix its cut in bench/guarantees.go", m.Variant, n, r+1)
			}
		}
	}
	var all []measurement
	for _, ms := range byRound {
		for i := range ms {
			m := ms[i].Metrics
			if base >= 0 {
				for _, k := range []string{"redis_us_per_pair", "server_cpu_us_per_pair"} {
					m["saved:"+k] = ms[base].Metrics[k] - m[k]
				}
			}
			if raw >= 0 && ms[raw].Metrics["redis_us_per_pair"] > 0 {
				m["redis_x_raw"] = m["redis_us_per_pair"] / ms[raw].Metrics["redis_us_per_pair"]
			}
		}
		all = append(all, ms...)
	}
	// The spread of the within-round differences, beside their median: on a shared
	// machine single rounds scatter by more than the smaller guarantees cost.
	for i, v := range vs {
		var saved []float64
		for _, m := range all {
			if m.Variant == v.name {
				saved = append(saved, m.Metrics["saved:redis_us_per_pair"])
			}
		}
		slices.Sort(saved)
		for _, m := range all[i%len(vs):] {
			if m.Variant == v.name {
				m.Metrics["saved_p25"], m.Metrics["saved_p75"] = saved[len(saved)/4], saved[3*len(saved)/4]
			}
		}
	}
	for _, m := range all {
		record(m)
	}
	return nil
}
