package guard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/guardkit/guardkit/guard"
)

// Ping after New makes a Redis that cannot be reached fail the program at start-up; Ping
// answers a readiness probe afterwards.
func ExampleLocker_Ping() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := locker.Ping(ctx); err != nil {
		fmt.Println("redis unreachable:", err)
		return
	}

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
