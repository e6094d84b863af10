package guard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// traced returns ctx carrying a sampled span context with a fixed trace ID.
func traced(ctx context.Context) (context.Context, string) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	return trace.ContextWithSpanContext(ctx, sc), tid.String()
}

// inspectCase is one kind as the inspect tests take it: the options of its holder and
// of its waiter.
type inspectCase struct {
	name           string
	hold, wait     []guard.Option
	kind, waitKind guard.Kind
}

var inspectCases = []inspectCase{
	{"exclusive", nil, nil, guard.KindExclusive, guard.KindExclusive},
	{"read", []guard.Option{guard.Read()}, []guard.Option{guard.Write()}, guard.KindRead, guard.KindWrite},
	{"write", []guard.Option{guard.Write()}, []guard.Option{guard.Read()}, guard.KindWrite, guard.KindRead},
	{"semaphore", []guard.Option{guard.Permits(1)}, []guard.Option{guard.Permits(1)}, guard.KindSemaphore, guard.KindSemaphore},
	{"fair", []guard.Option{guard.Fair()}, []guard.Option{guard.Fair()}, guard.KindFair, guard.KindFair},
}

// checkInspect holds key with holder (reentered through other, with the same owner, so
// that Redis counts 2 holds), makes a waiter of waiter wait for it, and checks what
// operator's Inspect reports.
func checkInspect(t *testing.T, c inspectCase, key string, holder, other, waiter, operator *guard.Locker, ttl time.Duration) {
	t.Helper()
	ctx := ctxTimeout(t, 30*time.Second)
	hctx, traceID := traced(ctxid.NewContext(ctx, ctxid.New()))
	before := time.Now()
	le := mustAcquire(t, holder, hctx, key, c.hold...)
	after := time.Now()
	defer le.Release(context.Background())
	again := mustAcquire(t, other, ctxid.NewContext(hctx, le.Owner()), key, c.hold...) // inside the section, through another Locker
	defer again.Release(context.Background())

	wctx, cancel := context.WithCancel(ctxid.NewContext(ctx, ctxid.New()))
	waiting := make(chan error, 1)
	go func() {
		le, err := waiter.Acquire(wctx, key, append(c.wait, guard.Retry(guard.MaxWait(-1, guard.Fixed(100*time.Millisecond, 0))))...)
		if err == nil {
			err = errors.New("the waiter got the lock while it was held")
			_ = le.Release(context.Background())
		}
		waiting <- err
	}()
	defer func() {
		cancel()
		<-waiting
	}()
	wantWaiter := func(st *guard.LockState) bool {
		if c.waitKind == guard.KindWrite {
			return st.WriterWaiting > 0
		}
		for _, w := range st.Waiters {
			if w.Locker == waiter.ID() {
				return true
			}
		}
		return false
	}
	var st *guard.LockState
	waitUntil(t, 10*time.Second, "the waiter to show in Inspect", func() bool {
		var err error
		st, err = operator.Inspect(ctx, key, c.hold...)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		return wantWaiter(st)
	})
	if len(st.Holders) != 1 {
		t.Fatalf("%s: holders %+v, want 1", c.name, st.Holders)
	}
	h := st.Holders[0]
	owner := le.Owner()
	switch {
	case st.Key != key || h.Owner != owner || h.Kind != c.kind:
		t.Errorf("%s: key %q holder %s kind %s, want %q %s %s", c.name, st.Key, h.Owner, h.Kind, key, owner, c.kind)
	case h.Holds != 2:
		t.Errorf("%s: holds %d, want 2 (the hold reentered through another Locker)", c.name, h.Holds)
	case h.Token != le.Token() || st.Fence != le.Token():
		t.Errorf("%s: token %d fence %d, want the lease's %d", c.name, h.Token, st.Fence, le.Token())
	case h.TTL <= 0 || h.TTL > ttl:
		t.Errorf("%s: time left %s, want in (0, %s]", c.name, h.TTL, ttl)
	case h.AcquiredAt.Before(before.Add(-50*time.Millisecond)) || h.AcquiredAt.After(after.Add(50*time.Millisecond)):
		// The server's clock is this machine's: the grant is between the calls.
		t.Errorf("%s: acquired at %s, want between %s and %s", c.name, h.AcquiredAt, before, after)
	case h.Locker != holder.ID() || h.Label != "orders@test pid 42" || h.TraceID != traceID:
		t.Errorf("%s: locker %q label %q trace %q, want %q, the label and %s", c.name, h.Locker, h.Label, h.TraceID, holder.ID(), traceID)
	case h.Local:
		t.Errorf("%s: reported held by the operator's Locker", c.name)
	case !st.Contended && c.kind != guard.KindFair:
		t.Errorf("%s: not marked contended with a waiter", c.name)
	}
	if c.kind == guard.KindFair && (st.Waiters[0].Owner == "" || st.Waiters[0].TTL <= 0) {
		t.Errorf("fair: waiter %+v, want its owner and its place's time left", st.Waiters[0])
	}
	if !slices.ContainsFunc(st.Holders, func(h guard.Holder) bool { return h.Owner == owner }) {
		t.Errorf("%s: the holders %+v do not name the holder %s", c.name, st.Holders, owner)
	}
	mine, err := holder.Inspect(ctx, key, c.hold...)
	if err != nil || !mine.Holders[0].Local {
		t.Errorf("%s: the holder's own Inspect: %+v, %v, want Local", c.name, mine, err)
	}
}

