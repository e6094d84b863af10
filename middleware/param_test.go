package middleware_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// spellings are ways to write an order ID in a path, some of which Echo's c.Param reads
// alike: a%2Fb (order "a/b", Go keeps the raw path) and a%252Fb (order "a%2Fb", Go
// keeps none) both read "a%2Fb".
var spellings = []string{"a%2Fb", "a%252Fb", "42", "4%32", "%7B", "%257B", "%25", "%2525", "x%20y", "%E4%BD%A0"}

// reading is what a handler reads for one spelling, on a route without a lock.
type reading struct{ param, value string } // c.Param("id"), middleware.Param(c, "id")

// probe returns what handlers read for each spelling, asking a route without a lock.
func probe(t *testing.T, client *http.Client, base string) map[string]reading {
	t.Helper()
	r := make(map[string]reading, len(spellings))
	for _, s := range spellings {
		rep := do(t, client, http.MethodGet, base+"/probe/"+s+"/pay", nil)
		p, v, ok := strings.Cut(rep.body, "\n")
		if rep.status != http.StatusOK || !ok {
			t.Fatalf("probe %s: %d %q", s, rep.status, rep.body)
		}
		r[s] = reading{p, v}
	}
	return r
}

// Two requests whose handlers read the same c.Param, or the same middleware.Param,
// never run at once; middleware.Param is the value the lock used; a request whose
// c.Param would read like another value's is refused with 400. The pair,
// /orders/a%2Fb/pay and /orders/a%252Fb/pay, is one such: while the first runs, the
// second is refused, and a burst of both, sent together, never overlaps. The server is
// a real Echo server over httptest; the lock is on a real redis-server.
func TestParamFollowsHandler(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)

	type entered struct {
		reading
		key string // the lease's key
	}
	inside := make(chan entered)
	release := make(chan struct{})
	hold := func(c echo.Context) error {
		le, ok := guard.LeaseFromContext(c.Request().Context())
		if !ok {
			return c.String(http.StatusInternalServerError, "no lease")
		}
		inside <- entered{reading{c.Param("id"), middleware.Param(c, "id")}, le.Key()}
		<-release
		return c.NoContent(http.StatusOK)
	}
	e.GET("/probe/:id/pay", func(c echo.Context) error {
		return c.String(http.StatusOK, c.Param("id")+"\n"+middleware.Param(c, "id"))
	})
	e.POST("/orders/:id/pay", hold, failFast(locker, "order:{param.id}"))
	base := serveHTTPTest(t, e)
	client := newClient(t)
	read := probe(t, client, base)
	if a, b := read["a%2Fb"], read["a%252Fb"]; a.param != b.param || a.value == b.value {
		t.Fatalf("Echo reads a%%2Fb as %+v and a%%252Fb as %+v: the test needs one c.Param for two values", a, b)
	}

	// post sends a POST in the background; its reply arrives on the returned channel.
	post := func(spelling string) <-chan reply {
		ch := make(chan reply, 1)
		go func() { ch <- do(t, client, http.MethodPost, base+"/orders/"+spelling+"/pay", nil) }()
		return ch
	}
	// start sends a POST and returns what its handler read, or false with the reply
	// when the handler did not run.
	start := func(spelling string) (entered, <-chan reply, bool) {
		replied := post(spelling)
		select {
		case in := <-inside:
			return in, replied, true
		case r := <-replied:
			replied := make(chan reply, 1)
			replied <- r
			return entered{}, replied, false
		}
	}

	for _, first := range spellings {
		for _, second := range spellings {
			t.Run(first+" then "+second, func(t *testing.T) {
				a, aReplied, ran := start(first)
				if !ran {
					r := <-aReplied
					if r.status != http.StatusBadRequest || !strings.Contains(r.message(), "{param.id} is percent-encoded twice") {
						t.Fatalf("%s alone: %d %q, want 200 or the 400 of a value encoded twice", first, r.status, r.body)
					}
					if u, err := url.PathUnescape(read[first].param); err == nil && u == read[first].value {
						t.Errorf("%s refused, but c.Param %q decodes to its value %q", first, read[first].param, read[first].value)
					}
					return
				}
				if a.reading != read[first] || a.key != "order:"+a.value {
					t.Errorf("%s: the handler read %+v under key %q; want %+v (as on a route without a lock) and key order:<Param>", first, a, a.key, read[first])
				}
				b, bReplied, ran := start(second)
				if ran { // both run at once: they must read different values everywhere
					if a.param == b.param || a.value == b.value || a.key == b.key {
						t.Errorf("%s and %s ran at once, reading %+v and %+v", first, second, a, b)
					}
					release <- struct{}{}
				}
				release <- struct{}{}
				ra, rb := <-aReplied, <-bReplied
				if ra.status != http.StatusOK {
					t.Errorf("%s: %d %q", first, ra.status, ra.body)
				}
				if !ran && read[second].param == a.param && rb.status != http.StatusConflict && rb.status != http.StatusBadRequest {
					t.Errorf("%s while %s ran: %d %q, want 409 or 400", second, first, rb.status, rb.body)
				}
			})
		}
	}

	t.Run("burst of the issue's pair", func(t *testing.T) {
		e := newEcho(nil)
		var (
			mu       sync.Mutex
			running  = map[string]int{} // c.Param → handlers running
			overlaps []string
		)
		e.POST("/orders/:id/pay", func(c echo.Context) error {
			p := c.Param("id")
			mu.Lock()
			running[p]++
			if running[p] > 1 {
				overlaps = append(overlaps, p)
			}
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // some work, so that a missing lock shows
			mu.Lock()
			running[p]--
			mu.Unlock()
			return c.NoContent(http.StatusOK)
		}, middleware.LockWithConfig(middleware.LockConfig{Locker: locker, Key: "order:{param.id}", MaxWait: -1}))
		base := serveHTTPTest(t, e)
		const n = 20
		var wg sync.WaitGroup
		statuses := make(chan string, 2*n)
		for i := range 2 * n {
			spelling := []string{"a%2Fb", "a%252Fb"}[i%2]
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := do(t, client, http.MethodPost, base+"/orders/"+spelling+"/pay", nil)
				statuses <- fmt.Sprintf("%s %d", spelling, r.status)
			}()
		}
		wg.Wait()
		close(statuses)
		count := map[string]int{}
		for s := range statuses {
			count[s]++
		}
		if count["a%2Fb 200"] != n || count["a%252Fb 400"] != n {
			t.Errorf("replies %v, want %d × 200 for a%%2Fb and %d × 400 for a%%252Fb", count, n, n)
		}
		if len(overlaps) > 0 {
			t.Errorf("handlers reading one c.Param ran at once: %v", overlaps)
		}
	})
}
