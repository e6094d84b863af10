package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// bin is the guardkit command built for the tests: they run it as a user does.
var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "guardkit-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "guardkit")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building guardkit: %v\n%s", err, out)
		os.Exit(1)
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		goleak.VerifyTestMain(exitCode{&code, m}, redistest.IgnoreRedial)
	}()
	os.Exit(code)
}

// exitCode runs m and keeps its code, so that TestMain's cleanup runs before os.Exit.
type exitCode struct {
	code *int
	m    *testing.M
}

func (e exitCode) Run() int { *e.code = e.m.Run(); return *e.code }

// guardkit runs the built command with args and stdin, and returns its output and status.
func guardkit(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("guardkit %q: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// app is the live application the command is pointed at: a labelled Locker holding
// locks, and another process's Locker with waiters queued behind them.
type app struct {
	holder, waiter *guard.Locker
	leases         []*guard.Lease
}

func startApp(t *testing.T, srv *redistest.Server) *app {
	t.Helper()
	a := &app{}
	var err error
	if a.holder, err = guard.New(srv.Client(t), guard.Label("orders@web-3 pid 4242"), guard.TTL(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if a.waiter, err = guard.New(srv.Client(t), guard.TTL(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.waiter.Close(); _ = a.holder.Close() })
	return a
}

// hold takes key with opts for the application.
func (a *app) hold(t *testing.T, key string, opts ...guard.Option) *guard.Lease {
	t.Helper()
	le, err := a.holder.Acquire(context.Background(), key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	a.leases = append(a.leases, le)
	t.Cleanup(func() { _ = le.Release(context.Background()) })
	return le
}

// wait makes n requests of the waiting process wait for key until ctx ends; done
// receives each outcome.
func (a *app) wait(ctx context.Context, key string, n int, opts ...guard.Option) <-chan error {
	done := make(chan error, n)
	for range n {
		go func() {
			le, err := a.waiter.Acquire(ctxid.NewContext(ctx, ctxid.New()), key, opts...)
			if err == nil {
				_ = le.Release(context.Background())
			}
			done <- err
		}()
	}
	return done
}

// queued waits until guardkit itself reports a waiter on key.
func queued(t *testing.T, addr, key string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, _ := guardkit(t, "", append([]string{"--addr", addr, "inspect", "--json", key}, args...)...)
		var st jsonLock
		if json.Unmarshal([]byte(out), &st) == nil && (len(st.Waiters) > 0 || st.WriterWaitingMs > 0) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter on %s after 10s: %s", key, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var lockerID = regexp.MustCompile(`(^|[^A-Za-z0-9_-])[A-Za-z0-9_-]{12}([^A-Za-z0-9_-]|$)`)

// Values that change from run to run, replaced in outputs before they are compared with
// the golden files.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+Z`), "TIME"},
	{regexp.MustCompile(`\b\d{16}\b`), "TOKEN"},
	{regexp.MustCompile(`\b\d+(\.\d)?(ms|s)\b|\b\d+m\d\ds\b`), "DUR"},
	{regexp.MustCompile(`[A-Za-z0-9_-]{22}`), "OWNER"},
	{regexp.MustCompile(`OWNER(/[A-Za-z0-9_-]+)+`), "OWNER/SECTION"}, // a section of the request
	// A Locker ID is 12 characters of base64url, which may begin or end with "-" or
	// "_": \b would miss those. Twice, for two IDs one character apart.
	{lockerID, "${1}LOCKER${2}"},
	{lockerID, "${1}LOCKER${2}"},
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), "ADDR"},
	{regexp.MustCompile(` +`), " "},
	{regexp.MustCompile(`(?m)^( ADDR - - - - - ).*$`), "${1}ERROR"}, // a server's error: refused, or timed out
}

func normalize(s string) string {
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return s
}

// normalizeJSON replaces the values that change between runs and indents the document.
func normalizeJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				switch k {
				case "time", "acquired_at", "owner", "locker", "server":
					v[k] = strings.ToUpper(k)
				case "ttl_ms", "held_for_ms", "fence", "token", "writer_waiting_ms":
					v[k] = 1
				default:
					v[k] = walk(x)
				}
			}
		case []any:
			for i := range v {
				v[i] = walk(v[i])
			}
		}
		return v
	}
	b, err := json.MarshalIndent(walk(v), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the output:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func TestInspectAndList(t *testing.T) {
	srv := redistest.Start(t)
	a := startApp(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.hold(t, "order:o9")
	a.hold(t, "doc:1", guard.Read())
	a.hold(t, "invoice:7", guard.Fair())
	orders := a.wait(ctx, "order:o9", 3)
	docs := a.wait(ctx, "doc:1", 1, guard.Write())
	invoices := a.wait(ctx, "invoice:7", 2, guard.Fair())
	queued(t, srv.Addr(), "order:o9")
	queued(t, srv.Addr(), "doc:1", "--kind", "rw")
	queued(t, srv.Addr(), "invoice:7", "--kind", "fair")

	for _, c := range []struct {
		golden string
		args   []string
	}{
		{"inspect.txt", []string{"inspect", "order:o9"}},
		{"inspect-rw.txt", []string{"inspect", "--kind", "rw", "doc:1"}},
		{"inspect-rw.txt", []string{"inspect", "doc:1"}}, // the kind found in Redis
		{"inspect-fair.json", []string{"inspect", "--json", "invoice:7"}},
		{"ls.txt", []string{"ls"}},
		{"ls-pattern.txt", []string{"ls", "order:*"}},
		{"inspect.json", []string{"inspect", "--json", "order:o9"}},
		{"inspect-fair.json", []string{"--kind=fair", "inspect", "invoice:7", "--json"}},
		{"ls.json", []string{"ls", "--json"}},
	} {
		out, errOut, code := guardkit(t, "", append([]string{"--addr", srv.Addr()}, c.args...)...)
		if code != 0 {
			t.Fatalf("guardkit %q: status %d: %s", c.args, code, errOut)
		}
		if strings.HasSuffix(c.golden, ".json") {
			golden(t, c.golden, normalizeJSON(t, out))
		} else {
			golden(t, c.golden, normalize(out))
		}
	}
	cancel()
	for _, ch := range []<-chan error{orders, orders, orders, docs, invoices, invoices} {
		<-ch
	}
}

func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Usage:"},
		{[]string{"help"}, 0, "Usage:"},
		{[]string{"help", "unlock"}, 0, "Dangers:"},
		{[]string{"unlock", "-h"}, 0, "Dangers:"},
		{[]string{"inspect"}, 2, "want one KEY"},
		{[]string{"unlock", "k"}, 2, "needs --force"},
		{[]string{"inspect", "--kind", "odd", "k"}, 2, "--kind must be"},
		{[]string{"frob"}, 2, "unknown command"},
		{[]string{"--addr", "a:1", "--cluster", "b:1", "ls"}, 2, "give one of"},
		{[]string{"--sentinel-master", "m", "ls"}, 2, "go together"},
		{[]string{"watch", "--interval", "1ms"}, 2, "--interval"},
	} {
		out, errOut, code := guardkit(t, "", c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("guardkit %q: status %d, output %q; want status %d and %q", c.args, code, out+errOut, c.code, c.want)
		}
	}
	// Redis not there: status 1, the error and the address named, whatever the timeout
	// (the client retries a refused dial until the timeout, then reports the context's
	// error alone).
	for _, timeout := range []string{"500ms", "1s", "3s"} {
		for _, args := range [][]string{{"inspect", "k"}, {"inspect", "--kind", "rw", "k"}, {"ls"}} {
			_, errOut, code := guardkit(t, "", append([]string{"--addr", "127.0.0.1:1", "--timeout", timeout}, args...)...)
			if code != 1 || !strings.HasPrefix(errOut, `guardkit: guard: `) || !strings.Contains(errOut, "dial tcp 127.0.0.1:1: connect: connection refused") {
				t.Errorf("no Redis, --timeout %s %q: status %d, %q; want the address and the refusal", timeout, args, code, errOut)
			}
		}
	}
}

