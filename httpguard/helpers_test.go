package httpguard_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// newLocker returns a Locker on a new client of srv, closed at cleanup.
func newLocker(t testing.TB, srv *redistest.Server, opts ...guard.Option) (*guard.Locker, *redis.Client) {
	t.Helper()
	c := srv.Client(t)
	l, err := guard.New(c, opts...)
	if err != nil {
		t.Fatalf("guard.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, c
}

// serveHTTP serves h with an httptest server until cleanup, and returns its URL.
func serveHTTP(t testing.TB, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

// newClient returns an HTTP client that keeps enough idle connections for the
// concurrency of these tests over rt (http.Transport when nil), closed at cleanup.
func newClient(t testing.TB, wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	var rt http.RoundTripper = tr
	if wrap != nil {
		rt = wrap(tr)
	}
	return &http.Client{Transport: rt, Timeout: 20 * time.Second}
}

// reply is what a client received.
type reply struct {
	status int
	header http.Header
	body   string
}

func do(t testing.TB, client *http.Client, method, url string, header http.Header) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	return send(t, client, req)
}

func send(t testing.TB, client *http.Client, req *http.Request) reply {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Error(err) // Error, not Fatal: called from goroutines
		return reply{}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// serve runs one request through h without a network, for requests a real client or
// server refuses (a header over the server's limit).
func serve(h http.Handler, req *http.Request) reply {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return reply{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

// counter is a read-modify-write counter that loses updates unless its callers take
// turns: add yields between the read and the write.
type counter struct {
	mu sync.Mutex // guards only the memory model, not the read-modify-write
	n  int
}

func (c *counter) add() {
	c.mu.Lock()
	n := c.n
	c.mu.Unlock()
	time.Sleep(time.Millisecond) // another request would read the same n here
	c.mu.Lock()
	c.n = n + 1
	c.mu.Unlock()
}

func (c *counter) value() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func mustSigner(t testing.TB, id, secret string) *ctxid.Signer {
	t.Helper()
	s, err := ctxid.NewSigner([]ctxid.Key{{ID: id, Secret: []byte(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// logBuffer is a slog.Logger writing text into a buffer, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// isFree reports whether a fresh owner can take key at once; it releases what it took.
func isFree(t testing.TB, l *guard.Locker, key string) bool {
	t.Helper()
	le, err := l.TryAcquire(t.Context(), key)
	if err != nil {
		return false
	}
	if err := le.Release(t.Context()); err != nil {
		t.Errorf("release %q: %v", key, err)
	}
	return true
}
