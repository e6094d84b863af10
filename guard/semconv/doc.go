// Package semconv names what package guard records in OpenTelemetry: its
// instrumentation scope and its version, the attribute keys of its spans, events and metrics, and the
// values of the outcome attribute. Dashboards, alert rules, span processors and tests
// that read guard's telemetry use these names instead of spelling the strings, and
// importing semconv does not import guard.
//
// # Usage
//
// An acquisition is one span named "guard.acquire" under the scope [ScopeName] (at
// [Version]), with [AttrLockName], [AttrLockKind], [AttrOutcome] (one of the Outcome
// values) and the others below; the metrics carry the low-cardinality ones only
// ([AttrLockName], [AttrLockKind], [AttrOutcome], [AttrReentrant]). A filter that keeps the spans of
// acquisitions that gave up on a busy lock:
//
//	for _, kv := range span.Attributes() {
//		if kv.Key == semconv.AttrOutcome && kv.Value.AsString() == semconv.OutcomeBusy {
//			...
//		}
//	}
//
// docs/OBSERVABILITY.md lists every span, event and metric.
package semconv
