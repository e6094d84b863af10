// Command tracing runs the service example's shop with OpenTelemetry: every lock
// acquisition is a guard.acquire span (lock name, key, outcome, attempts, reentrancy,
// fencing token, wait) under the caller's span, every release a guard.released event on
// it, and guard's metrics (wait and hold time, acquisitions by outcome, renewals, lost
// leases) are exported when the program ends.
//
// By default it prints each request as a tree: the request, the wait for each lock (its
// outcome and attempts), the hold that follows (its fencing token), what ran under the
// hold — other locks, a nested reentry — and the release, each with its start after the
// request's and its duration; then a line per metric. With -json it prints the spans and
// metrics as OpenTelemetry's stdout exporters write them instead, one JSON object per
// line; a real service would use OTLP exporters.
//
//	go run ./examples/tracing                           # embedded Redis, span trees
//	REDIS_ADDR=localhost:6379 go run ./examples/tracing # a real one
//	go run ./examples/tracing -json                     # raw JSON (-pretty indents it)
//	go run ./examples/tracing -json | grep '^{"Name":"guard.acquire"' | jq -c '.Attributes | map({(.Key): .Value.Value}) | add'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	raw := flag.Bool("json", false, "print spans and metrics as JSON, one object per line, instead of span trees")
	pretty := flag.Bool("pretty", false, "with -json, indent the JSON")
	flag.Parse()
	// Spans, metrics and log lines go to stdout: one stream, in order.
	if err := run(os.Stdout, *redisAddr, output{json: *raw || *pretty, pretty: *pretty}); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}

// output says how run prints spans and metrics.
type output struct {
	json   bool // OpenTelemetry's stdout exporters' JSON instead of trees
	pretty bool // indented JSON
}

func run(w io.Writer, redisAddr string, out output) error {
	logger := log.New(w, "", 0)
	rdb, err := embedded.Open(redisAddr, logger)
	if err != nil {
		return err
	}
	defer rdb.Close()

	// The checks keep what is exported, for the trees and for this program to verify its
	// own output; with -json they pass it on to the stdout exporters.
	spans, metrics := &spanCheck{}, &metricCheck{}
	if out.json {
		traceOpts := []stdouttrace.Option{stdouttrace.WithWriter(w)}
		metricOpts := []stdoutmetric.Option{stdoutmetric.WithWriter(w)}
		if out.pretty {
			traceOpts = append(traceOpts, stdouttrace.WithPrettyPrint())
			metricOpts = append(metricOpts, stdoutmetric.WithPrettyPrint())
		}
		if spans.next, err = stdouttrace.New(traceOpts...); err != nil {
			return err
		}
		if metrics.Exporter, err = stdoutmetric.New(metricOpts...); err != nil {
			return err
		}
	}

	res := resource.NewSchemaless(attribute.String("service.name", "shop"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithResource(res))
	// The periodic reader exports when the provider shuts down, if not sooner.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics)), sdkmetric.WithResource(res))
	locker, err := guard.New(rdb.Client, guard.Telemetry(tp, mp))
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
	logger.Printf("%d orders of 1 × %s, each submitted twice at once; %d in stock", orders, sku, stock)
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

	if !out.json {
		printTrees(w, spanTrees(spans.all()))
	}
	logger.Print("metrics:")
	if err := mp.Shutdown(ctx); err != nil { // exports the metrics one last time
		return err
	}
	if err := tp.Shutdown(ctx); err != nil {
		return err
	}
	if !out.json {
		printMetrics(w, metrics.metrics())
	}
	return check(logger, spans, metrics, orders, stock)
}

// check verifies that the telemetry shows what happened: every paid order's Pay
// reentered the order lock, and the wait histogram was exported.
func check(logger *log.Logger, spans *spanCheck, metrics *metricCheck, orders, stock int) error {
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
	logger.Printf("ok: %d acquisitions traced, %d of them reentrant; wait and acquisition metrics exported", acquired, reentrant)
	return nil
}