func TestInspectKinds(t *testing.T) {
	srv := redistest.Start(t)
	ttl := 5 * time.Second
	opts := []guard.Option{guard.TTL(ttl), guard.Label("orders@test pid 42")}
	holder, _ := newLocker(t, srv, opts...)
	other, _ := newLocker(t, srv, opts...)
	waiter, _ := newLocker(t, srv, opts...)
	operator, _ := newLocker(t, srv)
	for _, c := range inspectCases {
		t.Run(c.name, func(t *testing.T) {
			checkInspect(t, c, "inspect:"+c.name, holder, other, waiter, operator, ttl)
		})
	}
}

func TestInspectFree(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	le := mustAcquire(t, l, ctx, "inspect:free")
	token := le.Token()
	mustRelease(t, le)
	st, err := l.Inspect(ctx, "inspect:free")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) > 0 || len(st.Waiters) != 0 || st.Fence != token {
		t.Errorf("after release: %+v, want free with fence %d", st, token)
	}
	if _, err := l.Inspect(ctx, ""); !errors.Is(err, guard.ErrInvalidKey) {
		t.Errorf("Inspect(\"\") = %v, want ErrInvalidKey", err)
	}
}

// Without Label, a hold stores nothing more: another process sees no Locker nor label,
// and the holder's own Inspect knows it as its own.
func TestInspectUnlabelled(t *testing.T) {
	srv := redistest.Start(t)
	l, c := newLocker(t, srv)
	ctx := ctxTimeout(t, 10*time.Second)
	le := mustAcquire(t, l, ctx, "inspect:plain")
	defer mustRelease(t, le)
	if label, err := c.HGet(ctx, lockName("inspect:plain"), "#l").Result(); err != nil || label != "" {
		t.Errorf("the hold's label field %q, %v; want it empty", label, err)
	}
	other, _ := newLocker(t, srv)
	st, err := other.Inspect(ctx, "inspect:plain")
	if err != nil || len(st.Holders) != 1 {
		t.Fatalf("Inspect: %+v, %v", st, err)
	}
	if h := st.Holders[0]; h.Locker != "" || h.Label != "" || h.Local {
		t.Errorf("another Locker's view %+v, want no Locker, label or Local", h)
	}
	mine, _ := l.Inspect(ctx, "inspect:plain")
	if h := mine.Holders[0]; !h.Local || h.Locker != l.ID() {
		t.Errorf("the holder's view %+v, want Local with its ID", h)
	}
}

func TestInspectLabelConfig(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, label := range []string{strings.Repeat("x", guard.MaxLabelLen+1), "a\nb"} {
		_, err := guard.New(c, guard.Label(label))
		var ce *guard.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Label" {
			t.Errorf("Label(%q): %v, want a *ConfigError naming Label", label, err)
		}
	}
	l := lockerOn(t, c, guard.Label(""))
	le := mustAcquire(t, l, ctxTimeout(t, 5*time.Second), "inspect:default-label")
	defer mustRelease(t, le)
	st, err := l.Inspect(context.Background(), "inspect:default-label")
	service := os.Getenv("OTEL_SERVICE_NAME")
	if service == "" {
		service = filepath.Base(os.Args[0])
	}
	host, _ := os.Hostname()
	want := service + "@" + host + " pid " + strconv.Itoa(os.Getpid()) // short enough: not cut
	if err != nil || st.Holders[0].Label != want {
		t.Errorf("Label(\"\"): %+v, %v, want the process's label %q", st, err, want)
	}
}

