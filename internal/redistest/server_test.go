package redistest

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// alive reports whether a process with the given PID exists.
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func TestStartStop(t *testing.T) {
	srv := Start(t)
	if host, _, err := net.SplitHostPort(srv.Addr()); err != nil || host != "127.0.0.1" {
		t.Fatalf("Addr() = %q, want 127.0.0.1:port", srv.Addr())
	}
	pid := srv.PID()
	if pid <= 0 || !alive(pid) {
		t.Fatalf("PID() = %d, want a running process", pid)
	}
	ctx := context.Background()
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	cfg, err := rdb.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"} {
		if cfg[key] != want {
			t.Errorf("CONFIG GET %s = %q, want %q", key, cfg[key], want)
		}
	}

	srv.Stop()
	if alive(pid) {
		t.Fatalf("redis-server pid %d still exists after Stop", pid)
	}
	if srv.PID() != 0 {
		t.Fatalf("PID() after Stop = %d, want 0", srv.PID())
	}
	if _, err := roundTrip(srv.Addr(), time.Second, "PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	srv.Stop() // idempotent
}

func TestStopPausedServer(t *testing.T) {
	srv := Start(t)
	pid := srv.PID()
	srv.Pause(t)
	srv.Stop()
	if alive(pid) {
		t.Fatalf("paused redis-server pid %d still exists after Stop", pid)
	}
}

func TestStartN(t *testing.T) {
	servers := StartN(t, 3)
	seen := make(map[string]bool)
	for _, srv := range servers {
		if seen[srv.Addr()] {
			t.Fatalf("address %s used twice", srv.Addr())
		}
		seen[srv.Addr()] = true
		if err := srv.Client(t).Ping(context.Background()).Err(); err != nil {
			t.Fatalf("PING %s: %v", srv.Addr(), err)
		}
	}
}

func TestRestartKeepsAddressDropsData(t *testing.T) {
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr, pid := srv.Addr(), srv.PID()

	srv.Restart(t)
	if srv.Addr() != addr {
		t.Fatalf("Addr() after Restart = %s, want %s", srv.Addr(), addr)
	}
	if srv.PID() == pid || srv.PID() <= 0 {
		t.Fatalf("PID() after Restart = %d, was %d; want a new process", srv.PID(), pid)
	}
	if alive(pid) {
		t.Fatalf("old redis-server pid %d still exists after Restart", pid)
	}
	// The pooled connection died with the old process; go-redis retries on a
	// new one.
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: err = %v, want redis.Nil", err)
	}
	if calls := srv.CommandCalls(t)["set"]; calls != 0 {
		t.Fatalf("set calls after Restart = %d, want 0", calls)
	}
}

func TestPauseResume(t *testing.T) {
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	srv.Pause(t)
	err := rdb.Ping(ctx).Err()
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("PING while paused: err = %v, want a timeout", err)
	}

	srv.Resume(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

func TestKillRestart(t *testing.T) {
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialerRetries = 1
	})
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	pid := srv.PID()

	srv.Kill(t)
	if alive(pid) {
		t.Fatalf("redis-server pid %d still exists after Kill", pid)
	}
	if srv.PID() != 0 {
		t.Fatalf("PID() after Kill = %d, want 0", srv.PID())
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	srv.Kill(t) // killing a dead server does nothing

	srv.Restart(t)
	// The first command may still meet a connection of the old process.
	err := rdb.Ping(ctx).Err()
	if err != nil {
		err = rdb.Ping(ctx).Err()
	}
	if err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestRestartWaitsForBusyPort(t *testing.T) {
	srv := Start(t)
	srv.Kill(t)
	ln, err := net.Listen("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// A port held by another process is reported as such, and the dead
	// redis-server is reaped.
	srv.mu.Lock()
	err = srv.launch()
	srv.mu.Unlock()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("launch on a busy port: err = %v, want errPortInUse", err)
	}
	if srv.PID() != 0 {
		t.Fatalf("PID() after a failed launch = %d, want 0", srv.PID())
	}

	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(300 * time.Millisecond)
		_ = ln.Close()
	}()
	srv.Restart(t)
	<-released
	if err := srv.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after Restart on a released port: %v", err)
	}
}

func TestKillPausedServer(t *testing.T) {
	srv := Start(t)
	pid := srv.PID()
	srv.Pause(t)
	srv.Kill(t)
	if alive(pid) {
		t.Fatalf("paused redis-server pid %d still exists after Kill", pid)
	}
	srv.Restart(t)
	if err := srv.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after Restart of a killed paused server: %v", err)
	}
}