// A server that does not answer (stopped): the error names the address and the timeout.
func TestNoAnswer(t *testing.T) {
	srv := redistest.Start(t)
	srv.Pause(t)
	defer srv.Resume(t)
	_, errOut, code := guardkit(t, "", "--addr", srv.Addr(), "--timeout", "1s", "inspect", "k")
	if want := "context deadline exceeded (no answer from " + srv.Addr() + " within --timeout 1s)"; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("a stopped server: status %d, %q; want %q", code, errOut, want)
	}
}

func TestUnlock(t *testing.T) {
	srv := redistest.Start(t)
	a := startApp(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := a.hold(t, "export:nightly")
	woken := a.wait(ctx, "export:nightly", 1, guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0))))
	queued(t, srv.Addr(), "export:nightly")

	// Declined at the prompt: nothing changes.
	out, errOut, code := guardkit(t, "n\n", "--addr", srv.Addr(), "unlock", "--force", "export:nightly")
	if code != 3 || !strings.Contains(errOut, "orders@web-3 pid 4242") || !strings.Contains(errOut, "[y/N]") {
		t.Fatalf("declined: status %d, %q %q", code, out, errOut)
	}
	if st, err := a.holder.Inspect(ctx, "export:nightly"); err != nil || len(st.Holders) == 0 {
		t.Fatalf("after a declined unlock: %+v, %v", st, err)
	}
	// Confirmed: the waiter gets the lock with a token above the fence printed.
	out, errOut, code = guardkit(t, "y\n", "--addr", srv.Addr(), "unlock", "--force", "--json", "export:nightly")
	if code != 0 {
		t.Fatalf("unlock: status %d: %s", code, errOut)
	}
	var ended jsonLock
	if err := json.Unmarshal([]byte(out), &ended); err != nil || len(ended.Holders) != 1 || ended.Holders[0].Token != old.Token() || ended.Fence <= old.Token() {
		t.Fatalf("unlock --json: %s (%v), want the old holder and a fence above its token %d", out, err, old.Token())
	}
	if err := <-woken; err != nil {
		t.Fatalf("the waiter: %v, want the lock", err)
	}
	select {
	case <-old.Context().Done():
	case <-ctx.Done():
		t.Fatal("the old holder was not told that its lease was lost")
	}
	// --yes: no question; a free lock of the kind named is reported with no holder; a
	// lock of no kind in use is left alone.
	out, errOut, code = guardkit(t, "", "--addr", srv.Addr(), "unlock", "--force", "--yes", "--kind", "exclusive", "export:nightly")
	if code != 0 || strings.Contains(errOut, "[y/N]") || !strings.Contains(out, "0 holder(s) ended") {
		t.Errorf("unlock --yes --kind exclusive of a free lock: status %d, %q %q", code, out, errOut)
	}
	out, errOut, code = guardkit(t, "", "--addr", srv.Addr(), "unlock", "--force", "--yes", "export:nightly")
	if code != 0 || !strings.Contains(out, "no lock of any kind") || !strings.Contains(out, "nothing ended") {
		t.Errorf("unlock --yes of a key in use as no kind: status %d, %q %q", code, out, errOut)
	}
}