// On a Cluster, locks whose keys live on different primaries are each read on theirs.
func TestInspectCluster(t *testing.T) {
	cl := cluster.Get(t)
	ttl := 5 * time.Second
	opts := []guard.Option{guard.TTL(ttl), guard.Label("orders@test pid 42")}
	holder := lockerOn(t, cl.Client(t), opts...)
	other := lockerOn(t, cl.Client(t), opts...)
	waiter := lockerOn(t, cl.Client(t), opts...)
	operator := lockerOn(t, cl.Client(t))
	primaries := cl.Primaries()
	for i, c := range inspectCases {
		p := primaries[i%len(primaries)]
		t.Run(c.name, func(t *testing.T) {
			// Every name of a lock shares its hash tag, which alone decides the slot.
			key := keyOn(t, cl, p, "inspect-cluster-"+c.name)
			checkInspect(t, c, key, holder, other, waiter, operator, ttl)
		})
	}
}

// A quorum Locker reports each server's view and the majority's; a server down leaves
// the majority's view whole.
func TestInspectQuorum(t *testing.T) {
	rig := startQuorum(t, 3, false)
	ttl := 5 * time.Second
	opts := []guard.Option{guard.TTL(ttl), guard.Label("orders@test pid 42"), guard.RestartDelay(0)}
	holder := rig.locker(t, opts...)
	other := rig.locker(t, opts...)
	waiter := rig.locker(t, opts...)
	operator := rig.locker(t, guard.RestartDelay(0))
	for _, c := range inspectCases[:3] { // the kinds a quorum serves
		t.Run(c.name, func(t *testing.T) {
			checkInspect(t, c, "inspect-quorum:"+c.name, holder, other, waiter, operator, ttl)
		})
	}
	ctx := ctxTimeout(t, 20*time.Second)
	le := mustAcquire(t, holder, ctx, "inspect-quorum:views")
	defer le.Release(context.Background())
	st, err := operator.Inspect(ctx, "inspect-quorum:views")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Servers) != 3 || len(st.Holders) != 1 || st.Holders[0].Token != le.Token() {
		t.Fatalf("majority view %+v, want 3 servers' views and the holder with token %d", st, le.Token())
	}
	held := 0
	for _, v := range st.Servers {
		if v.Err == nil && len(v.Holders) == 1 {
			held++
		}
	}
	if held < 2 {
		t.Errorf("%d servers' views show the holder, want a majority", held)
	}
	rig.servers[2].Kill(t)
	st, err = operator.Inspect(ctx, "inspect-quorum:views")
	if err != nil || len(st.Holders) != 1 || st.Servers[2].Err == nil {
		t.Errorf("with a server down: %+v, %v, want the holder and the server's error", st, err)
	}
	rig.servers[1].Kill(t)
	if _, err := operator.Inspect(ctx, "inspect-quorum:views"); !errors.Is(err, guard.ErrUnavailable) || !isQuorumFailure(err) {
		t.Errorf("with two servers down: %v, want ErrUnavailable with a quorum failure", err)
	}
}

