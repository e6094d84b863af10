// Package grafana holds the Grafana dashboard of guard's metrics, guardkit.json, and the
// test that checks its queries against what guard exports through OpenTelemetry's
// Prometheus exporter.
package grafana_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.IgnoreRedial)
}

// exported runs a Locker whose meter provider is read by OpenTelemetry's Prometheus
// exporter on a real redis-server — an uncontended acquisition, a contended one, one
// given up as busy, a lease renewed, a lease lost — and returns the metric families
// gathered by name.
func exported(t *testing.T) map[string]family {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	l, err := guard.New(rdb, guard.Telemetry(nil, mp), guard.TTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Uncontended, and held through renewals (every TTL/3).
	le, err := l.Acquire(ctx, "orders:1", guard.Name("orders"))
	if err != nil {
		t.Fatal(err)
	}
	// Contended: a waiter, then busy for a try that gives up at once.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w, err := l.Acquire(context.Background(), "orders:1", guard.Name("orders"),
			guard.Retry(guard.MaxWait(5*time.Second, guard.Fixed(10*time.Millisecond, 0))))
		if err != nil {
			t.Error(err)
			return
		}
		_ = w.Release(context.Background())
	}()
	if _, err := l.TryAcquire(ctx, "orders:1", guard.Name("orders")); err == nil {
		t.Fatal("a try on a held lock acquired it")
	}
	time.Sleep(250 * time.Millisecond) // two renewals
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	// Lost: the lock's key deleted under its holder; the next renewal finds it gone.
	lost, err := l.Acquire(ctx, "orders:2", guard.Name("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, "guard:{orders:2}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost.Context().Done():
	case <-ctx.Done():
		t.Fatal("the lease whose key was deleted was not lost")
	}
	_ = lost.Release(ctx)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, f := range families {
		fam := family{histogram: f.GetType() == dto.MetricType_HISTOGRAM, labels: map[string]map[string]bool{}}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if fam.labels[lp.GetName()] == nil {
					fam.labels[lp.GetName()] = map[string]bool{}
				}
				fam.labels[lp.GetName()][lp.GetValue()] = true
			}
		}
		out[f.GetName()] = fam
	}
	return out
}

// A family is an exported metric family: whether it is a histogram, and the values of
// each of its labels.
type family struct {
	histogram bool
	labels    map[string]map[string]bool
}

// dashboardPath is the dashboard, as Grafana imports it.
const dashboardPath = "guardkit.json"

// dashboard is the part of Grafana's dashboard JSON the test reads.
type dashboard struct {
	Panels     []panel
	Templating struct {
		List []struct {
			Name  string
			Type  string
			Query json.RawMessage
		}
	}
}

type panel struct {
	ID      int
	Type    string
	Title   string
	Panels  []panel // a collapsed row's
	Targets []struct {
		RefID string
		Expr  string
	}
}

// query is one PromQL expression of the dashboard and where it is.
type query struct{ where, expr string }

// queries returns every panel target's expression and every query variable's, and fails
// the test on a panel that queries nothing.
func (d dashboard) queries(t *testing.T) []query {
	t.Helper()
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q, query %s: empty", p.Title, tg.RefID)
				}
				out = append(out, query{where: "panel " + strconv.Quote(p.Title) + " query " + tg.RefID, expr: tg.Expr})
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		out = append(out, query{where: "variable " + v.Name, expr: q.Query})
	}
	return out
}

