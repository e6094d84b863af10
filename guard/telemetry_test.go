package guard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/guard/semconv"
	"github.com/guardkit/guardkit/internal/redistest"
)

type otelRig struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newOtelRig(t *testing.T) *otelRig {
	r := &otelRig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	r.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = r.tp.Shutdown(context.Background())
		_ = r.mp.Shutdown(context.Background())
	})
	return r
}

func (r *otelRig) options() []guard.Option {
	return []guard.Option{guard.Telemetry(r.tp, r.mp)}
}

func (r *otelRig) acquireSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == "guard.acquire" {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func (r *otelRig) metrics(t *testing.T) map[string]metricdata.Aggregation {
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != semconv.ScopeName || sm.Scope.Version != semconv.Version {
			t.Errorf("scope %q version %q, want %q version %q", sm.Scope.Name, sm.Scope.Version, semconv.ScopeName, semconv.Version)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// TestTelemetryContendedAcquire: the wait is one guard.acquire span, a child of the
// caller's span, covering the wait, with the expected attributes and metrics.
func TestTelemetryContendedAcquire(t *testing.T) {
	srv := redistest.Start(t)
	rig := newOtelRig(t)
	holder, _ := newLocker(t, srv)
	l, _ := newLocker(t, srv, rig.options()...)
	ctx := ctxTimeout(t, 10*time.Second)

	held := mustAcquire(t, holder, ctx, "order:7")
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = held.Release(context.Background())
	}()
	parentCtx, parent := rig.tp.Tracer("test").Start(ctx, "request")
	le := mustAcquire(t, l, parentCtx, "order:7", guard.Name("orders"))
	parent.End()
	mustRelease(t, le)

	spans := rig.acquireSpans()
	if len(spans) != 1 {
		t.Fatalf("%d guard.acquire spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("span parent %v, want the caller's span %v", s.Parent().SpanID(), parent.SpanContext().SpanID())
	}
	if d := s.EndTime().Sub(s.StartTime()); d < 250*time.Millisecond {
		t.Fatalf("span lasted %s, want it to cover the ~300ms wait", d)
	}
	want := map[attribute.Key]attribute.Value{
		semconv.AttrLockName:  attribute.StringValue("orders"),
		semconv.AttrLockKind:  attribute.StringValue("exclusive"),
		semconv.AttrLockKey:   attribute.StringValue("order:7"),
		semconv.AttrOwner:     attribute.StringValue(string(le.Owner())),
		semconv.AttrOutcome:   attribute.StringValue(semconv.OutcomeAcquired),
		semconv.AttrReentrant: attribute.BoolValue(false),
		semconv.AttrToken:     attribute.Int64Value(le.Token()),
	}
	for k, v := range want {
		if got, ok := attrOf(s, k); !ok || got != v {
			t.Errorf("attribute %s = %v, want %v", k, got.Emit(), v.Emit())
		}
	}
	if n, _ := attrOf(s, semconv.AttrAttempts); n.AsInt64() < 2 {
		t.Errorf("attempts = %d, want ≥ 2", n.AsInt64())
	}

	m := rig.metrics(t)
	wait, ok := m["guard.lock.wait.duration"].(metricdata.Histogram[float64])
	if !ok || len(wait.DataPoints) == 0 {
		t.Fatalf("wait histogram = %+v", m["guard.lock.wait.duration"])
	}
	if max, _ := wait.DataPoints[0].Max.Value(); max < 0.25 {
		t.Fatalf("wait histogram = %+v", m["guard.lock.wait.duration"])
	}
	hold, ok := m["guard.lock.hold.duration"].(metricdata.Histogram[float64])
	if !ok || len(hold.DataPoints) == 0 || hold.DataPoints[0].Count != 1 {
		t.Fatalf("hold histogram = %+v", m["guard.lock.hold.duration"])
	}
	acq := m["guard.lock.acquisitions"].(metricdata.Sum[int64])
	if len(acq.DataPoints) != 1 || acq.DataPoints[0].Value != 1 {
		t.Fatalf("acquisitions = %+v", acq)
	}
	if v, _ := acq.DataPoints[0].Attributes.Value(semconv.AttrOutcome); v.AsString() != semconv.OutcomeAcquired {
		t.Fatalf("acquisitions outcome = %v", v.Emit())
	}
	if v, _ := acq.DataPoints[0].Attributes.Value(semconv.AttrLockKind); v.AsString() != "exclusive" {
		t.Fatalf("acquisitions kind = %v, want exclusive", v.Emit())
	}
	active := m["guard.lock.active"].(metricdata.Sum[int64])
	waiters := m["guard.lock.waiters"].(metricdata.Sum[int64])
	if active.DataPoints[0].Value != 0 || waiters.DataPoints[0].Value != 0 {
		t.Fatalf("after release: active %d, waiters %d, want 0 and 0", active.DataPoints[0].Value, waiters.DataPoints[0].Value)
	}
	assertNoKeyInMetrics(t, rig, "order:7")
}

func assertNoKeyInMetrics(t *testing.T, rig *otelRig, key string) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	_ = rig.reader.Collect(context.Background(), &rm)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			}
			for _, s := range sets {
				for _, kv := range s.ToSlice() {
					if kv.Key == semconv.AttrLockKey || kv.Key == semconv.AttrOwner || kv.Value.Emit() == key {
						t.Errorf("metric %s carries %s=%s: metrics must stay low-cardinality", m.Name, kv.Key, kv.Value.Emit())
					}
				}
			}
		}
	}
}

