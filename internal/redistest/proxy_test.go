package redistest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// proxied starts a server, a proxy in front of it and a client of the proxy
// whose first connection is already open.
func proxied(t *testing.T, opts ...func(*redis.Options)) (*Server, *Proxy, *redis.Client) {
	t.Helper()
	srv := Start(t)
	p := NewProxy(t, srv.Addr())
	opts = append([]func(*redis.Options){func(o *redis.Options) { o.Addr = p.Addr() }}, opts...)
	rdb := srv.Client(t, opts...)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
	return srv, p, rdb
}

// rawConn is a plain TCP connection speaking RESP, for faults that need
// byte-level control.
type rawConn struct {
	net.Conn
	rd *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, rd: bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, cmd string) {
	t.Helper()
	if _, err := io.WriteString(c, cmd+"\r\n"); err != nil {
		t.Fatal(err)
	}
}

func (c *rawConn) read(within time.Duration) (string, error) {
	if err := c.SetReadDeadline(time.Now().Add(within)); err != nil {
		return "", err
	}
	line, err := c.rd.ReadString('\n')
	return strings.TrimSuffix(line, "\r\n"), err
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

func TestProxyForwards(t *testing.T) {
	ctx := context.Background()
	_, _, rdb := proxied(t)
	if err := rdb.Set(ctx, "k", strings.Repeat("x", 200<<10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.Get(ctx, "k").Result()
	if err != nil || len(got) != 200<<10 {
		t.Fatalf("GET of a value larger than one chunk: %d bytes, %v", len(got), err)
	}
}

func TestProxyDropNextReplyMakesClientRetry(t *testing.T) {
	ctx := context.Background()
	srv, p, rdb := proxied(t) // default MaxRetries
	before := srv.CommandCalls(t)["incr"]

	p.DropNextReply()
	n, err := rdb.Incr(ctx, "n").Result()
	if err != nil {
		t.Fatalf("INCR after a dropped reply: %v (go-redis should have retried)", err)
	}
	// The server ran INCR for the dropped reply and again for the retry.
	if n != 2 {
		t.Fatalf("INCR = %d, want 2", n)
	}
	if got := srv.CommandCalls(t)["incr"] - before; got != 2 {
		t.Fatalf("server executed incr %d times, want 2", got)
	}

	// The fault is one-shot.
	if n, err := rdb.Incr(ctx, "n").Result(); err != nil || n != 3 {
		t.Fatalf("next INCR = %d, %v; want 3", n, err)
	}
}

func TestProxyDropNextReplyClientSeesEOF(t *testing.T) {
	_, p, _ := proxied(t)
	c := dialRaw(t, p.Addr())
	p.DropNextReply()
	c.send(t, "PING")
	if _, err := c.read(2 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read after a dropped reply: err = %v, want EOF", err)
	}
}

func TestProxyDelayNextReply(t *testing.T) {
	ctx := context.Background()
	srv, p, rdb := proxied(t, func(o *redis.Options) { o.ReadTimeout = 200 * time.Millisecond })
	before := srv.CommandCalls(t)["incr"]

	// Beyond the read timeout: the client gives up on an INCR the server has
	// executed and runs it again on a new connection.
	p.DelayNextReply(time.Second)
	n, err := rdb.Incr(ctx, "n").Result()
	if err != nil {
		t.Fatalf("INCR with a delayed reply: %v (go-redis should have retried)", err)
	}
	if n != 2 {
		t.Fatalf("INCR = %d, want 2", n)
	}
	if got := srv.CommandCalls(t)["incr"] - before; got != 2 {
		t.Fatalf("server executed incr %d times, want 2", got)
	}

	// Within the read timeout: no retry.
	p.DelayNextReply(20 * time.Millisecond)
	if n, err := rdb.Incr(ctx, "n").Result(); err != nil || n != 3 {
		t.Fatalf("INCR with a short delay = %d, %v; want 3", n, err)
	}
	if got := srv.CommandCalls(t)["incr"] - before; got != 3 {
		t.Fatalf("server executed incr %d times, want 3", got)
	}
}

func TestProxyLatency(t *testing.T) {
	ctx := context.Background()
	_, p, rdb := proxied(t, func(o *redis.Options) {
		o.ReadTimeout = 100 * time.Millisecond
		o.MaxRetries = -1
	})
	const latency = 150 * time.Millisecond
	p.SetLatency(latency)
	if err := rdb.Ping(ctx).Err(); !isTimeout(err) {
		t.Fatalf("PING with latency beyond the read timeout: err = %v, want a timeout", err)
	}

	c := dialRaw(t, p.Addr())
	start := time.Now()
	c.send(t, "PING")
	if reply, err := c.read(2 * time.Second); err != nil || reply != "+PONG" {
		t.Fatalf("raw PING with latency: %q, %v", reply, err)
	}
	if elapsed := time.Since(start); elapsed < latency {
		t.Fatalf("reply arrived after %v, before the %v latency", elapsed, latency)
	}

	p.SetLatency(0)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with latency off: %v", err)
	}
}

func TestProxyBlackholeHoldsThenForwards(t *testing.T) {
	ctx := context.Background()
	srv, p, rdb := proxied(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
	})
	c := dialRaw(t, p.Addr())
	c.send(t, "PING")
	if reply, err := c.read(2 * time.Second); err != nil || reply != "+PONG" {
		t.Fatalf("raw PING: %q, %v", reply, err)
	}
	before := srv.CommandCalls(t)["echo"]

	p.Blackhole(true)
	p.Blackhole(true) // idempotent
	c.send(t, "ECHO held")
	// The connection stays open: the read times out instead of failing.
	if _, err := c.read(200 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("read while blackholed: err = %v, want a timeout", err)
	}
	if got := srv.CommandCalls(t)["echo"] - before; got != 0 {
		t.Fatalf("server executed echo %d times while blackholed, want 0", got)
	}
	if err := rdb.Ping(ctx).Err(); !isTimeout(err) {
		t.Fatalf("go-redis PING while blackholed: err = %v, want a timeout", err)
	}

	p.Blackhole(false)
	// What was held is delivered on the same connection.
	if header, err := c.read(2 * time.Second); err != nil || header != "$4" {
		t.Fatalf("read after the blackhole lifted: %q, %v; want the bulk header $4", header, err)
	}
	if reply, err := c.read(2 * time.Second); err != nil || reply != "held" {
		t.Fatalf("ECHO after the blackhole lifted: %q, %v; want held", reply, err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("go-redis PING after the blackhole lifted: %v", err)
	}
}

func TestProxyResetConns(t *testing.T) {
	ctx := context.Background()
	_, p, rdb := proxied(t)
	c := dialRaw(t, p.Addr())
	c.send(t, "PING")
	if reply, err := c.read(2 * time.Second); err != nil || reply != "+PONG" {
		t.Fatalf("raw PING: %q, %v", reply, err)
	}

	p.ResetConns()
	if _, err := c.read(2 * time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetConns: err = %v, want connection reset", err)
	}
	// New connections still go through, and go-redis recovers.
	c2 := dialRaw(t, p.Addr())
	c2.send(t, "PING")
	if reply, err := c2.read(2 * time.Second); err != nil || reply != "+PONG" {
		t.Fatalf("raw PING on a new connection: %q, %v", reply, err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("go-redis PING after ResetConns: %v", err)
	}
}

func TestProxyDeadTargetClosesClient(t *testing.T) {
	srv, p, _ := proxied(t)
	srv.Kill(t)
	c := dialRaw(t, p.Addr())
	if _, err := c.read(2 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("read through a proxy to a killed server: err = %v, want EOF", err)
	}
}

func TestProxyCloseEndsConnections(t *testing.T) {
	_, p, _ := proxied(t)
	c := dialRaw(t, p.Addr())
	p.Blackhole(true)
	c.send(t, "PING") // held by a pump that Close must wake
	p.Close()
	p.Close() // idempotent
	if _, err := c.read(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("read after Close: err = %v, want the connection closed", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
}

func TestProxyRejectsNonLoopbackTarget(t *testing.T) {
	msg := expectFatal(t, func(tb testing.TB) { NewProxy(tb, "192.0.2.1:6379") })
	if !strings.Contains(msg, "loopback") {
		t.Fatalf("message %q does not mention loopback", msg)
	}
}
