package semconv_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/guard/semconv"
	"github.com/guardkit/guardkit/internal/redistest"
)

// A test, or a span processor, reads what an acquisition recorded by the names semconv
// gives, not by spelling guard's strings.
func Example() {
	srv, err := redistest.NewServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	spans := tracetest.NewSpanRecorder()
	locker, err := guard.New(rdb, guard.Telemetry(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)), nil))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx := context.Background()
	err = guard.Do(ctx, func(context.Context) error { return nil },
		guard.Use(locker), guard.Key("report:daily"), guard.Name("daily-report"))
	if err != nil {
		fmt.Println(err)
		return
	}

	for _, span := range spans.Ended() {
		if span.InstrumentationScope().Name != semconv.ScopeName {
			continue
		}
		for _, kv := range span.Attributes() {
			switch kv.Key {
			case semconv.AttrLockName, semconv.AttrLockKind, semconv.AttrOutcome:
				fmt.Printf("%s = %s\n", kv.Key, kv.Value.Emit())
			}
		}
	}
	// Output:
	// guard.lock.name = daily-report
	// guard.lock.kind = exclusive
	// guard.outcome = acquired
}
