package httpguard_test

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/httpguard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestLockMoreKeys: on the standard mux, a route with MoreKeys holds both accounts as one
// lease; transfers in opposite directions never overlap nor deadlock; a bad MoreKeys
// template fails at construction naming the field.
func TestLockMoreKeys(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	var inside atomic.Int32
	var bad atomic.Value
	mux := http.NewServeMux()
	mux.Handle("POST /transfer/{from}/{to}", httpguard.LockWithConfig(httpguard.LockConfig{
		Locker: l, Key: "account:{path.from}", MoreKeys: []string{"account:{path.to}"}, MaxWait: 10 * time.Second,
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if le, ok := guard.LeaseFromContext(r.Context()); !ok || len(le.Tokens()) != 2 {
			bad.Store("the handler's lease does not hold both accounts")
		}
		if inside.Add(1) != 1 {
			bad.Store("two transfers of one pair inside at once")
		}
		time.Sleep(time.Millisecond)
		inside.Add(-1)
		w.WriteHeader(http.StatusNoContent)
	})))
	base := serveHTTP(t, mux)
	client := newClient(t, nil)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/transfer/x/y"
			if i%2 == 1 {
				path = "/transfer/y/x"
			}
			for range 15 {
				if r := do(t, client, http.MethodPost, base+path, nil); r.status != http.StatusNoContent {
					t.Errorf("POST %s = %d %s", path, r.status, r.body)
					return
				}
			}
		}()
	}
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
	_, err := httpguard.LockConfig{Locker: l, Key: "a", MoreKeys: []string{"b:{nope"}}.ToMiddleware()
	var ce *httpguard.ConfigError
	if !errors.As(err, &ce) || ce.Field != "MoreKeys[0]" {
		t.Fatalf("a bad MoreKeys template = %v, want a *ConfigError naming MoreKeys[0]", err)
	}
}