func TestTelemetryBusyAndRedacted(t *testing.T) {
	srv := redistest.Start(t)
	rig := newOtelRig(t)
	holder, _ := newLocker(t, srv)
	l, _ := newLocker(t, srv, append(rig.options(), guard.RedactKeys())...)
	ctx := ctxTimeout(t, 5*time.Second)
	held := mustAcquire(t, holder, ctx, "user:alice@example.com")
	defer mustRelease(t, held)

	if _, err := l.TryAcquire(ctx, "user:alice@example.com"); !errors.Is(err, guard.ErrLocked) {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, _ = l.Acquire(tctx, "user:alice@example.com")

	spans := rig.acquireSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for i, want := range []string{semconv.OutcomeBusy, semconv.OutcomeTimeout} {
		if v, _ := attrOf(spans[i], semconv.AttrOutcome); v.AsString() != want {
			t.Errorf("span %d outcome %q, want %q", i, v.AsString(), want)
		}
		if _, ok := attrOf(spans[i], semconv.AttrLockKey); ok {
			t.Errorf("span %d records the key despite RedactKeys", i)
		}
		if v, _ := attrOf(spans[i], semconv.AttrLockName); v.AsString() != "unnamed" {
			t.Errorf("span %d lock name %q, want unnamed", i, v.AsString())
		}
	}
	assertNoKeyInMetrics(t, rig, "user:alice@example.com")
}

func TestTelemetryLeaseLost(t *testing.T) {
	srv := redistest.Start(t)
	rig := newOtelRig(t)
	l, c := newLocker(t, srv, append(rig.options(), guard.TTL(300*time.Millisecond))...)
	ctx, span := rig.tp.Tracer("test").Start(ctxTimeout(t, 5*time.Second), "job")
	le := mustAcquire(t, l, ctx, "lost", guard.Name("jobs"))
	c.Del(ctx, lockName("lost"))
	waitEnded(t, le.Context(), 30*time.Second, "lock deleted in Redis")
	_ = le.Release(ctx)
	span.End()

	var events []string
	for _, s := range rig.spans.Ended() {
		if s.Name() == "job" {
			for _, e := range s.Events() {
				events = append(events, e.Name)
			}
		}
	}
	if len(events) != 1 || events[0] != "guard.lease_lost" {
		t.Fatalf("events on the caller's span = %v, want [guard.lease_lost]", events)
	}
	m := rig.metrics(t)
	lost := m["guard.lock.lost"].(metricdata.Sum[int64])
	if len(lost.DataPoints) != 1 || lost.DataPoints[0].Value != 1 {
		t.Fatalf("lost counter = %+v", lost)
	}
	renewals := m["guard.lock.renewals"].(metricdata.Sum[int64])
	found := false
	for _, dp := range renewals.DataPoints {
		if v, _ := dp.Attributes.Value(semconv.AttrOutcome); v.AsString() == "lost" && dp.Value == 1 {
			found = true
		}
	}
	if !found {
		t.Fatalf("renewals = %+v, want one with outcome lost", renewals)
	}
	if a := m["guard.lock.active"].(metricdata.Sum[int64]); a.DataPoints[0].Value != 0 {
		t.Fatalf("active = %d after loss and release, want 0", a.DataPoints[0].Value)
	}
}

// TestTelemetryReleasedEvent: the release of a lease is a guard.released event on the
// caller's span, with the lock name, the lease's fencing token and the time held; a
// reentrant hold's release adds none, the last release of the lock does.
func TestTelemetryReleasedEvent(t *testing.T) {
	srv := redistest.Start(t)
	rig := newOtelRig(t)
	l, _ := newLocker(t, srv, rig.options()...)
	ctx, span := rig.tp.Tracer("test").Start(ctxTimeout(t, 5*time.Second), "job")
	le := mustAcquire(t, l, ctx, "released", guard.Name("jobs"))
	inner := mustAcquire(t, l, le.Context(), "released", guard.Name("jobs"))
	if !inner.Reentrant() {
		t.Fatal("the nested acquisition did not reenter")
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	span.End()

	var events []sdktrace.Event
	for _, s := range rig.spans.Ended() {
		if s.Name() == "job" {
			events = append(events, s.Events()...)
		}
	}
	if len(events) != 1 || events[0].Name != "guard.released" {
		t.Fatalf("events on the caller's span = %+v, want one guard.released", events)
	}
	attrs := attribute.NewSet(events[0].Attributes...)
	if v, _ := attrs.Value(semconv.AttrLockName); v.AsString() != "jobs" {
		t.Errorf("lock name = %q, want jobs", v.AsString())
	}
	if v, _ := attrs.Value(semconv.AttrToken); v.AsInt64() != le.Token() {
		t.Errorf("token = %d, want the lease's %d", v.AsInt64(), le.Token())
	}
	if v, ok := attrs.Value(semconv.AttrHoldSeconds); !ok || v.AsFloat64() < 0.02 || v.AsFloat64() > 5 {
		t.Errorf("hold seconds = %v (%v), want at least the 20 ms slept", v.AsFloat64(), ok)
	}
}

// TestGlobalTracerInstalledAfterNew: a Locker made while OpenTelemetry's global tracer
// provider is still its default starts no spans, but records them once the application
// installs a real provider, even after New. (It leaves a no-op global provider behind.)
func TestGlobalTracerInstalledAfterNew(t *testing.T) {
	srv := redistest.Start(t)
	l, _ := newLocker(t, srv)
	ctx := ctxTimeout(t, 5*time.Second)
	mustRelease(t, mustAcquire(t, l, ctx, "before"))

	r := newOtelRig(t)
	otel.SetTracerProvider(r.tp)
	t.Cleanup(func() { otel.SetTracerProvider(tracenoop.NewTracerProvider()) })
	mustRelease(t, mustAcquire(t, l, ctx, "after"))
	spans := r.acquireSpans()
	if len(spans) != 1 {
		t.Fatalf("%d guard.acquire spans after the global provider was installed, want 1", len(spans))
	}
	if v, _ := attrOf(spans[0], semconv.AttrLockKey); v.AsString() != "after" {
		t.Fatalf("span key = %q, want %q", v.AsString(), "after")
	}
}