// List finds every held lock among 10,000 on a 3-primary Cluster, one bounded SCAN per
// call, and leaves out other keys.
func TestInspectList(t *testing.T) {
	cl := cluster.Get(t)
	n := envInt("GUARD_LIST_LOCKS", 10000)
	prefix := fmt.Sprintf("list-%d:", time.Now().UnixNano())
	c := cl.Client(t)
	l := lockerOn(t, c, guard.Prefix(prefix), guard.TTL(time.Minute))
	ctx := ctxTimeout(t, 3*time.Minute)
	parallel(t, n, func(i int) error {
		opts := []guard.Option(nil)
		if i%10 == 0 {
			opts = append(opts, guard.Read())
		}
		_, err := l.TryAcquire(ctx, fmt.Sprintf("job:%d", i), opts...)
		return err
	})
	// Keys that are not locks, and a lock whose key the pattern does not match.
	for i := range 100 {
		if err := c.Set(ctx, fmt.Sprintf("%s{job:%d}:other", prefix, i), "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.TryAcquire(ctx, "report:1"); err != nil {
		t.Fatal(err)
	}
	seen := make(map[string]int)
	calls := 0
	start := time.Now()
	for cursor := ""; ; {
		page, next, err := l.List(ctx, "job:*", cursor)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		calls++
		for _, st := range page {
			seen[st.Key]++
			if len(st.Holders) == 0 || st.Holders[0].Owner == "" {
				t.Fatalf("listed %+v, want held", st)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	elapsed := time.Since(start)
	var keys int64
	for _, p := range cl.Primaries() {
		keys += p.Client(t).DBSize(ctx).Val()
	}
	t.Logf("List: %d locks found among %d keys on %d primaries in %d calls (SCAN COUNT %d), %s",
		len(seen), keys, len(cl.Primaries()), calls, guard.ListScanCount, elapsed.Round(time.Millisecond))
	for i := range n {
		if k := fmt.Sprintf("job:%d", i); seen[k] != 1 {
			t.Fatalf("%s listed %d times, want once", k, seen[k])
		}
	}
	if len(seen) != n {
		t.Errorf("listed %d locks, want %d", len(seen), n)
	}
	if calls < len(cl.Primaries()) {
		t.Errorf("%d calls, want one SCAN per call and at least one per primary", calls)
	}
	if _, _, err := l.List(ctx, "", "nonsense"); !errors.Is(err, guard.ErrInvalidKey) {
		t.Errorf("List with a bad cursor: %v, want ErrInvalidKey", err)
	}
}

// A quorum's lock is listed once, found on the first server that holds it.
func TestInspectListQuorum(t *testing.T) {
	rig := startQuorum(t, 3, false)
	l := rig.locker(t, guard.RestartDelay(0))
	ctx := ctxTimeout(t, 20*time.Second)
	for i := range 20 {
		key := fmt.Sprintf("q:%d", i)
		le := mustAcquire(t, l, ctx, key)
		defer le.Release(context.Background())
		// The acquisition returned on a majority; its write to the third server may
		// still be on its way, and a copy gained during the listing may list it twice.
		waitUntil(t, 5*time.Second, key+" on every server", func() bool { return rig.holders(t, key) == 3 })
	}
	seen := map[string]int{}
	listAll(t, l, ctx, "q:*", func(page []*guard.LockState) {
		for _, st := range page {
			seen[st.Key]++
			if len(st.Servers) != 3 || len(st.Holders) == 0 {
				t.Errorf("listed %+v, want held with 3 servers' views", st)
			}
		}
	})
	if len(seen) != 20 {
		t.Errorf("listed %d locks, want 20: %v", len(seen), seen)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times", k, n)
		}
	}
}

// listAll calls List from the first page to the last, handing each page to f.
func listAll(t *testing.T, l *guard.Locker, ctx context.Context, pattern string, f func([]*guard.LockState)) {
	t.Helper()
	for cursor := ""; ; {
		page, next, err := l.List(ctx, pattern, cursor)
		if err != nil {
			t.Fatal(err)
		}
		f(page)
		if next == "" {
			return
		}
		cursor = next
	}
}

// A quorum's lock held throughout a listing is listed even when a server already
// scanned gains its copy during the listing, as a server does when an acquisition's
// write reaches it after the majority answered.
func TestInspectListQuorumCatchUp(t *testing.T) {
	rig := startQuorum(t, 3, false)
	l := rig.locker(t, guard.RestartDelay(0))
	ctx := ctxTimeout(t, 20*time.Second)
	le := mustAcquire(t, l, ctx, "late")
	defer le.Release(context.Background())
	waitUntil(t, 5*time.Second, "late on every server", func() bool { return rig.holders(t, "late") == 3 })

	for _, late := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("server %d", late), func(t *testing.T) {
			// The server numbered late misses the hold while it is scanned, then gains it.
			c := rig.servers[late].Client(t)
			defer c.Close()
			dump, err := c.Dump(ctx, lockName("late")).Result()
			if err != nil {
				t.Fatal(err)
			}
			ttl := c.PTTL(ctx, lockName("late")).Val()
			if err := c.Del(ctx, lockName("late")).Err(); err != nil {
				t.Fatal(err)
			}
			restored := false
			n, page := 0, 0
			listAll(t, l, ctx, "late", func(locks []*guard.LockState) {
				for _, st := range locks {
					if st.Key == "late" {
						n++
					}
				}
				if page == late && !restored {
					if err := c.RestoreReplace(ctx, lockName("late"), ttl, dump).Err(); err != nil {
						t.Fatal(err)
					}
					restored = true
				}
				page++
			})
			if n != 1 {
				t.Errorf("listed %d times, want once (server %d gained its copy after its page)", n, late)
			}
		})
	}
}

// fencedWrite is storage that refuses tokens below the highest it has seen.
var fencedWrite = redis.NewScript(`
local last = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < last then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

// ForceRelease ends a stuck holder's lock: the waiter is woken and takes it with a token
// above the raised fence, the old holder learns it lost its lease, and its fenced write
// is refused once the new holder has written.
func TestInspectForceRelease(t *testing.T) {
	srv := redistest.Start(t)
	holder, store := newLocker(t, srv, guard.TTL(3*time.Second), guard.Label("stuck@test pid 1"))
	waiter, _ := newLocker(t, srv, guard.TTL(3*time.Second))
	operator, _ := newLocker(t, srv)
	for _, kind := range []struct {
		name string
		opts []guard.Option
	}{{"exclusive", nil}, {"fair", []guard.Option{guard.Fair()}}, {"write", []guard.Option{guard.Write()}}} {
		t.Run(kind.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 20*time.Second)
			key := "force:" + kind.name
			old := mustAcquire(t, holder, ctx, key, kind.opts...)
			wait := make(chan waitOutcome, 1)
			go func() {
				// A backoff far beyond the test: only the announcement wakes it in time.
				le, err := waiter.Acquire(ctx, key, append(kind.opts, guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0))))...)
				wait <- waitOutcome{le, err, time.Now()}
			}()
			waitUntil(t, 10*time.Second, "the waiter to queue", func() bool {
				st, err := operator.Inspect(ctx, key, kind.opts...)
				return err == nil && (len(st.Waiters) > 0 || st.WriterWaiting > 0)
			})
			st, err := operator.ForceRelease(ctx, key, kind.opts...)
			if err != nil {
				t.Fatalf("ForceRelease: %v", err)
			}
			if len(st.Holders) != 1 || st.Holders[0].Token != old.Token() || st.Holders[0].Label != "stuck@test pid 1" || st.Fence <= old.Token() {
				t.Fatalf("ended %+v, want the old holder (token %d) and a fence above it", st, old.Token())
			}
			w := <-wait
			if w.err != nil {
				t.Fatalf("the waiter: %v, want the lock once force-released", w.err)
			}
			defer w.lease.Release(context.Background())
			if w.lease.Token() <= st.Fence {
				t.Errorf("the new holder's token %d, want above the raised fence %d", w.lease.Token(), st.Fence)
			}
			storeKey := "store:" + kind.name
			if ok, _ := fencedWrite.Run(ctx, store, []string{storeKey}, w.lease.Token()).Int(); ok != 1 {
				t.Fatal("the new holder's write was refused")
			}
			if ok, _ := fencedWrite.Run(ctx, store, []string{storeKey}, old.Token()).Int(); ok != 0 {
				t.Error("the old holder's fenced write was accepted after the force release")
			}
			select {
			case <-old.Context().Done():
			case <-ctx.Done():
				t.Fatal("the old holder was not told that its lease was lost")
			}
			if !errors.Is(context.Cause(old.Context()), guard.ErrLeaseLost) {
				t.Errorf("the old lease ended with %v, want ErrLeaseLost", context.Cause(old.Context()))
			}
			_ = old.Release(context.Background())
		})
	}
	// Nothing held: the fence is raised all the same, and nothing is reported ended.
	st, err := operator.ForceRelease(context.Background(), "force:free")
	if err != nil || len(st.Holders) > 0 || st.Fence == 0 {
		t.Errorf("ForceRelease of a free lock: %+v, %v", st, err)
	}
}

// Behind Sentinel, Inspect reads the primary that the sentinels name.
func TestInspectSentinel(t *testing.T) {
	g := sentinel.Get(t)
	ttl := 5 * time.Second
	opts := []guard.Option{guard.TTL(ttl), guard.Label("orders@test pid 42")}
	holder := lockerOn(t, g.Client(t), opts...)
	other := lockerOn(t, g.Client(t), opts...)
	waiter := lockerOn(t, g.Client(t), opts...)
	operator := lockerOn(t, g.Client(t))
	for _, c := range []inspectCase{inspectCases[0], inspectCases[1]} {
		t.Run(c.name, func(t *testing.T) {
			checkInspect(t, c, "inspect-sentinel:"+c.name, holder, other, waiter, operator, ttl)
		})
	}
}

// isQuorumFailure reports whether err holds a quorum call that too few servers confirmed.
func isQuorumFailure(err error) bool {
	_, _, ok := guard.QuorumFailure(err)
	return ok
}

// readOnlyUser creates on srv an ACL user allowed only rules (and every key), and
// returns a client logged in as it.
func readOnlyUser(t *testing.T, srv *redistest.Server, name string, rules ...string) *redis.Client {
	t.Helper()
	admin := srv.Client(t)
	args := append([]any{"acl", "setuser", name, "reset", "on", ">pw", "~*", "&*", "-@all"}, toAny(rules)...)
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
	return srv.Client(t, func(o *redis.Options) { o.Username, o.Password = name, "pw" })
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// An operator given read-only credentials (+@read +evalsha_ro +eval_ro: no EVALSHA, no
// TIME) reads every kind with Inspect, InspectKinds and List, with the holders' tokens,
// time left and acquisition times; the server logs no refused command (TIME is not
// tried). A user allowed EVALSHA but not EVALSHA_RO (credentials written for an earlier
// version) reads too.
func TestInspectReadOnlyUser(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	holder, _ := newLocker(t, srv, guard.TTL(5*time.Second), guard.Label("orders@test pid 42"))
	var leases []*guard.Lease
	for _, c := range inspectCases {
		le := mustAcquire(t, holder, ctx, "ro:"+c.name, c.hold...)
		defer le.Release(context.Background())
		leases = append(leases, le)
	}
	for _, user := range []struct{ name, rules string }{
		{"ro", "+@read +evalsha_ro +eval_ro"},
		{"legacy", "+@read +evalsha +eval"},
	} {
		t.Run(user.name, func(t *testing.T) {
			c := readOnlyUser(t, srv, user.name, strings.Fields(user.rules)...)
			if err := c.Time(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
				t.Fatalf("TIME as %s: %v, want NOPERM (the test's ACL does not restrict)", user.name, err)
			}
			if err := admin.ScriptFlush(ctx).Err(); err != nil { // EVAL_RO's path too
				t.Fatal(err)
			}
			if err := admin.Do(ctx, "acl", "log", "reset").Err(); err != nil {
				t.Fatal(err)
			}
			operator := lockerOn(t, c)
			for i, k := range inspectCases {
				st, err := operator.Inspect(ctx, "ro:"+k.name, k.hold...)
				if err != nil {
					t.Fatalf("Inspect %s as %s: %v", k.name, user.name, err)
				}
				checkReadOnlyState(t, st, leases[i], k.kind)
			}
			kinds, err := operator.InspectKinds(ctx, "ro:read")
			if err != nil || len(kinds) != 4 || len(kinds[1].Holders) != 1 || len(kinds[0].Holders)+len(kinds[2].Holders)+len(kinds[3].Holders) != 0 {
				t.Fatalf("InspectKinds as %s: %+v, %v; want the read lock only", user.name, kinds, err)
			}
			n := 0
			listAll(t, operator, ctx, "ro:*", func(page []*guard.LockState) { n += len(page) })
			if n != len(inspectCases) {
				t.Errorf("List as %s found %d locks, want %d", user.name, n, len(inspectCases))
			}
			// (The legacy user's refused EVALSHA_RO is logged: the fallback costs that.)
			if log := admin.Do(ctx, "acl", "log").Val(); user.name == "ro" && fmt.Sprint(log) != "[]" {
				t.Errorf("ACL LOG after reading as %s: %v, want no refused command", user.name, log)
			}
		})
	}
}

// checkReadOnlyState checks what a read-only user's Inspect reports of le's hold.
func checkReadOnlyState(t *testing.T, st *guard.LockState, le *guard.Lease, kind guard.Kind) {
	t.Helper()
	if len(st.Holders) != 1 {
		t.Fatalf("%s: holders %+v, want 1", st.Key, st.Holders)
	}
	h := st.Holders[0]
	now := time.Now()
	switch {
	case h.Kind != kind || h.Token != le.Token() || st.Fence != le.Token():
		t.Errorf("%s: kind %s token %d fence %d, want %s and the lease's %d", st.Key, h.Kind, h.Token, st.Fence, kind, le.Token())
	case h.TTL <= 0 || h.TTL > 5*time.Second:
		t.Errorf("%s: time left %s, want in (0, 5s]", st.Key, h.TTL)
	case st.Time.Before(now.Add(-time.Second)) || st.Time.After(now.Add(time.Second)):
		// The server's clock is this machine's, read from a key's expiry.
		t.Errorf("%s: read at %s, want about %s", st.Key, st.Time, now)
	case h.AcquiredAt.IsZero() || h.Label != "orders@test pid 42":
		t.Errorf("%s: acquired at %s, label %q", st.Key, h.AcquiredAt, h.Label)
	}
}

// A server without EVALSHA_RO and EVAL_RO (Redis 6.2; here a Redis 7 with the two
// renamed away, which answers as 6.2 does: unknown command) is read with EVALSHA; one
// that cannot parse the "#!lua" line either (miniredis, as Redis 6.2) gets the plain
// script.
func TestInspectWithoutReadOnlyCommands(t *testing.T) {
	ctx := ctxTimeout(t, 20*time.Second)
	srv := redistest.Start(t, redistest.Args("--rename-command", "EVALSHA_RO", "", "--rename-command", "EVAL_RO", ""))
	m := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer mc.Close()
	for name, c := range map[string]*redis.Client{"no _RO commands": srv.Client(t), "no script flags": mc} {
		t.Run(name, func(t *testing.T) {
			if err := c.Do(ctx, "evalsha_ro", "0000000000000000000000000000000000000000", 0).Err(); name != "no script flags" && (err == nil || !strings.Contains(err.Error(), "unknown command")) {
				t.Fatalf("EVALSHA_RO: %v, want unknown command", err)
			}
			l := lockerOn(t, c)
			le := mustAcquire(t, l, ctx, "plain:1")
			defer le.Release(context.Background())
			other := lockerOn(t, c)
			st, err := other.Inspect(ctx, "plain:1")
			if err != nil || len(st.Holders) != 1 || st.Holders[0].Token != le.Token() {
				t.Fatalf("Inspect: %+v, %v; want the holder with token %d", st, err, le.Token())
			}
			n := 0
			listAll(t, other, ctx, "plain:*", func(page []*guard.LockState) { n += len(page) })
			if n != 1 {
				t.Errorf("List found %d locks, want 1", n)
			}
		})
	}
}

// A hold whose lock hash has lost its fence record (written by hand, or by a tool that
// rewrote the hash) shows a fence no lower than its token, for Inspect, InspectKinds and
// List: the token was issued all the same, and every later one exceeds it.
func TestInspectFenceOutlived(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := ctxTimeout(t, 30*time.Second)
	holder, _ := newLocker(t, srv, guard.TTL(3*time.Second), guard.FenceRetention(time.Second))
	operator, _ := newLocker(t, srv)
	for _, c := range []inspectCase{inspectCases[0], inspectCases[1]} {
		t.Run(c.name, func(t *testing.T) {
			key := "outlived:" + c.name
			le := mustAcquire(t, holder, ctx, key, c.hold...)
			defer le.Release(context.Background())
			var records []string
			keys, _ := admin.Keys(ctx, "guard:{"+key+"}*").Result()
			for _, k := range keys {
				if admin.HExists(ctx, k, "#f").Val() {
					records = append(records, k)
				}
			}
			if len(records) != 1 {
				t.Fatalf("fence records in %q, want 1", records)
			}
			if err := admin.HDel(ctx, records[0], "#f").Err(); err != nil {
				t.Fatal(err)
			}
			st, err := operator.Inspect(ctx, key, c.hold...)
			if err != nil || len(st.Holders) != 1 {
				t.Fatalf("Inspect: %+v, %v", st, err)
			}
			if st.Fence != le.Token() {
				t.Errorf("fence %d with the fence record gone, want the holder's token %d", st.Fence, le.Token())
			}
			var listed *guard.LockState
			listAll(t, operator, ctx, key, func(page []*guard.LockState) {
				for _, s := range page {
					listed = s
				}
			})
			if listed == nil || listed.Fence != le.Token() {
				t.Errorf("List: %+v, want the fence %d", listed, le.Token())
			}
		})
	}
}

// A lock whose key is longer than the operator's MaxKeyLen (taken by a Locker with a
// higher one) is listed, inspected, found by InspectKinds and ended by ForceRelease.
func TestInspectLongKey(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 20*time.Second)
	holder, _ := newLocker(t, srv, guard.MaxKeyLen(4096), guard.TTL(3*time.Second))
	operator, _ := newLocker(t, srv) // MaxKeyLen 1024
	key := "long:" + strings.Repeat("k", 1100)
	le := mustAcquire(t, holder, ctx, key, guard.Read())
	defer le.Release(context.Background())
	if _, err := operator.Acquire(ctx, key); !errors.Is(err, guard.ErrInvalidKey) {
		t.Fatalf("the operator's Acquire: %v, want ErrInvalidKey (the bound still holds there)", err)
	}
	var listed []*guard.LockState
	listAll(t, operator, ctx, "long:*", func(page []*guard.LockState) { listed = append(listed, page...) })
	if len(listed) != 1 || listed[0].Key != key || len(listed[0].Holders) != 1 {
		t.Fatalf("List: %d locks, want the long key's", len(listed))
	}
	st, err := operator.Inspect(ctx, key, guard.Read())
	if err != nil || len(st.Holders) != 1 || st.Holders[0].Token != le.Token() {
		t.Fatalf("Inspect: %+v, %v", st, err)
	}
	kinds, err := operator.InspectKinds(ctx, key)
	if err != nil || len(kinds[1].Holders) != 1 {
		t.Fatalf("InspectKinds: %+v, %v", kinds, err)
	}
	ended, err := operator.ForceRelease(ctx, key, guard.Read())
	if err != nil || len(ended.Holders) != 1 {
		t.Fatalf("ForceRelease: %+v, %v", ended, err)
	}
	waitEnded(t, le.Context(), 10*time.Second, "the force-released lease")
}

// InspectKinds finds the kind a key is used as: the held kind's state has the holder,
// the others are free; a key used as two kinds shows both.
func TestInspectKindsFinds(t *testing.T) {
	srv := redistest.Start(t)
	ctx := ctxTimeout(t, 20*time.Second)
	holder, _ := newLocker(t, srv)
	operator, _ := newLocker(t, srv)
	index := map[guard.Kind]int{guard.KindExclusive: 0, guard.KindRead: 1, guard.KindWrite: 1, guard.KindSemaphore: 2, guard.KindFair: 3}
	for _, c := range inspectCases {
		t.Run(c.name, func(t *testing.T) {
			key := "kinds:" + c.name
			le := mustAcquire(t, holder, ctx, key, c.hold...)
			defer le.Release(context.Background())
			states, err := operator.InspectKinds(ctx, key)
			if err != nil || len(states) != 4 {
				t.Fatalf("InspectKinds: %v, %v", states, err)
			}
			for i, st := range states {
				held := len(st.Holders) > 0
				if want := i == index[c.kind]; held != want || st.Key != key {
					t.Errorf("state %d (%s): held %v, want %v", i, st.Kind, held, want)
				}
			}
			if h := states[index[c.kind]].Holders[0]; h.Kind != c.kind || h.Token != le.Token() {
				t.Errorf("holder %+v, want kind %s token %d", h, c.kind, le.Token())
			}
		})
	}
	a := mustAcquire(t, holder, ctx, "kinds:two")
	defer a.Release(context.Background())
	b := mustAcquire(t, holder, ctx, "kinds:two", guard.Fair())
	defer b.Release(context.Background())
	states, err := operator.InspectKinds(ctx, "kinds:two")
	if err != nil || len(states[0].Holders) != 1 || len(states[3].Holders) != 1 {
		t.Errorf("a key used as two kinds: %+v, %v; want exclusive and fair held", states, err)
	}
	if _, err := operator.InspectKinds(ctx, ""); !errors.Is(err, guard.ErrInvalidKey) {
		t.Errorf("InspectKinds(\"\") = %v, want ErrInvalidKey", err)
	}
}