func TestArgs(t *testing.T) {
	srv := Start(t, Args("--maxmemory", "1mb"))
	got, err := srv.Client(t).ConfigGet(context.Background(), "maxmemory").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["maxmemory"] != "1048576" {
		t.Fatalf("CONFIG GET maxmemory = %q, want 1048576", got["maxmemory"])
	}
	// Arguments survive a restart.
	srv.Restart(t)
	got, err = srv.Client(t).ConfigGet(context.Background(), "maxmemory").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["maxmemory"] != "1048576" {
		t.Fatalf("CONFIG GET maxmemory after Restart = %q, want 1048576", got["maxmemory"])
	}
}

func TestArgsCannotMoveTheServer(t *testing.T) {
	msg := expectFatal(t, func(tb testing.TB) { Start(tb, Args("--bind", "0.0.0.0")) })
	if !strings.Contains(msg, "--bind") {
		t.Fatalf("message %q does not name --bind", msg)
	}
}

func TestCommandCallsDeltas(t *testing.T) {
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t)
	sha, err := rdb.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	before := srv.CommandCalls(t)
	for range 3 {
		if err := rdb.Publish(ctx, "ch", "m").Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := rdb.EvalSha(ctx, sha, nil).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.ConfigGet(ctx, "maxmemory").Err(); err != nil {
		t.Fatal(err)
	}
	after := srv.CommandCalls(t)
	for name, want := range map[string]int64{"publish": 3, "evalsha": 2, "config|get": 1, "info": 1, "set": 0} {
		if got := after[name] - before[name]; got != want {
			t.Errorf("%s calls: %d, want %d", name, got, want)
		}
	}
}

func TestStat(t *testing.T) {
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := srv.Stat(t, "total_commands_processed")
	for range 5 {
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The five PINGs and the INFO that read before.
	if got := srv.Stat(t, "total_commands_processed") - before; got != 6 {
		t.Fatalf("total_commands_processed grew by %d, want 6", got)
	}
	if got := srv.Stat(t, "connected_clients"); got < 1 {
		t.Fatalf("connected_clients = %d, want at least the client's connection", got)
	}

	msg := expectFatal(t, func(tb testing.TB) { srv.Stat(tb, "no_such_field") })
	if !strings.Contains(msg, "no_such_field") {
		t.Errorf("unknown field message %q does not name the field", msg)
	}
	msg = expectFatal(t, func(tb testing.TB) { srv.Stat(tb, "redis_version") })
	if !strings.Contains(msg, "not an integer") {
		t.Errorf("text field message %q does not say it is not an integer", msg)
	}
}

func TestStartWithoutRedisServerFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	msg := expectFatal(t, func(tb testing.TB) { Start(tb) })
	for _, want := range []string{"redis-server", "make test", "apt-get install redis-server"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
}

func TestStartBadArgsQuotesLog(t *testing.T) {
	msg := expectFatal(t, func(tb testing.TB) { Start(tb, Args("--no-such-directive", "1")) })
	if !strings.Contains(msg, "no-such-directive") || !strings.Contains(msg, "end of redis logs") {
		t.Fatalf("message %q does not quote the redis-server output", msg)
	}
}

func TestOperationsOnStoppedServerFail(t *testing.T) {
	srv := Start(t)
	srv.Stop()
	for name, op := range map[string]func(testing.TB){
		"Pause":        srv.Pause,
		"Resume":       srv.Resume,
		"CommandCalls": func(tb testing.TB) { srv.CommandCalls(tb) },
	} {
		msg := expectFatal(t, op)
		if !strings.Contains(msg, srv.Addr()) {
			t.Errorf("%s on a stopped server: message %q does not name the address", name, msg)
		}
	}
}

func TestNewServer(t *testing.T) {
	srv, err := NewServer(Args("--maxmemory", "1mb"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	dir, pid := srv.base, srv.PID()
	if got, err := call(srv.Addr(), time.Second, "CONFIG", "GET", "maxmemory"); err != nil || fieldMap(got)["maxmemory"] != "1048576" {
		t.Fatalf("CONFIG GET maxmemory = %v, %v; want 1048576", got, err)
	}
	srv.Stop()
	if alive(pid) {
		t.Fatalf("redis-server pid %d still exists after Stop", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory %s after Stop: %v, want it removed", dir, err)
	}
	// Stop leaves the server restartable; Restart makes the directory anew.
	srv.Restart(t)
	if _, err := roundTrip(srv.Addr(), time.Second, "PING"); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}

	if _, err := NewServer(Args("--bind", "0.0.0.0")); err == nil || !strings.Contains(err.Error(), "--bind") {
		t.Fatalf("NewServer with --bind: err = %v, want one naming --bind", err)
	}
}
