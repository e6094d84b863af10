package middleware_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestQuorumLocker: the middleware takes a quorum Locker (guard.NewQuorum over three
// servers) like any other. A route's lock is held on the servers while its handler runs
// (a concurrent request for the same account gets 409), with a fencing token in the
// handler's context, and is released on all of them afterwards.
func TestQuorumLocker(t *testing.T) {
	var clients []redis.UniversalClient
	for _, srv := range redistest.StartN(t, 3) {
		clients = append(clients, srv.Client(t))
	}
	locker, err := guard.NewQuorum(clients, guard.RestartDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })

	inside, leave := make(chan int64, 1), make(chan struct{})
	e := newEcho(nil)
	e.POST("/accounts/:id/withdraw", func(c echo.Context) error {
		token, _ := tokenIn(c.Request().Context())
		inside <- token
		<-leave
		return c.String(http.StatusOK, "ok")
	}, failFast(locker, "account:{param.id}"))
	url := serveHTTPTest(t, e) + "/accounts/42/withdraw"
	client := newClient(t)

	first := make(chan reply, 1)
	go func() { first <- do(t, client, http.MethodPost, url, nil) }()
	var token int64
	select {
	case token = <-inside:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached its handler")
	}
	if token <= 0 {
		t.Errorf("fencing token in the handler's context: %d", token)
	}
	held := 0
	for _, c := range clients {
		if redistest.Holder(t, t.Context(), c, "guard:{account:42}") != "" {
			held++
		}
	}
	if held < 2 {
		t.Errorf("the route's lock is held on %d of 3 servers while its handler runs, want a majority", held)
	}
	if r := do(t, client, http.MethodPost, url, nil); r.status != http.StatusConflict {
		t.Errorf("a concurrent request: %d %q, want 409", r.status, r.body)
	}
	close(leave)
	if r := <-first; r.status != http.StatusOK {
		t.Fatalf("first request: %d %q", r.status, r.body)
	}
	// The release returns once a majority confirmed it; the last server follows a round
	// trip later.
	deadline := time.Now().Add(2 * time.Second)
	for i, c := range clients {
		for redistest.Holder(t, t.Context(), c, "guard:{account:42}") != "" {
			if time.Now().After(deadline) {
				t.Fatalf("server %d still holds the lock 2s after the response", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if r := do(t, client, http.MethodPost, url, nil); r.status != http.StatusOK {
		t.Errorf("a request after the release: %d %q, want 200", r.status, r.body)
	}
}
