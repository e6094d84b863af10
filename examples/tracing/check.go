package main

import (
	"context"
	"sync"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/guardkit/guardkit/guard"
)

// spanCheck passes spans on to an exporter and counts guard's acquisitions.
type spanCheck struct {
	sdktrace.SpanExporter
	mu                  sync.Mutex
	acquired, reentrant int
}

// ExportSpans implements sdktrace.SpanExporter.
func (c *spanCheck) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.mu.Lock()
	for _, s := range spans {
		if s.Name() != "guard.acquire" {
			continue
		}
		for _, kv := range s.Attributes() {
			switch {
			case kv.Key == guard.AttrOutcome && kv.Value.AsString() == guard.OutcomeAcquired:
				c.acquired++
			case kv.Key == guard.AttrReentrant && kv.Value.AsBool():
				c.reentrant++
			}
		}
	}
	c.mu.Unlock()
	return c.SpanExporter.ExportSpans(ctx, spans)
}

func (c *spanCheck) counts() (acquired, reentrant int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acquired, c.reentrant
}

// metricCheck passes metrics on to an exporter and notes the names of guard's.
type metricCheck struct {
	sdkmetric.Exporter
	mu   sync.Mutex
	seen map[string]bool
}

// Export implements sdkmetric.Exporter.
func (c *metricCheck) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	c.mu.Lock()
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == guard.ScopeName {
			for _, m := range sm.Metrics {
				c.seen[m.Name] = true
			}
		}
	}
	c.mu.Unlock()
	return c.Exporter.Export(ctx, rm)
}

func (c *metricCheck) saw(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[name]
}
