package middleware_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
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

// failFast is a Lock middleware that denies a busy lock at once instead of waiting.
func failFast(locker *guard.Locker, key string) echo.MiddlewareFunc {
	return middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker, Key: key, Options: []guard.Option{guard.Retry(guard.NoRetry())},
	})
}

// newEcho returns an Echo whose HTTPErrorHandler also records every error it is given.
func newEcho(errs *errorLog) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	if errs != nil {
		e.HTTPErrorHandler = func(err error, c echo.Context) {
			errs.add(err)
			e.DefaultHTTPErrorHandler(err, c)
		}
	}
	return e
}

// startEcho serves e with Echo's own server on a loopback port until cleanup, and
// returns its base URL.
func startEcho(t testing.TB, e *echo.Echo) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.Listener = ln
	done := make(chan error, 1)
	go func() { done <- e.Start("") }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("echo shutdown: %v", err)
		}
		if err := <-done; err != http.ErrServerClosed {
			t.Errorf("echo Start returned %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// serveHTTPTest serves e with an httptest server until cleanup, and returns its URL.
func serveHTTPTest(t testing.TB, e *echo.Echo) string {
	t.Helper()
	s := httptest.NewServer(e)
	t.Cleanup(s.Close)
	return s.URL
}

// newClient returns an HTTP client that keeps enough idle connections for the
// concurrency of these tests, and closes them at cleanup.
func newClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// reply is what a client received.
type reply struct {
	status int
	header http.Header
	body   string
}

// message decodes Echo's JSON error body.
func (r reply) message() string {
	var m struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		return fmt.Sprintf("<not JSON: %q>", r.body)
	}
	return m.Message
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

// serve runs one request through e without a network, for requests that a real client
// refuses to send (CR/LF in a header).
func serve(e *echo.Echo, req *http.Request) reply {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return reply{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

// intervals logs when handlers enter and leave their critical section.
type intervals struct {
	mu     sync.Mutex
	events []string
}

func (l *intervals) enter(id string) { l.add("+" + id) }
func (l *intervals) exit(id string)  { l.add("-" + id) }

func (l *intervals) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// check fails t unless the log shows exactly n intervals, none overlapping another:
// enter and exit of one handler must follow each other directly.
func (l *intervals) check(t testing.TB, n int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) != 2*n {
		t.Errorf("interval log has %d events, want %d: %v", len(l.events), 2*n, l.events)
	}
	for i := 0; i+1 < len(l.events); i += 2 {
		in, out := l.events[i], l.events[i+1]
		if !strings.HasPrefix(in, "+") || out != "-"+in[1:] {
			t.Fatalf("handlers overlap at event %d: %v", i, l.events[i:min(i+6, len(l.events))])
		}
	}
}

// errorLog records the errors Echo's HTTPErrorHandler is given.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// lockName is the Redis hash of key under guard's default prefix (key must need no
// escaping).
func lockName(key string) string { return "guard:{" + key + "}" }

// isFree reports whether a fresh owner can take key at once; it releases what it took.
func isFree(t testing.TB, l *guard.Locker, key string) bool {
	t.Helper()
	le, err := l.TryAcquire(context.Background(), key)
	if err != nil {
		return false
	}
	if err := le.Release(context.Background()); err != nil {
		t.Errorf("release %q: %v", key, err)
	}
	return true
}

// waitFor waits for ch to be closed, failing t after d.
func waitFor(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// tokenIn returns the fencing token of the innermost Lease carried by ctx.
func tokenIn(ctx context.Context) (int64, bool) {
	if le, ok := guard.LeaseFromContext(ctx); ok {
		return le.Token(), true
	}
	return 0, false
}
