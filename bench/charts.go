package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// chartVariants are the libraries the charts compare, in the order they are drawn.
var chartVariants = []string{"raw", "guardkit", "redsync", "redislock", "rueidislock"}

// A panelSpec is one bar panel of a chart: a metric of one cell of a scenario, a bar per
// library.
type panelSpec struct {
	title       string
	scenario    string
	cell        string
	key         string
	prec        int // digits after the point; -1: thousands separators
	lowerBetter bool
}

// A chartSpec is one SVG file: a title and panels side by side, three to a row.
type chartSpec struct {
	file   string
	title  string
	panels []panelSpec
}

// chartSpecs are the charts of a report: the headline comparisons (those the README's
// table quotes), then uncontended pairs/s and contended acquisitions/s at every cell.
func (r *report) chartSpecs() []chartSpec {
	specs := []chartSpec{{
		file:  "headline.svg",
		title: "guardkit and other Go Redis locks on one redis-server (medians of the last make bench-compare)",
		panels: []panelSpec{
			{"uncontended, 1 goroutine: pairs / s", "uncontended", "G=1", "pairs_per_s", -1, false},
			{"contended, 64 workers, 1 ms hold: acq / s", "contended", "W=64 H=1ms", "acq_per_s", -1, false},
			{"contended, 64 workers: round trips / acq", "contended", "W=64 H=1ms", "rt_per_acq_hook", 1, true},
		},
	}}
	un := chartSpec{file: "uncontended.svg", title: "Uncontended: try-acquire → release pairs per second, G goroutines on their own keys"}
	for _, c := range r.cells("uncontended") {
		un.panels = append(un.panels, panelSpec{"pairs / s, " + c, "uncontended", c, "pairs_per_s", -1, false})
	}
	co := chartSpec{file: "contended.svg", title: "Contended: acquisitions per second, W workers on one key holding it H"}
	for _, c := range r.cells("contended") {
		co.panels = append(co.panels, panelSpec{"acquisitions / s, " + c, "contended", c, "acq_per_s", -1, false})
	}
	for _, c := range []chartSpec{un, co} {
		if len(c.panels) > 0 {
			specs = append(specs, c)
		}
	}
	return specs
}

// writeCharts draws the report's charts as SVG files in dir.
func (r *report) writeCharts(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range r.chartSpecs() {
		if err := os.WriteFile(filepath.Join(dir, c.file), []byte(r.svg(c)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// chartsMarkdown is the charts section of RESULTS.md: an image per chart, its path
// relative to the report.
func (r *report) chartsMarkdown(dir string) string {
	var b strings.Builder
	b.WriteString("## Charts\n\nDrawn by `go run . -charts " + dir + "` from the same medians as the tables below (`-from results.jsonl` redraws them without running).\n\n")
	for _, c := range r.chartSpecs() {
		fmt.Fprintf(&b, "![%s](%s)\n\n", c.title, filepath.ToSlash(filepath.Join(dir, c.file)))
	}
	return b.String()
}

// Geometry of the charts, in pixels.
const (
	panelW    = 330 // a panel's width, its gap included
	labelW    = 92  // the libraries' names
	barMaxW   = 160 // the longest bar
	barH      = 16
	barGap    = 6
	panelTop  = 44 // a row of panels' title and note, above the bars
	chartTop  = 34 // the chart's title
	perRow    = 3
	rowBottom = 14
)

// svg draws c: a title, then its panels three to a row, each a horizontal bar per
// library scaled to the panel's largest value, the value printed after the bar, guardkit's
// bar coloured and the others grey; a library with no value is named "not measured".
func (r *report) svg(c chartSpec) string {
	rows := (len(c.panels) + perRow - 1) / perRow
	cols := min(len(c.panels), perRow)
	rowH := panelTop + len(chartVariants)*(barH+barGap) + rowBottom
	width, height := cols*panelW+20, chartTop+rows*rowH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<title>%s</title>`+"\n", esc(c.title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="14" font-weight="bold" fill="#1f2328">%s</text>`+"\n", esc(c.title))
	for i, p := range c.panels {
		x0, y0 := 10+(i%perRow)*panelW, chartTop+(i/perRow)*rowH
		note := "higher is better"
		if p.lowerBetter {
			note = "lower is better"
		}
		fmt.Fprintf(&b, `<g data-panel="%d">`+"\n", i)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold" fill="#1f2328">%s</text>`+"\n", x0, y0+14, esc(p.title))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#59636e">%s</text>`+"\n", x0, y0+30, note)
		vals := make([]float64, len(chartVariants))
		top := 0.0
		for j, v := range chartVariants {
			x, ok := r.metric(p.scenario, p.cell, v, p.key)
			if !ok || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				x = math.NaN()
			} else {
				top = max(top, x)
			}
			vals[j] = x
		}
		for j, v := range chartVariants {
			y := y0 + panelTop + j*(barH+barGap)
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" fill="#1f2328">%s</text>`+"\n", x0+labelW-6, y+barH-4, esc(v))
			x := vals[j]
			if math.IsNaN(x) {
				fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#59636e" font-style="italic">not measured</text>`+"\n", x0+labelW, y+barH-4)
				continue
			}
			w := 0.0
			if top > 0 {
				w = barMaxW * x / top
			}
			fill := "#9aa5b1"
			if v == "guardkit" {
				fill = "#2f6fdb"
			}
			fmt.Fprintf(&b, `<rect class="bar" data-variant="%s" data-value="%g" x="%d" y="%d" width="%.2f" height="%d" fill="%s"/>`+"\n",
				esc(v), x, x0+labelW, y, w, barH, fill)
			fmt.Fprintf(&b, `<text x="%.2f" y="%d" fill="#1f2328">%s</text>`+"\n", float64(x0+labelW)+w+5, y+barH-4, num(x, true, p.prec))
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	return b.String()
}

var svgEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

func esc(s string) string { return svgEscaper.Replace(s) }

// readMedians returns the medians of a JSON lines file written with -json: the data the
// report's tables and charts are made from. A null metric (an infinity or NaN when
// written) is read as NaN.
func readMedians(path string) ([]measurement, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []measurement
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		var rec struct {
			Type     string              `json:"type"`
			Scenario string              `json:"scenario"`
			Cell     string              `json:"cell"`
			Variant  string              `json:"variant"`
			Rep      int                 `json:"rep"`
			Metrics  map[string]*float64 `json:"metrics"`
			Err      string              `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if rec.Type != "median" {
			continue
		}
		m := measurement{Scenario: rec.Scenario, Cell: rec.Cell, Variant: rec.Variant, Rep: rec.Rep, Err: rec.Err, Metrics: map[string]float64{}}
		for k, v := range rec.Metrics {
			if v == nil {
				m.Metrics[k] = math.NaN()
			} else {
				m.Metrics[k] = *v
			}
		}
		out = append(out, m)
	}
	return out, sc.Err()
}
