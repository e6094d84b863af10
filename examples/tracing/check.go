package main

import (
	"context"
	"sync"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/guardkit/guardkit/guard/semconv"
)

// spanCheck keeps the spans it is given, for the span tree and the program's check, and
// passes them on to an exporter when it has one.
type spanCheck struct {
	next  sdktrace.SpanExporter // nil: the spans are only kept
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

// ExportSpans implements sdktrace.SpanExporter.
func (c *spanCheck) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.mu.Lock()
	c.spans = append(c.spans, spans...)
	c.mu.Unlock()
	if c.next == nil {
		return nil
	}
	return c.next.ExportSpans(ctx, spans)
}

// Shutdown implements sdktrace.SpanExporter.
func (c *spanCheck) Shutdown(ctx context.Context) error {
	if c.next == nil {
		return nil
	}
	return c.next.Shutdown(ctx)
}

// all returns the spans kept so far.
func (c *spanCheck) all() []sdktrace.ReadOnlySpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sdktrace.ReadOnlySpan(nil), c.spans...)
}

// counts returns the guard.acquire spans that acquired, and how many of them reentered.
func (c *spanCheck) counts() (acquired, reentrant int) {
	for _, s := range c.all() {
		if s.Name() != "guard.acquire" {
			continue
		}
		for _, kv := range s.Attributes() {
			switch {
			case kv.Key == semconv.AttrOutcome && kv.Value.AsString() == semconv.OutcomeAcquired:
				acquired++
			case kv.Key == semconv.AttrReentrant && kv.Value.AsBool():
				reentrant++
			}
		}
	}
	return acquired, reentrant
}

// metricCheck keeps guard's metrics from the last export and passes every export on to
// an exporter when it has one; without one it stands for it (temporality, aggregation).
type metricCheck struct {
	sdkmetric.Exporter
	mu   sync.Mutex
	last []metricdata.Metrics
}

// Export implements sdkmetric.Exporter.
func (c *metricCheck) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	c.mu.Lock()
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == semconv.ScopeName {
			c.last = append([]metricdata.Metrics(nil), sm.Metrics...)
		}
	}
	c.mu.Unlock()
	if c.Exporter == nil {
		return nil
	}
	return c.Exporter.Export(ctx, rm)
}

// Temporality implements sdkmetric.Exporter: cumulative, as the stdout exporter's default.
func (c *metricCheck) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	if c.Exporter == nil {
		return sdkmetric.DefaultTemporalitySelector(k)
	}
	return c.Exporter.Temporality(k)
}

// Aggregation implements sdkmetric.Exporter.
func (c *metricCheck) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	if c.Exporter == nil {
		return sdkmetric.DefaultAggregationSelector(k)
	}
	return c.Exporter.Aggregation(k)
}

// ForceFlush implements sdkmetric.Exporter.
func (c *metricCheck) ForceFlush(ctx context.Context) error {
	if c.Exporter == nil {
		return nil
	}
	return c.Exporter.ForceFlush(ctx)
}

// Shutdown implements sdkmetric.Exporter.
func (c *metricCheck) Shutdown(ctx context.Context) error {
	if c.Exporter == nil {
		return nil
	}
	return c.Exporter.Shutdown(ctx)
}

// metrics returns guard's metrics from the last export.
func (c *metricCheck) metrics() []metricdata.Metrics {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// saw reports whether guard's metric name was exported.
func (c *metricCheck) saw(name string) bool {
	for _, m := range c.metrics() {
		if m.Name == name {
			return true
		}
	}
	return false
}
