package interceptor_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/guard/semconv"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestLockNamedAfterMethod: a rule's lock is named after its method (or pattern) in
// telemetry, unless the rule's options name it.
func TestLockNamedAfterMethod(t *testing.T) {
	srv := redistest.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	locker, _ := newLocker(t, srv, guard.Telemetry(tp, nil))
	ui := interceptor.UnaryServerInterceptor(locker, unregistered, interceptor.WithRules(
		interceptor.Rule{Method: "/x.S/Pay", Key: "account:{req.from_account}"},
		interceptor.Rule{Method: "/x.S/*", Key: "account:{req.from_account}"},
		interceptor.Rule{Method: "/x.S/Ship", Key: "account:{req.from_account}", Options: []guard.Option{guard.Name("shipping")}},
	))
	ctx := ctxTimeout(t, 5*time.Second)
	for _, m := range []string{"/x.S/Pay", "/x.S/Refund", "/x.S/Ship"} {
		if _, err := keyOf(ctx, ui, m, transfer("1")); err != nil {
			t.Fatalf("%s: %v", m, err)
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
	want := []string{"/x.S/Pay", "/x.S/*", "shipping"}
	if len(names) != 3 || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] {
		t.Fatalf("lock names %q, want %q", names, want)
	}
}
