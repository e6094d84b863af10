package chaos_test

// Scenarios on independent servers: quorum Lockers (guard.NewQuorum) while a minority of
// the servers is killed and restarted empty, paused past the TTL or slowed beyond the read
// timeout, and while a majority is paused.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/chaos"
	"github.com/guardkit/guardkit/internal/redistest"
)

// newQuorumWorld builds a world whose lock deployment is n independent servers.
func newQuorumWorld(t *testing.T, cfg config, n int) *world {
	t.Helper()
	w := newWorldOn(t, cfg, func(w *world) {
		w.quorum = redistest.StartN(w.tb, n)
	})
	// Fresh servers grant quorum locks once up for the restart delay (the TTL): wait for
	// it, so that the run measures faults and not the start.
	time.Sleep(time.Second + cfg.TTL)
	return w
}

// addQuorumNode adds a quorum Locker with a client per server, each through a fault
// proxy of its own.
func (w *world) addQuorumNode(name string) *node {
	w.t.Helper()
	n := &node{name: name}
	for _, s := range w.quorum {
		p := redistest.NewProxy(w.tb, s.Addr())
		n.proxies = append(n.proxies, p)
		o := &redis.Options{Addr: p.Addr()}
		w.cfg.clientOpts(o)
		n.clients = append(n.clients, redis.NewClient(o))
	}
	opts := w.cfg.lockerOpts()
	if w.cfg.NoRestartCheck {
		opts = append(opts, guard.RestartDelay(0))
	}
	l, err := guard.NewQuorum(n.clients, opts...)
	if err != nil {
		w.fatalf(setup, "", 0, "guard.NewQuorum: %v", err)
	}
	n.locker = l
	w.nodes = append(w.nodes, n)
	return n
}

// minority is the indexes of the servers a minority fault hits: 1 of 3, 2 of 5.
func minority(n int) []int {
	var v []int
	for i := range (n - 1) / 2 {
		v = append(v, i)
	}
	return v
}

// quorumRestarted kills a minority of the servers and starts them empty at once, over and
// over, while two quorum Lockers contend. With the restart check a restarted server
// grants nothing for a TTL, and no lock is granted twice; without it (check false), a
// restarted server and a minority can grant a lock still held (I1, expected).
func quorumRestarted(n int, check bool) func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		cfg := baseConfig()
		cfg.NoRestartCheck = !check
		w := newQuorumWorld(t, cfg, n)
		w.addNode("a", false)
		w.addNode("b", false)
		stop := w.run(contended(sc))
		victims := minority(n)
		k := w.faultLoop(sc.run, 700*time.Millisecond, func(i int) {
			w.fault("kill -9 + restart", func() {
				for _, v := range victims {
					w.quorum[v].Restart(w.tb)
				}
			})
		})
		stop()
		label := "RestartDelay = TTL"
		if !check {
			label = "RestartDelay(0): no restart check"
		}
		row, vs := w.finish("", fmt.Sprintf("%d× kill -9 and immediate empty restart of %d of %d servers (%s)", k, len(victims), n, label), sc.slack)
		if i1 := row.Violations[chaos.I1]; i1 > 0 && !check {
			addNote(&row, fmt.Sprintf("I1 breaks without the restart check (%d overlaps): a restarted server and a minority granted locks still held; the fenced register rejected the stale writes (M4 = %d)",
				i1, row.Violations[chaos.M4]))
		}
		return row, vs
	}
}

// quorumPaused stops some of the servers (SIGSTOP) for twice the TTL, over and over,
// while two quorum Lockers contend: a minority (majority false), which the quorum rides
// out, or a majority, whose leases are lost on their validity clock.
func quorumPaused(n int, majority bool) func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		cfg := baseConfig()
		w := newQuorumWorld(t, cfg, n)
		w.addNode("a", false)
		w.addNode("b", false)
		stop := w.run(contended(sc))
		victims := minority(n)
		if majority {
			victims = append(victims, len(victims))
		}
		d := 2 * cfg.TTL
		k := w.faultLoop(sc.run, d+700*time.Millisecond, func(int) {
			w.fault("SIGSTOP servers", func() {
				for _, v := range victims {
					w.quorum[v].Pause(w.tb)
				}
				time.Sleep(d)
				for _, v := range slices.Backward(victims) {
					w.quorum[v].Resume(w.tb)
				}
			})
		})
		stop()
		return w.finish("", fmt.Sprintf("%d× SIGSTOP %d of %d servers for %s (TTL %s)", k, len(victims), n, d, cfg.TTL), sc.slack)
	}
}

