package httpguard_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// routers builds the same guarded route, POST /orders/{id}/pay, on the standard
// ServeMux, chi and gorilla/mux, as their users would write it.
var routers = []struct {
	name  string
	build func(config httpguard.LockConfig, pay http.HandlerFunc) http.Handler
}{
	{"ServeMux", func(config httpguard.LockConfig, pay http.HandlerFunc) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /orders/{id}/pay", httpguard.LockWithConfig(config)(pay))
		return mux
	}},
	{"chi", func(config httpguard.LockConfig, pay http.HandlerFunc) http.Handler {
		config.PathValue = chi.URLParam
		config.Route = func(r *http.Request) string { return chi.RouteContext(r.Context()).RoutePattern() }
		r := chi.NewRouter()
		r.With(httpguard.LockWithConfig(config)).Post("/orders/{id}/pay", pay)
		return r
	}},
	{"gorilla", func(config httpguard.LockConfig, pay http.HandlerFunc) http.Handler {
		config.PathValue = func(r *http.Request, name string) string { return mux.Vars(r)[name] }
		config.Route = func(r *http.Request) string { t, _ := mux.CurrentRoute(r).GetPathTemplate(); return t }
		r := mux.NewRouter()
		r.Handle("/orders/{id}/pay", httpguard.LockWithConfig(config)(pay)).Methods(http.MethodPost)
		return r
	}},
}

// TestRoutersExclusive: on each router, 20 concurrent requests for one order, each a
// read-modify-write of a counter that loses updates when two overlap, all succeed (they
// wait their turn) and the counter ends at exactly 20. The handler's lease is on the
// key the route's path value names.
func TestRoutersExclusive(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	for _, rt := range routers {
		t.Run(rt.name, func(t *testing.T) {
			var (
				n    counter
				mu   sync.Mutex
				keys = map[string]int{}
			)
			pay := func(w http.ResponseWriter, r *http.Request) {
				le, ok := guard.LeaseFromContext(r.Context())
				if !ok {
					http.Error(w, "no lease", http.StatusInternalServerError)
					return
				}
				mu.Lock()
				keys[le.Key()]++
				mu.Unlock()
				n.add()
				w.WriteHeader(http.StatusNoContent)
			}
			base := serveHTTP(t, rt.build(httpguard.LockConfig{Locker: locker, Key: "order:{path.id}", MaxWait: -1}, pay))
			client := newClient(t, nil)
			const requests = 20
			var wg sync.WaitGroup
			statuses := make(chan int, requests)
			for range requests {
				wg.Add(1)
				go func() {
					defer wg.Done()
					statuses <- do(t, client, http.MethodPost, base+"/orders/7/pay", nil).status
				}()
			}
			wg.Wait()
			close(statuses)
			for s := range statuses {
				if s != http.StatusNoContent {
					t.Errorf("status %d, want 204", s)
				}
			}
			if got := n.value(); got != requests {
				t.Errorf("counter %d after %d guarded requests: updates were lost", got, requests)
			}
			if len(keys) != 1 || keys["order:7"] != requests {
				t.Errorf("leases by key %v, want order:7 × %d", keys, requests)
			}
			if !isFree(t, locker, "order:7") {
				t.Error("order:7 still held after every request answered")
			}
		})
	}
}

// TestRoutersBusyRetryAfter: on each router, a request that finds its order held past
// its wait gets 409 Conflict with a Retry-After in whole seconds; a client that obeys
// it — waits that long, then sends again — is served, the holder being done by then.
func TestRoutersBusyRetryAfter(t *testing.T) {
	srv := redistest.Start(t)
	// Until hold times are seen, the hint is the holder's TTL left: keep it short.
	locker, _ := newLocker(t, srv, guard.TTL(2*time.Second))
	for _, rt := range routers {
		t.Run(rt.name, func(t *testing.T) {
			entered, leave := make(chan struct{}), make(chan struct{})
			pay := func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("hold") != "" {
					close(entered)
					<-leave
				}
				w.WriteHeader(http.StatusNoContent)
			}
			base := serveHTTP(t, rt.build(httpguard.LockConfig{Locker: locker, Key: "order:{path.id}",
				Options: []guard.Option{guard.Retry(guard.NoRetry())}}, pay))
			client := newClient(t, nil)
			held := make(chan reply, 1)
			go func() { held <- do(t, client, http.MethodPost, base+"/orders/8/pay?hold=1", nil) }()
			<-entered
			busy := do(t, client, http.MethodPost, base+"/orders/8/pay", nil)
			if busy.status != http.StatusConflict || busy.body != "locked by another request\n" {
				t.Fatalf("busy: %d %q, want 409 locked by another request", busy.status, busy.body)
			}
			var secs int
			if _, err := fmt.Sscanf(busy.header.Get("Retry-After"), "%d", &secs); err != nil || secs < 1 {
				t.Fatalf("Retry-After %q is not a whole number of seconds ≥ 1 (%v)", busy.header.Get("Retry-After"), err)
			}
			close(leave) // the holder finishes well within the hint
			if r := <-held; r.status != http.StatusNoContent {
				t.Fatalf("holder: %d %q", r.status, r.body)
			}
			time.Sleep(time.Duration(secs) * time.Second) // obey the hint
			if r := do(t, client, http.MethodPost, base+"/orders/8/pay", nil); r.status != http.StatusNoContent {
				t.Errorf("after Retry-After: %d %q, want 204", r.status, r.body)
			}
		})
	}
}
