package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/guardkit/guardkit/guard/semconv"
)

// printMetrics writes one line per metric of guard's: a counter's total and its split by
// outcome, a histogram's count, mean and maximum.
func printMetrics(w io.Writer, metrics []metricdata.Metrics) {
	for _, m := range metrics {
		var line string
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			line = sumLine(d.DataPoints)
		case metricdata.Histogram[float64]:
			line = histogramLine(d.DataPoints)
		default:
			continue
		}
		fmt.Fprintf(w, "  %-26s %s\n", m.Name, line)
	}
}

func sumLine(points []metricdata.DataPoint[int64]) string {
	var total int64
	byOutcome := map[string]int64{}
	for _, p := range points {
		total += p.Value
		if o, ok := p.Attributes.Value(semconv.AttrOutcome); ok {
			byOutcome[o.AsString()] += p.Value
		}
	}
	line := fmt.Sprint(total)
	if len(byOutcome) > 0 {
		var parts []string
		for _, o := range slices.Sorted(maps.Keys(byOutcome)) {
			parts = append(parts, fmt.Sprintf("%s %d", o, byOutcome[o]))
		}
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	return line
}

func histogramLine(points []metricdata.HistogramDataPoint[float64]) string {
	var count uint64
	var sum, maxV float64
	names := map[string]bool{}
	for _, p := range points {
		count += p.Count
		sum += p.Sum
		if v, ok := p.Max.Value(); ok && v > maxV {
			maxV = v
		}
		if n, ok := p.Attributes.Value(semconv.AttrLockName); ok {
			names[n.AsString()] = true
		}
	}
	if count == 0 {
		return "0"
	}
	return fmt.Sprintf("%d recorded, mean %.1f ms, max %.1f ms (locks %s)", count,
		1000*sum/float64(count), 1000*maxV, strings.Join(slices.Sorted(maps.Keys(names)), ", "))
}