// Without --kind, unlock ends the lock of the kind the key is in use as (here a read
// lock, which the exclusive default used to miss: "0 holder(s) ended" while it stayed
// held), and refuses a key in use as two kinds, naming them.
func TestUnlockFindsKind(t *testing.T) {
	srv := redistest.Start(t)
	a := startApp(t, srv)
	holder, err := guard.New(srv.Client(t), guard.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reader, err := holder.Acquire(ctx, "doc:1", guard.Read())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Release(context.Background())
	writer := a.wait(ctx, "doc:1", 1, guard.Write(), guard.Retry(guard.MaxWait(-1, guard.Fixed(time.Minute, 0))))
	queued(t, srv.Addr(), "doc:1", "--kind", "rw")

	out, errOut, code := guardkit(t, "", "--addr", srv.Addr(), "unlock", "--force", "--yes", "doc:1")
	if code != 0 || !strings.Contains(out, "force-released doc:1 (rw): 1 holder(s) ended") || !strings.Contains(out, "token "+fmt.Sprint(reader.Token())) {
		t.Fatalf("unlock of a read lock without --kind: status %d, %q %q", code, out, errOut)
	}
	select {
	case err := <-writer:
		if err != nil {
			t.Fatalf("the waiting writer: %v, want the lock", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiting writer did not get the lock")
	}
	select {
	case <-reader.Context().Done():
	case <-ctx.Done():
		t.Fatal("the reader was not told that its lease was lost")
	}

	// Two kinds on one key: refused, status 2, both named, nothing ended.
	ex := a.hold(t, "doc:2")
	fair := a.hold(t, "doc:2", guard.Fair())
	out, errOut, code = guardkit(t, "", "--addr", srv.Addr(), "unlock", "--force", "--yes", "doc:2")
	if code != 2 || !strings.Contains(errOut, "in use as 2 kinds (exclusive, fair)") || !strings.Contains(errOut, "nothing ended") {
		t.Errorf("unlock of a key in use as two kinds: status %d, %q %q", code, out, errOut)
	}
	if ex.Err() != nil || fair.Err() != nil {
		t.Errorf("a refused unlock ended a hold: %v, %v", ex.Err(), fair.Err())
	}
	// inspect shows both; with --json it wants --kind.
	out, _, code = guardkit(t, "", "--addr", srv.Addr(), "inspect", "doc:2")
	if code != 0 || !strings.Contains(out, "doc:2 is in use as 2 kinds") || !strings.Contains(out, "doc:2 (exclusive): held") || !strings.Contains(out, "doc:2 (fair): held") {
		t.Errorf("inspect of a key in use as two kinds: status %d:\n%s", code, out)
	}
	_, errOut, code = guardkit(t, "", "--addr", srv.Addr(), "inspect", "--json", "doc:2")
	if code != 2 || !strings.Contains(errOut, "--kind exclusive or --kind fair") {
		t.Errorf("inspect --json of a key in use as two kinds: status %d, %q", code, errOut)
	}
	out, _, code = guardkit(t, "", "--addr", srv.Addr(), "inspect", "doc:3")
	if code != 0 || !strings.HasPrefix(out, "doc:3: free: no lock of any kind") {
		t.Errorf("inspect of a key in use as no kind: status %d, %q", code, out)
	}
}

// An operator with read-only credentials (+@read +evalsha_ro +eval_ro, as an operator
// is often given) reads with inspect, ls and watch; unlock is refused by Redis.
func TestReadOnlyUser(t *testing.T) {
	srv := redistest.Start(t)
	a := startApp(t, srv)
	le := a.hold(t, "doc:1", guard.Read())
	if err := srv.Client(t).Do(context.Background(), "acl", "setuser", "ops", "on", ">s3cret", "~*", "&*",
		"-@all", "+@read", "+evalsha_ro", "+eval_ro").Err(); err != nil {
		t.Fatal(err)
	}
	login := []string{"--addr", srv.Addr(), "--username", "ops", "--password", "s3cret"}
	out, errOut, code := guardkit(t, "", append(login, "inspect", "doc:1")...)
	if code != 0 || !strings.Contains(out, "doc:1 (read): held") || !strings.Contains(out, fmt.Sprint(le.Token())) {
		t.Errorf("inspect as a read-only user: status %d, %q %q", code, out, errOut)
	}
	out, errOut, code = guardkit(t, "", append(login, "ls")...)
	if code != 0 || !strings.Contains(out, "doc:1") || !strings.Contains(out, "1 locks in") {
		t.Errorf("ls as a read-only user: status %d, %q %q", code, out, errOut)
	}
	out, errOut, code = guardkit(t, "q\n", append(login, "watch", "--json")...)
	if code != 0 || !strings.Contains(out, `"key":"doc:1"`) {
		t.Errorf("watch as a read-only user: status %d, %q %q", code, out, errOut)
	}
	_, errOut, code = guardkit(t, "", append(login, "unlock", "--force", "--yes", "doc:1")...)
	if code != 1 || !strings.Contains(errOut, "NOPERM") || le.Err() != nil {
		t.Errorf("unlock as a read-only user: status %d, %q, lease %v; want refused by Redis", code, errOut, le.Err())
	}
}

// A hold whose lock hash lost its fence record (written by hand, or by a tool that
// rewrote the hash) shows a fence no lower than its token.
func TestFenceOutlived(t *testing.T) {
	srv := redistest.Start(t)
	holder, err := guard.New(srv.Client(t), guard.TTL(3*time.Second), guard.FenceRetention(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	le, err := holder.Acquire(context.Background(), "report:q3")
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(context.Background())
	c := srv.Client(t)
	if err := c.HDel(context.Background(), "guard:{report:q3}", "#f").Err(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := guardkit(t, "", "--addr", srv.Addr(), "inspect", "--json", "report:q3")
	var st jsonLock
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Holders) != 1 || st.Fence != le.Token() {
		t.Errorf("inspect of a hold past its fence record: status %d, %s%s; want the fence %d", code, out, errOut, le.Token())
	}
}

// A lock another version of guardkit wrote (another data layout) is listed as such, not
// as free, and inspect and unlock name the layouts rather than read or end it.
func TestOtherLayout(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	until := time.Now().Add(time.Hour).UnixMilli()
	if err := c.HSet(context.Background(), "guard:{order:7}", "#v", "4", "#o", "old", "#e", until, "#n", 1, "#t", 1, "#f", "1").Err(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := guardkit(t, "", "--addr", srv.Addr(), "ls")
	if code != 0 || !strings.Contains(out, "order:7") || !strings.Contains(out, "guardkit data layout 4, not 5") {
		t.Errorf("ls with a lock of layout 4: status %d, %s%s; want it listed as layout 4's", code, out, errOut)
	}
	out, errOut, code = guardkit(t, "", "--addr", srv.Addr(), "ls", "--json")
	var locks []jsonLock
	if code != 0 || json.Unmarshal([]byte(out), &locks) != nil || len(locks) != 1 || !strings.Contains(locks[0].Error, "data layout 4") {
		t.Errorf("ls --json with a lock of layout 4: status %d, %s%s; want it with its error", code, out, errOut)
	}
	for _, cmd := range [][]string{{"inspect", "order:7"}, {"unlock", "--force", "--yes", "order:7"}} {
		out, errOut, code = guardkit(t, "", append([]string{"--addr", srv.Addr()}, cmd...)...)
		if code == 0 || !strings.Contains(errOut, "data layout 4") || strings.Contains(out, "free") {
			t.Errorf("%s of a lock of layout 4: status %d, %s%s; want a failure naming the layout", cmd[0], code, out, errOut)
		}
	}
	if o := c.HGet(context.Background(), "guard:{order:7}", "#o").Val(); o != "old" {
		t.Errorf("layout 4's hold after the command: holder %q; want it as it was", o)
	}
}

// A lock whose key is longer than the default MaxKeyLen is listed, inspected and ended.
func TestLongKey(t *testing.T) {
	srv := redistest.Start(t)
	holder, err := guard.New(srv.Client(t), guard.MaxKeyLen(4096), guard.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	key := "blob:" + strings.Repeat("x", 1100)
	le, err := holder.Acquire(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(context.Background())
	out, errOut, code := guardkit(t, "", "--addr", srv.Addr(), "ls", "--json")
	var locks []jsonLock
	if code != 0 || json.Unmarshal([]byte(out), &locks) != nil || len(locks) != 1 || locks[0].Key != key {
		t.Errorf("ls with a long key: status %d, %.200s %s", code, out, errOut)
	}
	out, errOut, code = guardkit(t, "", "--addr", srv.Addr(), "inspect", key)
	if code != 0 || !strings.Contains(out, "(exclusive): held") {
		t.Errorf("inspect of a long key: status %d, %.200s %s", code, out, errOut)
	}
	out, errOut, code = guardkit(t, "", "--addr", srv.Addr(), "unlock", "--force", "--yes", key)
	if code != 0 || !strings.Contains(out, "1 holder(s) ended") {
		t.Errorf("unlock of a long key: status %d, %.200s %s", code, out, errOut)
	}
}

// watch in a real terminal (tmux): the screen shows the held lock and its waiters, the
// longest wait first, a bare q (no Enter) quits, as in top, and the terminal is left as
// it was (line mode and echo back).
func TestWatchInTerminal(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatalf("tmux is needed to drive watch in a terminal: %v", err)
	}
	srv := redistest.Start(t)
	a := startApp(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.hold(t, "order:o9")
	a.hold(t, "order:o10")
	orders := a.wait(ctx, "order:o9", 2)
	queued(t, srv.Addr(), "order:o9")

	dir := t.TempDir()
	sock := filepath.Join(dir, "tmux.sock")
	stty := filepath.Join(dir, "stty")
	tmux := func(args ...string) (string, error) {
		out, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
		return string(out), err
	}
	// The shell records the terminal's modes once watch has quit.
	script := fmt.Sprintf("%q --addr %s watch --interval 200ms 'order:*'; stty -a > %q", bin, srv.Addr(), stty)
	if out, err := tmux("new-session", "-d", "-s", "watch", "-x", "160", "-y", "30", "sh", "-c", script); err != nil {
		t.Fatalf("tmux: %v: %s", err, out)
	}
	t.Cleanup(func() { _, _ = tmux("kill-server") }) // our server only: its own socket
	var screen string
	deadline := time.Now().Add(15 * time.Second)
	for {
		screen, _ = tmux("capture-pane", "-p", "-t", "watch")
		if strings.Contains(screen, "order:o9") && strings.Contains(screen, "order:o10") && strings.Contains(screen, "orders@web-3 pid 4242") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch's screen after 15s:\n%s", screen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("watch's screen:\n%s", screen)
	lines := strings.Split(screen, "\n")
	var rows []string
	for _, l := range lines {
		if strings.HasPrefix(l, "order:") {
			rows = append(rows, strings.Fields(l)[0]+" waiters="+strings.Fields(l)[3])
		}
	}
	if len(rows) != 2 || rows[0] != "order:o9 waiters=1" || rows[1] != "order:o10 waiters=0" {
		t.Errorf("rows %q, want order:o9 (waited for) first, with its 1 waiting process", rows)
	}
	if !strings.Contains(screen, "q or Ctrl-C quits") {
		t.Errorf("the header does not say that q quits:\n%s", screen)
	}
	if out, err := tmux("send-keys", "-t", "watch", "q"); err != nil {
		t.Fatalf("send-keys: %v: %s", err, out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := tmux("has-session", "-t", "watch"); err != nil {
			break // watch quit, and the session with it
		}
		if time.Now().After(deadline) {
			screen, _ = tmux("capture-pane", "-p", "-t", "watch")
			t.Fatalf("watch did not quit on a bare q:\n%s", screen)
		}
		time.Sleep(50 * time.Millisecond)
	}
	modes, err := os.ReadFile(stty)
	if err != nil {
		t.Fatalf("the terminal's modes after watch: %v", err)
	}
	for _, mode := range []string{"icanon", "echo"} {
		if !regexp.MustCompile(`(^|\s)` + mode + `(\s|$)`).Match(modes) {
			t.Errorf("after watch, the terminal lacks %s: %s", mode, modes)
		}
	}
	cancel()
	<-orders
	<-orders
}

// watch --json prints one array per refresh; the waited-for lock comes first.
func TestWatchJSON(t *testing.T) {
	srv := redistest.Start(t)
	a := startApp(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.hold(t, "a:1")
	a.hold(t, "z:1")
	waiting := a.wait(ctx, "z:1", 1)
	queued(t, srv.Addr(), "z:1")

	cmd := exec.Command(bin, "--addr", srv.Addr(), "watch", "--json", "--interval", "50ms")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // a few refreshes
	_, _ = stdin.Write([]byte("q\n"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("watch --json printed %d refreshes, want several:\n%s", len(lines), out.String())
	}
	var last []jsonLock
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if len(last) != 2 || last[0].Key != "z:1" || last[0].WaitedMs <= 0 || last[1].Key != "a:1" {
		t.Errorf("last refresh %s, want z:1 (waited for) before a:1", lines[len(lines)-1])
	}
	cancel()
	<-waiting
}

// A quorum's servers are shown beside the majority's view; a server down is named.
func TestQuorum(t *testing.T) {
	servers := redistest.StartN(t, 3)
	var addrs []string
	var clients []redis.UniversalClient
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
		clients = append(clients, s.Client(t))
	}
	l, err := guard.NewQuorum(clients, guard.RestartDelay(0), guard.Label("billing@web-1 pid 7"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	le, err := l.Acquire(context.Background(), "pay:1")
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(context.Background())
	servers[2].Kill(t)
	out, errOut, code := guardkit(t, "", "--quorum", strings.Join(addrs, ","), "--timeout", "1s", "inspect", "pay:1")
	if code != 0 {
		t.Fatalf("status %d: %s", code, errOut)
	}
	golden(t, "inspect-quorum.txt", normalize(out))
	out, errOut, code = guardkit(t, "", "--quorum", strings.Join(addrs, ","), "--timeout", "1s", "ls")
	if code != 0 || !strings.Contains(out, "pay:1") || !strings.Contains(out, "billing@web-1 pid 7") {
		t.Errorf("ls on a quorum: status %d:\n%s%s", code, out, errOut)
	}
}

// On a Cluster, ls scans every primary.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterPrimaries(3), redistest.ClusterReplicas(0))
	l, err := guard.New(cl.Client(t), guard.Label("jobs@web-2 pid 9"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 30 {
		le, err := l.Acquire(context.Background(), fmt.Sprintf("job:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		defer le.Release(context.Background())
	}
	out, errOut, code := guardkit(t, "", "--cluster", cl.Addrs()[0], "ls", "--json", "job:*")
	if code != 0 {
		t.Fatalf("status %d: %s", code, errOut)
	}
	var locks []jsonLock
	if err := json.Unmarshal([]byte(out), &locks); err != nil || len(locks) != 30 {
		t.Fatalf("ls --json on a Cluster: %d locks (%v), want 30", len(locks), err)
	}
	if !strings.Contains(errOut, "30 locks in") {
		t.Errorf("ls --json's summary on stderr: %q", errOut)
	}
	out, errOut, code = guardkit(t, "", "--cluster", cl.Addrs()[0], "inspect", "job:7")
	if code != 0 || !strings.HasPrefix(out, "job:7 (exclusive): held") || !strings.Contains(out, "jobs@web-2 pid 9") {
		t.Errorf("inspect without --kind on a Cluster: status %d: %s%s", code, out, errOut)
	}
}

// Behind Sentinel, the command reads the primary the sentinels name.
func TestSentinel(t *testing.T) {
	g := redistest.StartSentinel(t)
	l, err := guard.New(g.Client(t), guard.Label("mail@web-4 pid 11"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	le, err := l.Acquire(context.Background(), "mail:batch")
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(context.Background())
	out, errOut, code := guardkit(t, "", "--sentinel-master", g.MasterName(), "--sentinel-addrs", strings.Join(g.Sentinels(), ","),
		"inspect", "--json", "mail:batch")
	var st jsonLock
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Holders) != 1 || st.Holders[0].Label != "mail@web-4 pid 11" || st.Holders[0].Token != le.Token() {
		t.Errorf("inspect behind Sentinel: status %d: %s%s", code, out, errOut)
	}
}
