package guard

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/guardkit/guardkit/guard/semconv"
)

var acquireSpanOptions = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}

// unnamed is the lock name of acquisitions with neither a Name option nor a key template.
const unnamed = "unnamed"

// telemetry holds a Locker's tracer and instruments, created once in New.
type telemetry struct {
	tracer     trace.Tracer
	redactKeys bool
	// untraced is the global tracer provider as it was in New when that was OpenTelemetry's
	// default, which records nothing until a real one is installed; nil otherwise. While
	// the global provider is still that one, acquisitions start no span at all.
	untraced trace.TracerProvider

	wait         metric.Float64Histogram
	hold         metric.Float64Histogram
	acquisitions metric.Int64Counter
	lost         metric.Int64Counter
	renewals     metric.Int64Counter
	active       metric.Int64UpDownCounter
	waiters      metric.Int64UpDownCounter

	setsMu sync.RWMutex
	sets   map[attrSetKey]recording
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, redactKeys bool) *telemetry {
	var untraced trace.TracerProvider
	switch tp.(type) {
	case nil:
		tp = otel.GetTracerProvider()
		if isDefaultGlobal(tp) {
			untraced = tp
		}
	case tracenoop.TracerProvider, *tracenoop.TracerProvider:
		untraced = tp
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t := &telemetry{
		tracer:     tp.Tracer(semconv.ScopeName, trace.WithInstrumentationVersion(semconv.Version)),
		redactKeys: redactKeys,
		untraced:   untraced,
	}
	t.instruments(mp.Meter(semconv.ScopeName, metric.WithInstrumentationVersion(semconv.Version)))
	return t
}

// instruments makes t's metric instruments on m. An instrument m cannot make (a
// conflicting registration) is reported to OpenTelemetry's error handler and replaced by
// a no-op one: telemetry never stops the engine.
func (t *telemetry) instruments(m metric.Meter) {
	fallback := noop.NewMeterProvider().Meter(semconv.ScopeName)
	waitBuckets := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
	holdBuckets := metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900)
	histogram := func(name, desc string, buckets metric.HistogramOption) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), buckets)
		if err != nil {
			otel.Handle(err)
			h, _ = fallback.Float64Histogram(name)
		}
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			otel.Handle(err)
			c, _ = fallback.Int64Counter(name)
		}
		return c
	}
	gauge := func(name, unit, desc string) metric.Int64UpDownCounter {
		g, err := m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			otel.Handle(err)
			g, _ = fallback.Int64UpDownCounter(name)
		}
		return g
	}
	t.wait = histogram("guard.lock.wait.duration", "Time spent acquiring a lock, by lock name and outcome.", waitBuckets)
	t.hold = histogram("guard.lock.hold.duration", "Time a lease was held, from acquisition to release or loss.", holdBuckets)
	t.acquisitions = counter("guard.lock.acquisitions", "{acquisition}", "Acquisitions by lock name, outcome and reentrancy.")
	t.lost = counter("guard.lock.lost", "{lease}", "Leases lost before release.")
	t.renewals = counter("guard.lock.renewals", "{renewal}", "Lease renewals by outcome: ok, failed (retried) or lost.")
	t.active = gauge("guard.lock.active", "{lease}", "Leases held now.")
	t.waiters = gauge("guard.lock.waiters", "{waiter}", "Goroutines waiting for a busy lock now.")
}

type attrSetKey struct {
	name      string
	kind      Kind
	outcome   string
	reentrant int8 // -1: not recorded
}

// recording holds the options of one attribute set, as the slices the instruments take,
// so that recording allocates nothing.
type recording struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