var (
	grafanaVar   = regexp.MustCompile(`\$\{?\w+\}?`)
	stringLit    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matcherLabel = regexp.MustCompile(`(\w+)\s*(?:=~|!~|!=|=)\s*""`)
	grouping     = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	rangeSel     = regexp.MustCompile(`\[[^\]]*\]`)
	labelValues  = regexp.MustCompile(`^label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)$`)
	token        = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?|[0-9][0-9.eE]*|.`)
	// keywords are the words of PromQL that name neither a metric nor a label.
	keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true}
)

// parse returns the metric names and the label names an expression uses. A name is a
// metric when it is not a function or aggregation (followed by a parenthesis), a keyword,
// a number, inside a label matcher, a grouping or a range, or a Grafana variable.
func parse(expr string) (metrics, labels []string) {
	if m := labelValues.FindStringSubmatch(strings.TrimSpace(expr)); m != nil {
		return []string{m[1]}, []string{m[2]}
	}
	e := grafanaVar.ReplaceAllString(expr, "")
	e = stringLit.ReplaceAllString(e, `""`)
	for _, m := range matcherLabel.FindAllStringSubmatch(e, -1) {
		labels = append(labels, m[1])
	}
	e = matcherLabel.ReplaceAllString(e, "")
	for _, m := range grouping.FindAllStringSubmatch(e, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
	}
	e = grouping.ReplaceAllString(e, "")
	e = rangeSel.ReplaceAllString(e, "")
	for _, tok := range token.FindAllString(e, -1) {
		c := tok[0]
		if !(c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') || strings.HasSuffix(tok, "(") {
			continue
		}
		if tok = strings.TrimSpace(tok); !keywords[tok] {
			metrics = append(metrics, tok)
		}
	}
	return metrics, labels
}

// series returns the family a series name belongs to: a histogram's _bucket, _sum and
// _count series belong to the histogram.
func series(fams map[string]family, name string) (family, string, bool) {
	if f, ok := fams[name]; ok && !f.histogram {
		return f, name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := fams[base]; ok && f.histogram {
				return f, base, true
			}
		}
	}
	return family{}, "", false
}

// TestDashboardQueriesExportedMetrics checks docs/grafana/guardkit.json against what guard
// exports through the OpenTelemetry Prometheus exporter on a real redis-server: every
// panel's and variable's query names metrics that are exported (a histogram's through its
// _bucket, _sum or _count series) and labels those metrics carry; every metric of guard's
// is on some panel; the wait time is drawn as percentiles; and the run behind it produced
// the outcomes the panels split by.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	fams := exported(t)
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	used := map[string]bool{}
	percentiles := 0
	for _, q := range d.queries(t) {
		metrics, labels := parse(q.expr)
		if len(metrics) == 0 {
			t.Errorf("%s names no metric: %s", q.where, q.expr)
		}
		carried := map[string]bool{}
		for _, m := range metrics {
			f, base, ok := series(fams, m)
			if !ok {
				t.Errorf("%s: metric %s is not exported; exported: %v", q.where, m, slices.Sorted(maps.Keys(fams)))
				continue
			}
			used[base] = true
			for l := range f.labels {
				carried[l] = true
			}
			if strings.HasSuffix(m, "_bucket") {
				carried["le"] = true
			}
			if base == "guard_lock_wait_duration_seconds" && strings.Contains(q.expr, "histogram_quantile(") {
				percentiles++
			}
		}
		for _, l := range labels {
			if !carried[l] {
				t.Errorf("%s: label %s is on none of %v", q.where, l, metrics)
			}
		}
	}
	for name := range fams {
		if strings.HasPrefix(name, "guard_") && !used[name] {
			t.Errorf("guard's metric %s is on no panel", name)
		}
	}
	if percentiles < 3 {
		t.Errorf("%d wait-time percentile queries, want p50, p90 and p99 at least", percentiles)
	}

	// The run behind the check exported what the panels split by.
	for _, c := range []struct {
		family, label string
		values        []string
	}{
		{"guard_lock_acquisitions_total", "guard_outcome", []string{"acquired", "busy"}},
		{"guard_lock_acquisitions_total", "guard_lock_name", []string{"orders"}},
		{"guard_lock_renewals_total", "guard_outcome", []string{"ok", "lost"}},
		{"guard_lock_lost_total", "guard_lock_name", []string{"orders"}},
		{"guard_lock_wait_duration_seconds", "guard_outcome", []string{"acquired", "busy"}},
	} {
		for _, v := range c.values {
			if !fams[c.family].labels[c.label][v] {
				t.Errorf("%s has no series with %s=%q: %v", c.family, c.label, v, fams[c.family].labels[c.label])
			}
		}
	}
}

// TestParse checks the metric and label names read out of expressions like the
// dashboard's.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		expr            string
		metrics, labels []string
	}{
		{`histogram_quantile(0.99, sum by (le, guard_lock_name) (rate(guard_lock_wait_duration_seconds_bucket{guard_lock_name=~"$lock", guard_outcome="acquired"}[$__rate_interval])))`,
			[]string{"guard_lock_wait_duration_seconds_bucket"}, []string{"guard_lock_name", "guard_outcome", "le", "guard_lock_name"}},
		{`sum(increase(a_total{x!="y"}[$__range])) / sum(increase(b_total[5m])) > bool 0.5e3`,
			[]string{"a_total", "b_total"}, []string{"x"}},
		{`label_values(guard_lock_acquisitions_total, guard_lock_kind)`,
			[]string{"guard_lock_acquisitions_total"}, []string{"guard_lock_kind"}},
		{`sum by (guard_outcome) (rate(typo_total{a="}{by (z)"}[1m]))`,
			[]string{"typo_total"}, []string{"a", "guard_outcome"}},
	} {
		m, l := parse(c.expr)
		if !slices.Equal(m, c.metrics) || !slices.Equal(l, c.labels) {
			t.Errorf("parse(%s) = %v, %v; want %v, %v", c.expr, m, l, c.metrics, c.labels)
		}
	}
}
