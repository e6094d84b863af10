package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/guard/semconv"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// TestLockNamedAfterRoute: one middleware shared by two routes names each route's lock
// after the route in telemetry, unless its Options name it.
func TestLockNamedAfterRoute(t *testing.T) {
	srv := redistest.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	locker, _ := newLocker(t, srv, guard.Telemetry(tp, nil))

	e := newEcho(nil)
	ok := func(c echo.Context) error { return c.NoContent(http.StatusOK) }
	shared := middleware.Lock(locker, "order:{param.id}")
	e.POST("/orders/:id/pay", ok, shared)
	e.POST("/orders/:id/cancel", ok, shared)
	e.POST("/orders/:id/ship", ok, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker, Key: "order:{param.id}", Options: []guard.Option{guard.Name("shipping")},
	}))
	for _, path := range []string{"/orders/1/pay", "/orders/2/cancel", "/orders/3/ship"} {
		rr := httptest.NewRecorder()
		e.ServeHTTP(rr, httptest.NewRequest(http.MethodPost, path, nil))
		if rr.Code != http.StatusOK {
			t.Fatalf("POST %s: %d", path, rr.Code)
		}
	}
	var names []string
	for _, s := range rec.Ended() {
		if s.Name() != "guard.acquire" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == semconv.AttrLockName {
				names = append(names, kv.Value.AsString())
			}
		}
	}
	want := []string{"/orders/:id/pay", "/orders/:id/cancel", "shipping"}
	if len(names) != len(want) {
		t.Fatalf("lock names %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("lock names %q, want %q", names, want)
		}
	}
}
