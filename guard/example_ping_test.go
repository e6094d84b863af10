package guard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/guardkit/guardkit/guard"
)

// PingOnNew makes a Redis that cannot be reached fail New, at start-up; Ping answers a
// readiness probe afterwards.
func ExampleLocker_Ping() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb, guard.PingOnNew(2*time.Second))
	if err != nil {
		fmt.Println("redis unreachable:", err)
		return
	}
	defer locker.Close()

	ready := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := locker.Ping(ctx); err != nil {
			http.Error(w, "lock service unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	rec := httptest.NewRecorder()
	ready.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output: 200 ready
}