// set returns the cached recording options for a lock name, kind, outcome and reentrancy.
func (t *telemetry) set(name string, kind Kind, outcome string, reentrant int8) recording {
	k := attrSetKey{name, kind, outcome, reentrant}
	t.setsMu.RLock()
	r, ok := t.sets[k]
	t.setsMu.RUnlock()
	if ok {
		return r
	}
	kv := []attribute.KeyValue{semconv.AttrLockName.String(name), semconv.AttrLockKind.String(kind.String())}
	if outcome != "" {
		kv = append(kv, semconv.AttrOutcome.String(outcome))
	}
	if reentrant >= 0 {
		kv = append(kv, semconv.AttrReentrant.Bool(reentrant == 1))
	}
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	r = recording{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
	t.setsMu.Lock()
	if t.sets == nil {
		t.sets = make(map[attrSetKey]recording)
	}
	t.sets[k] = r
	t.setsMu.Unlock()
	return r
}

// lockName is the name recorded for acquisitions made with s.
func lockName(s *settings) string {
	switch {
	case s.name != "":
		return s.name
	case s.wrap.key.kind == keyTemplate:
		return s.wrap.key.text
	case s.wrap.key.kind == keyTemplates:
		return strings.Join(s.wrap.key.texts, " + ")
	}
	return unnamed
}

// acquisition records one acquisition: its span and its metrics.
type acquisition struct {
	caller   context.Context // the caller's context, which the lease is acquired with
	t        *telemetry
	name     string
	kind     Kind
	start    time.Time
	span     trace.Span
	attempts int
	waiting  bool
}

// isDefaultGlobal reports whether tp is OpenTelemetry's default global tracer provider,
// which hands out non-recording spans until otel.SetTracerProvider installs a real one.
func isDefaultGlobal(tp trace.TracerProvider) bool {
	t := reflect.TypeOf(tp)
	return t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

// tracing reports whether spans may record: false while the provider is a no-op.
func (t *telemetry) tracing() bool {
	switch t.untraced.(type) {
	case nil:
		return true
	case tracenoop.TracerProvider, *tracenoop.TracerProvider:
		return false
	}
	return otel.GetTracerProvider() != t.untraced
}

// startAcquire opens the guard.acquire span as a child of ctx's span and returns the
// context to make Redis calls with. With a no-op tracer provider it starts nothing: the
// span would record nothing, and ctx already carries the parent's span context.
func (t *telemetry) startAcquire(ctx context.Context, a *acquisition, s *settings, key string, owner string) context.Context {
	*a = acquisition{caller: a.caller, t: t, name: lockName(s), kind: s.kind, start: time.Now()}
	if !t.tracing() {
		a.span = noSpan
		return ctx
	}
	ctx, a.span = t.tracer.Start(ctx, "guard.acquire", acquireSpanOptions...)
	if a.span.IsRecording() {
		attrs := []attribute.KeyValue{semconv.AttrLockName.String(a.name), semconv.AttrLockKind.String(a.kind.String()), semconv.AttrOwner.String(owner)}
		if !t.redactKeys {
			attrs = append(attrs, semconv.AttrLockKey.String(key))
		}
		a.span.SetAttributes(attrs...)
	}
	return ctx
}

// startWaiting counts the goroutine as a waiter until stopWaiting.
func (a *acquisition) startWaiting(ctx context.Context) {
	a.waiting = true
	a.t.waiters.Add(ctx, 1, a.t.set(a.name, a.kind, "", -1).add...)
}

func (a *acquisition) stopWaiting(ctx context.Context) {
	if a.waiting {
		a.waiting = false
		a.t.waiters.Add(ctx, -1, a.t.set(a.name, a.kind, "", -1).add...)
	}
}

// end closes the span and records the outcome.
func (a *acquisition) end(ctx context.Context, le *Lease, err error, p RetryPolicy) {
	a.stopWaiting(ctx)
	wait := time.Since(a.start)
	outcome := outcomeOf(err, p)
	reentrant := int8(0)
	if le != nil && le.reentrant {
		reentrant = 1
	}
	a.t.acquisitions.Add(ctx, 1, a.t.set(a.name, a.kind, outcome, reentrant).add...)
	a.t.wait.Record(ctx, wait.Seconds(), a.t.set(a.name, a.kind, outcome, -1).rec...)
	if a.span.IsRecording() {
		attrs := []attribute.KeyValue{
			semconv.AttrOutcome.String(outcome),
			semconv.AttrAttempts.Int(a.attempts),
			semconv.AttrReentrant.Bool(reentrant == 1),
			semconv.AttrWaitSeconds.Float64(wait.Seconds()),
		}
		if le != nil {
			// The holding section replaces the caller's owner the span started with.
			attrs = append(attrs, semconv.AttrToken.Int64(le.Token()), semconv.AttrOwner.String(string(le.Owner())))
		}
		a.span.SetAttributes(attrs...)
		if outcome == semconv.OutcomeDeadlock {
			a.span.AddEvent("guard.deadlock", trace.WithAttributes(a.t.deadlockAttrs(err)...))
		}
		if err != nil && outcome == semconv.OutcomeError {
			a.span.RecordError(err)
			a.span.SetStatus(codes.Error, err.Error())
		}
	}
	a.span.End()
}

func outcomeOf(err error, p RetryPolicy) string {
	switch {
	case err == nil:
		return semconv.OutcomeAcquired
	case errors.Is(err, context.Canceled):
		return semconv.OutcomeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return semconv.OutcomeTimeout
	case errors.Is(err, ErrDeadlock):
		return semconv.OutcomeDeadlock
	case errors.Is(err, ErrLocked):
		if p.limit == limitMaxWait {
			return semconv.OutcomeTimeout
		}
		return semconv.OutcomeBusy
	}
	return semconv.OutcomeError
}

// heldTelemetry is the part of a held lease that telemetry needs after acquisition.
type heldTelemetry struct {
	name string
	kind Kind
	span trace.Span // the acquirer's span: renewal failures and loss are events on it
}

func (t *telemetry) held(ctx context.Context, name string, kind Kind) heldTelemetry {
	t.active.Add(ctx, 1, t.set(name, kind, "", -1).add...)
	return heldTelemetry{name: name, kind: kind, span: trace.SpanFromContext(ctx)}
}

// noSpan is the span of acquisitions made without tracing: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// ended records the end of a held lease, lost or released: a released one is a
// guard.released event on the acquirer's span, with the lock name, the fencing token and
// the time held, so that a trace shows when each hold ended.
func (t *telemetry) ended(h *held, lost *LeaseLostError) {
	ctx := context.Background()
	ht := h.tel
	t.active.Add(ctx, -1, t.set(ht.name, ht.kind, "", -1).add...)
	held := time.Since(h.acquired)
	t.hold.Record(ctx, held.Seconds(), t.set(ht.name, ht.kind, "", -1).rec...)
	if lost != nil {
		t.lost.Add(ctx, 1, t.set(ht.name, ht.kind, "", -1).add...)
		ht.span.AddEvent("guard.lease_lost", trace.WithAttributes(
			semconv.AttrLockName.String(ht.name), attribute.String("guard.reason", lost.Reason)))
		return
	}
	if ht.span.IsRecording() {
		ht.span.AddEvent("guard.released", trace.WithAttributes(
			semconv.AttrLockName.String(ht.name), semconv.AttrToken.Int64(h.sh.Token),
			semconv.AttrHoldSeconds.Float64(held.Seconds())))
	}
}

// renewed records a renewal's outcome: renewOK, renewFailed or renewLost.
func (t *telemetry) renewed(h *held, outcome string, err error) {
	t.renewals.Add(context.Background(), 1, t.set(h.tel.name, h.tel.kind, outcome, -1).add...)
	if outcome == renewFailed {
		h.tel.span.AddEvent("guard.renewal_failed", trace.WithAttributes(
			semconv.AttrLockName.String(h.tel.name), attribute.String("guard.error", err.Error())))
	}
}

// repaired records a quorum hold taken back on a server that had lost it, as a span event
// of the lease (see quorum.repair).
func (t *telemetry) repaired(h *held, server string) {
	h.tel.span.AddEvent("guard.hold_repaired", trace.WithAttributes(
		semconv.AttrLockName.String(h.tel.name), attribute.String("guard.server", server)))
}

// releasedLate records a release that found the lock already expired.
func (t *telemetry) releasedLate(h *held) {
	h.tel.span.AddEvent("guard.released_late", trace.WithAttributes(
		semconv.AttrLockName.String(h.tel.name), semconv.AttrToken.String(strconv.FormatInt(h.sh.Token, 10))))
}

// Renewal outcomes, as recorded in semconv.AttrOutcome on guard.lock.renewals.
const (
	renewOK     = "ok"
	renewFailed = "failed"
	renewLost   = "lost"
)

// deadlockAttrs are the attributes of the guard.deadlock event for err.
func (t *telemetry) deadlockAttrs(err error) []attribute.KeyValue {
	var de *DeadlockError
	if !errors.As(err, &de) {
		return nil
	}
	attrs := []attribute.KeyValue{semconv.AttrCycleLen.Int(len(de.Cycle))}
	if !t.redactKeys {
		keys := make([]string, len(de.Cycle))
		for i, e := range de.Cycle {
			keys[i] = e.Key
		}
		attrs = append(attrs, semconv.AttrCycleKeys.StringSlice(keys))
	}
	return attrs
}
