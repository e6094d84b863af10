package redistest

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// proxyDialTimeout bounds the proxy's connection to its target, so a
	// client of a dead target sees its connection closed promptly.
	proxyDialTimeout = 2 * time.Second
	// chunkSize is the read buffer of each direction of a connection.
	chunkSize = 32 << 10
)

// Proxy is a TCP proxy on 127.0.0.1 that injects faults between clients and
// a Redis server. Each accepted connection gets its own connection to the
// target; bytes are forwarded in chunks as they are read, and the faults
// apply per chunk. A Redis reply small enough to arrive in one read is one
// chunk.
//
// Faults that act on a "next reply" are one-shot and shared by all
// connections: the first chunk any connection reads from the server after
// the call takes it.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close, ends pending dials
	cancel context.CancelFunc
	wg     sync.WaitGroup

	latency   atomic.Int64 // time.Duration added to every server->client chunk
	delayNext atomic.Int64 // time.Duration added to the next server->client chunk
	dropNext  atomic.Bool

	mu     sync.Mutex
	links  map[*link]struct{}
	hold   chan struct{} // non-nil while blackholed; closed when lifted
	closed bool
}

// link is one proxied connection: the client's and the proxy's own to the
// target.
type link struct {
	p      *Proxy
	client net.Conn
	server net.Conn
	done   chan struct{} // closed by close; wakes sleeping and held pumps
	once   sync.Once
}

// NewProxy starts a proxy on 127.0.0.1:0 that forwards to target, which must
// be a loopback address such as [Server.Addr]. The proxy is closed at tb's
// cleanup.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		tb.Fatalf("redistest: proxy target %q: %v", target, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		tb.Fatalf("redistest: proxy target %q is not a loopback address; tests stay on 127.0.0.1", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every server->client chunk by d from then on; 0 turns
// the delay off. Chunks of one connection stay in order, so a connection's
// replies queue behind a delayed one.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// DelayNextReply holds only the next server->client chunk for d (on top of
// any latency). With d beyond a client's read timeout the client gives up on
// a command the server has already executed.
func (p *Proxy) DelayNextReply(d time.Duration) { p.delayNext.Store(int64(d)) }

// DropNextReply swallows the next server->client chunk and closes that
// client connection, so the client reads EOF after the server has executed
// the command: the situation in which a retrying client runs a command
// twice.
func (p *Proxy) DropNextReply() { p.dropNext.Store(true) }

// Blackhole holds traffic in both directions while on, like a network
// partition: connections stay open, new connections are accepted, and
// nothing is forwarded. Turning it off forwards everything held, in order,
// as TCP would after the partition heals; a connection its client closed in
// the meantime still delivers the bytes the client sent before closing.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.hold == nil:
		p.hold = make(chan struct{})
	case !on && p.hold != nil:
		close(p.hold)
		p.hold = nil
	}
}

// ResetConns closes every current connection abruptly: both the client's and
// the server's side are closed with SO_LINGER 0, so each peer gets a TCP RST
// ("connection reset by peer"). The proxy keeps accepting new connections.
func (p *Proxy) ResetConns() {
	for _, l := range p.snapshot() {
		l.close(true)
	}
}

// Close stops accepting, closes every connection and waits until all of the
// proxy's goroutines have ended. It is idempotent and registered as cleanup
// by [NewProxy].
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	for _, l := range p.snapshot() {
		l.close(false)
	}
	p.wg.Wait()
}

func (p *Proxy) snapshot() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		// Safe while Close waits: this goroutine's own count keeps the
		// group above zero.
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects c to the target and pumps both directions until either
// side ends.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: proxyDialTimeout}
	s, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		// The client sees its connection closed, as with a dead server
		// behind a load balancer.
		_ = c.Close()
		return
	}
	l := &link{p: p, client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close(false)
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		l.pump(c, s, false)
	}()
	l.pump(s, c, true)
}

// pump copies src to dst chunk by chunk, applying the proxy's faults, and
// closes the link when either side fails.
func (l *link) pump(src, dst net.Conn, fromServer bool) {
	defer l.close(false)
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.forward(dst, buf[:n], fromServer) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward writes one chunk to dst after the faults that apply to it. It
// reports false when the link must end.
func (l *link) forward(dst net.Conn, chunk []byte, fromServer bool) bool {
	p := l.p
	if fromServer {
		if p.dropNext.CompareAndSwap(true, false) {
			return false
		}
		d := time.Duration(p.latency.Load()) + time.Duration(p.delayNext.Swap(0))
		if d > 0 && !l.sleep(d) {
			return false
		}
	}
	if !l.waitHold() {
		return false
	}
	_, err := dst.Write(chunk)
	return err == nil
}

// sleep waits for d or until the link closes; it reports whether the link
// is still open.
func (l *link) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// waitHold waits while the proxy is blackholed; it reports whether the link
// is still open.
func (l *link) waitHold() bool {
	for {
		l.p.mu.Lock()
		hold := l.p.hold
		l.p.mu.Unlock()
		if hold == nil {
			return true
		}
		select {
		case <-hold:
		case <-l.done:
			return false
		}
	}
}

// close closes both connections once, with RST instead of FIN when reset is
// set, and forgets the link.
func (l *link) close(reset bool) {
	l.once.Do(func() {
		if reset {
			for _, c := range []net.Conn{l.client, l.server} {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
			}
		}
		_ = l.client.Close()
		_ = l.server.Close()
		close(l.done)
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}
