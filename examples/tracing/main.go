// Command tracing runs the service example's shop with OpenTelemetry: every lock
// acquisition is a guard.acquire span (lock name, key, outcome, attempts, reentrancy,
// fencing token, wait) under the caller's span, and guard's metrics (wait and hold time,
// acquisitions by outcome, renewals, lost leases) are exported when the program ends.
// Both go to stdout as JSON, one span or one metrics export per line, through
// OpenTelemetry's stdout exporters; a real service would use OTLP exporters instead.
//
//	go run ./examples/tracing                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/tracing # a real one
//	go run ./examples/tracing -pretty                   # indented JSON
//	go run ./examples/tracing | grep '^{"Name":"guard.acquire"' | jq -c '.Attributes | map({(.Key): .Value.Value}) | add'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/examples/service/shop"
	"github.com/guardkit/guardkit/guard"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	pretty := flag.Bool("pretty", false, "indent the JSON of spans and metrics")
	flag.Parse()
	log.SetFlags(0)
	log.SetOutput(os.Stdout) // spans and metrics go to stdout too: one stream, in order
	if err := run(*redisAddr, *pretty); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(redisAddr string, pretty bool) error {
	rdb, err := embedded.Open(redisAddr, log.Default())
	if err != nil {
		return err
	}
	defer rdb.Close()

	traceOpts := []stdouttrace.Option{stdouttrace.WithWriter(os.Stdout)}
	metricOpts := []stdoutmetric.Option{stdoutmetric.WithWriter(os.Stdout)}
	if pretty {
		traceOpts = append(traceOpts, stdouttrace.WithPrettyPrint())
		metricOpts = append(metricOpts, stdoutmetric.WithPrettyPrint())
	}
	spanOut, err := stdouttrace.New(traceOpts...)
	if err != nil {
		return err
	}
	metricOut, err := stdoutmetric.New(metricOpts...)
	if err != nil {
		return err
	}
	// The checks count what is exported, for this program to verify its own output.
	spans, metrics := &spanCheck{SpanExporter: spanOut}, &metricCheck{Exporter: metricOut}

	res := resource.NewSchemaless(attribute.String("service.name", "shop"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithResource(res))
	// The periodic reader exports when the provider shuts down, if not sooner.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics)), sdkmetric.WithResource(res))
	locker, err := guard.New(rdb.Client, guard.WithTracerProvider(tp), guard.WithMeterProvider(mp))
	if err != nil {
		return err
	}
	defer locker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const sku, stock, orders = "mug", 1, 2
	s := shop.New(rdb.Client, locker)
	if err := s.Restock(ctx, sku, stock); err != nil {
		return err
	}
	run := embedded.RunID()
	log.Printf("%d orders of 1 × %s, each submitted twice at once; %d in stock", orders, sku, stock)
	tracer := tp.Tracer("github.com/guardkit/guardkit/examples/tracing")
	var wg sync.WaitGroup
	for i := range 2 * orders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := fmt.Sprintf("order-%s-%d", run, i/2+1)
			ctx, span := tracer.Start(ctx, "checkout")
			defer span.End()
			span.SetAttributes(attribute.String("order", order))
			r, err := s.Checkout(ctx, shop.CheckoutRequest{OrderID: order, SKU: sku, Qty: 1})
			switch {
			case errors.Is(err, shop.ErrOutOfStock):
				span.SetAttributes(attribute.String("result", "out of stock"))
			case err != nil:
				span.SetAttributes(attribute.String("result", err.Error()))
			case r.Duplicate:
				span.SetAttributes(attribute.String("result", "already paid"))
			default:
				span.SetAttributes(attribute.String("result", "paid"))
			}
		}()
	}
	wg.Wait()

	log.Print("metrics:")
	if err := mp.Shutdown(ctx); err != nil { // exports the metrics one last time
		return err
	}
	if err := tp.Shutdown(ctx); err != nil {
		return err
	}
	return check(spans, metrics, orders, stock)
}

// check verifies that the telemetry shows what happened: every paid order's Pay
// reentered the order lock, and the wait histogram was exported.
func check(spans *spanCheck, metrics *metricCheck, orders, stock int) error {
	acquired, reentrant := spans.counts()
	paid := stock
	want := 2*orders + // every submission locks its order
		paid + 2*(orders-paid) + // the product lock: first submissions of paid orders, every submission of the others
		paid // Pay reenters the order lock
	if acquired != want || reentrant != paid {
		return fmt.Errorf("tracing: %d guard.acquire spans acquired (%d reentrant), want %d (%d reentrant)",
			acquired, reentrant, want, paid)
	}
	if !metrics.saw("guard.lock.wait.duration") || !metrics.saw("guard.lock.acquisitions") {
		return fmt.Errorf("tracing: guard's wait and acquisition metrics were not exported")
	}
	log.Printf("ok: %d acquisitions traced, %d of them reentrant; wait and acquisition metrics exported", acquired, reentrant)
	return nil
}
