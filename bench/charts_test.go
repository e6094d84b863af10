package main

import (
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// committedReport is the report of the committed results.jsonl, as -from reads it.
func committedReport(t *testing.T) *report {
	t.Helper()
	sums, err := readMedians("results.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) == 0 {
		t.Fatal("results.jsonl has no medians")
	}
	return &report{o: options{charts: "charts"}, sums: sums}
}

// TestChartsCommitted checks that the committed charts are what -from results.jsonl
// draws, that each is well-formed SVG, and that within each panel every bar's length is
// its value over the panel's largest, the largest drawn full length, with the value of
// the same median as the report's tables.
func TestChartsCommitted(t *testing.T) {
	r := committedReport(t)
	specs := r.chartSpecs()
	if len(specs) != 3 || specs[0].file != "headline.svg" {
		t.Fatalf("charts %v, want headline, uncontended and contended", specs)
	}
	for _, c := range specs {
		got := r.svg(c)
		want, err := os.ReadFile(filepath.Join("charts", c.file))
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("charts/%s is not what results.jsonl draws: run go run . -from results.jsonl -charts charts", c.file)
		}
		bars := parseBars(t, c.file, got)
		for i, p := range c.panels {
			est := utf8.RuneCountInString(p.title) * 7
			if est > panelW-10 {
				t.Errorf("%s: panel title %q (about %d px) is wider than its panel", c.file, p.title, est)
			}
			top := 0.0
			for _, v := range chartVariants {
				if x, ok := r.metric(p.scenario, p.cell, v, p.key); ok && !math.IsNaN(x) {
					top = max(top, x)
				}
			}
			n := 0
			for _, v := range chartVariants {
				x, ok := r.metric(p.scenario, p.cell, v, p.key)
				b, drawn := bars[barID{i, v}]
				if !ok || math.IsNaN(x) {
					if drawn {
						t.Errorf("%s panel %q: %s has no median but a bar", c.file, p.title, v)
					}
					continue
				}
				n++
				if !drawn {
					t.Errorf("%s panel %q: no bar for %s", c.file, p.title, v)
					continue
				}
				if b.value != x || math.Abs(b.width-barMaxW*x/top) > 0.01 {
					t.Errorf("%s panel %q: %s bar %.2f px for %g, want %.2f px for %g", c.file, p.title, v, b.width, b.value, barMaxW*x/top, x)
				}
			}
			if n < 4 {
				t.Errorf("%s panel %q: %d libraries measured, want at least 4", c.file, p.title, n)
			}
		}
	}
}

type barID struct {
	panel   int
	variant string
}

type bar struct{ value, width float64 }

// parseBars reads an SVG through encoding/xml, failing on malformed XML, and returns its
// bars by panel and library.
func parseBars(t *testing.T, name, svg string) map[barID]bar {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	bars := map[barID]bar{}
	panel := -1
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range se.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case se.Name.Local == "g":
			panel, _ = strconv.Atoi(attr["data-panel"])
		case se.Name.Local == "rect" && attr["class"] == "bar":
			v, err1 := strconv.ParseFloat(attr["data-value"], 64)
			w, err2 := strconv.ParseFloat(attr["width"], 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: bar %v", name, attr)
			}
			bars[barID{panel, attr["data-variant"]}] = bar{v, w}
		}
	}
	return bars
}

// TestChartsShown checks that RESULTS.md shows the charts as the report writes them, and
// the README the headline chart.
func TestChartsShown(t *testing.T) {
	r := committedReport(t)
	results, err := os.ReadFile("RESULTS.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(results), r.chartsMarkdown("charts")) {
		t.Errorf("RESULTS.md lacks the charts section:\n%s", r.chartsMarkdown("charts"))
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "](bench/charts/headline.svg)") {
		t.Error("the README does not show bench/charts/headline.svg")
	}
}