// quorumPausedRate stops one server of three (SIGSTOP) for 2s, over and over, while two
// quorum Lockers contend for the same keys, and notes their grant rate while the server
// is stopped against the rate before the first stop: a quorum exists to ride out a
// stopped minority, so the contenders must not wait for the silent server.
func quorumPausedRate(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	cfg := baseConfig()
	w := newQuorumWorld(t, cfg, 3)
	w.addNode("a", false)
	w.addNode("b", false)
	stop := w.run(contended(sc))
	const pause = 2 * time.Second
	calm := max(sc.run/4, pause)
	before := chaos.Now()
	time.Sleep(calm)
	var stopped [][2]chaos.Mono
	k := w.faultLoop(sc.run-calm, pause+700*time.Millisecond, func(int) {
		w.fault("SIGSTOP a server", func() {
			w.quorum[1].Pause(w.tb)
			from := chaos.Now()
			time.Sleep(pause)
			stopped = append(stopped, [2]chaos.Mono{from, chaos.Now()})
			w.quorum[1].Resume(w.tb)
		})
	})
	stop()
	var calmGrants, pausedGrants int
	var pausedFor time.Duration
	for _, p := range stopped {
		pausedFor += p[1].Sub(p[0])
	}
	for _, s := range w.hist.Sections() {
		if !s.Enter.Before(before) && s.Enter.Before(before.Add(calm)) {
			calmGrants++
		}
		for _, p := range stopped {
			if !s.Enter.Before(p[0]) && s.Enter.Before(p[1]) {
				pausedGrants++
			}
		}
	}
	row, vs := w.finish("", fmt.Sprintf("%d× SIGSTOP 1 of 3 servers for %s while 2 Lockers contend (TTL %s)", k, pause, cfg.TTL), sc.slack)
	calmRate := float64(calmGrants) / calm.Seconds()
	pausedRate := float64(pausedGrants) / max(pausedFor.Seconds(), 1e-9)
	addNote(&row, fmt.Sprintf("grant rate %.0f/s before the first stop, %.0f/s while a server was stopped (%.0f%%)",
		calmRate, pausedRate, 100*pausedRate/max(calmRate, 1e-9)))
	return row, vs
}

// quorumLatency slows a minority of the servers beyond the clients' read timeout, delays
// and drops their replies, while two quorum Lockers contend.
func quorumLatency(n int) func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
	return func(t *testing.T, sc scale) (chaos.Row, []chaos.Report) {
		cfg := baseConfig()
		cfg.TTL = time.Second
		cfg.ReleaseTimeout = 500 * time.Millisecond
		cfg.ReadTimeout = 100 * time.Millisecond
		w := newQuorumWorld(t, cfg, n)
		a := w.addNode("a", false)
		b := w.addNode("b", false)
		ld := contended(sc)
		ld.AcquireMin, ld.AcquireMax = 300*time.Millisecond, time.Second
		stop := w.run(ld)
		victims := minority(n)
		each := func(f func(p *redistest.Proxy)) {
			for _, v := range victims {
				f(a.proxies[v])
				f(b.proxies[v])
			}
		}
		var kinds [3]int
		w.faultLoop(sc.run, 400*time.Millisecond, func(i int) {
			kinds[i%3]++
			switch i % 3 {
			case 0:
				w.fault("latency", func() {
					each(func(p *redistest.Proxy) { p.SetLatency(150 * time.Millisecond) })
					time.Sleep(300 * time.Millisecond)
					each(func(p *redistest.Proxy) { p.SetLatency(0) })
				})
			case 1:
				w.fault("delayed reply", func() { each(func(p *redistest.Proxy) { p.DelayNextReply(300 * time.Millisecond) }) })
			case 2:
				w.fault("dropped reply", func() { each(func(p *redistest.Proxy) { p.DropNextReply() }) })
			}
		})
		stop()
		return w.finish("", fmt.Sprintf("on %d of %d servers: %d× 150 ms latency for 300 ms, %d× reply delayed 300 ms, %d× reply dropped (read timeout 100 ms)",
			len(victims), n, kinds[0], kinds[1], kinds[2]), sc.slack)
	}
}
