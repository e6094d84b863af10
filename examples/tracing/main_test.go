package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// treeLine is one printed line of a span tree.
var treeLine = regexp.MustCompile(`^((?:├─ |└─ |│  |   )*)(\S+)\s+(.*?)\s+\+([0-9.]+) ms(?:\s+([0-9.]+) ms)?$`)

// line is a parsed line of a span tree.
type line struct {
	depth    int
	kind     string // checkout, wait, hold, reentry, release
	rest     string // the key and the detail; a request's attributes
	start    float64
	took     float64
	hasTook  bool
	children []*line
}

// TestSpanTree runs the program on a real redis-server and reads the trees it prints: one
// per checkout, each drawn as the shop's locks were taken. A paid checkout waits for the
// order lock, holds it, under that hold waits for and holds the product lock, releases
// it, reenters the order lock without a Redis call (the same fencing token) and releases
// it; an order out of stock releases the product lock unpaid; a duplicate finds the order
// paid under its lock. Holds contain what is drawn under them, and each release is at its
// hold's end.
func TestSpanTree(t *testing.T) {
	srv := redistest.Start(t)
	var out bytes.Buffer
	if err := run(&out, srv.Addr(), output{}); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	defer func() {
		if t.Failed() {
			t.Logf("output:\n%s", out.String())
		}
	}()
	text := out.String()
	if !strings.Contains(text, "\nok: 8 acquisitions traced, 1 of them reentrant") {
		t.Fatal("the program's own check did not pass")
	}
	_, after, ok := strings.Cut(text, "\nrequest ")
	if !ok {
		t.Fatal("no span tree header")
	}
	body, metrics, ok := strings.Cut(after, "\nmetrics:\n")
	if !ok {
		t.Fatal("no metrics after the trees")
	}
	var roots []*line
	var stack []*line
	for _, s := range strings.Split(body, "\n")[1:] {
		m := treeLine.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("not a tree line: %q", s)
		}
		l := &line{depth: utf8.RuneCountInString(m[1]) / 3, kind: m[2], rest: m[3]}
		l.start, _ = strconv.ParseFloat(m[4], 64)
		l.took, _ = strconv.ParseFloat(m[5], 64)
		l.hasTook = m[5] != ""
		if l.depth > len(stack) {
			t.Fatalf("line %q is deeper than its parent", s)
		}
		stack = stack[:l.depth]
		if l.depth == 0 {
			roots = append(roots, l)
		} else {
			p := stack[l.depth-1]
			p.children = append(p.children, l)
		}
		stack = append(stack, l)
	}

	want := map[string]string{
		"paid":         "checkout(wait order, hold order(wait sku, hold sku(release sku), reentry order, release order))",
		"out of stock": "checkout(wait order, hold order(wait sku, hold sku(release sku), release order))",
		"already paid": "checkout(wait order, hold order(release order))",
	}
	results := map[string]int{}
	for _, r := range roots {
		_, result, _ := strings.Cut(r.rest, "result=")
		results[result]++
		if got := shape(r); got != want[result] {
			t.Errorf("the %q checkout's tree is %s, want %s", result, got, want[result])
		}
		checkTimes(t, r)
		checkReentry(t, r)
	}
	if results["paid"] != 1 || results["already paid"] != 1 || results["out of stock"] != 2 {
		t.Errorf("checkouts by result = %v, want 1 paid, 1 already paid, 2 out of stock", results)
	}
	for _, name := range []string{"guard.lock.wait.duration", "guard.lock.hold.duration", "guard.lock.acquisitions"} {
		if !strings.Contains(metrics, "  "+name+" ") {
			t.Errorf("no line for %s in the metrics", name)
		}
	}
	if !strings.Contains(metrics, "guard.lock.acquisitions    8 (acquired 8)") {
		t.Errorf("the acquisitions line does not count 8 acquired")
	}
}

// shape is a tree's node kinds and lock names (the key's prefix), nested in parentheses.
func shape(l *line) string {
	s := l.kind
	if l.depth > 0 {
		key, _, _ := strings.Cut(l.rest, " ")
		lock, _, _ := strings.Cut(key, ":")
		s += " " + lock
	}
	if len(l.children) == 0 {
		return s
	}
	var parts []string
	for _, c := range l.children {
		parts = append(parts, shape(c))
	}
	return s + "(" + strings.Join(parts, ", ") + ")"
}

// checkTimes checks that every node but a release has a duration, that children start
// within their parent and in order, and that a hold's release is at the hold's end (to
// the printed 0.1 ms, twice rounded).
func checkTimes(t *testing.T, l *line) {
	t.Helper()
	if l.hasTook == (l.kind == "release") {
		t.Errorf("%s %s: duration printed %v", l.kind, l.rest, l.hasTook)
	}
	prev := l.start
	for _, c := range l.children {
		if c.start < prev-0.1 || c.start+c.took > l.start+l.took+0.2 {
			t.Errorf("%s %s (+%.1f, %.1f ms) is not within %s %s (+%.1f, %.1f ms) after its elder sibling",
				c.kind, c.rest, c.start, c.took, l.kind, l.rest, l.start, l.took)
		}
		prev = c.start
		checkTimes(t, c)
	}
	if l.kind == "hold" {
		rel := l.children[len(l.children)-1]
		if d := rel.start - (l.start + l.took); d < -0.2 || d > 0.2 {
			t.Errorf("release of %s at +%.1f ms, its hold ends at +%.1f ms", l.rest, rel.start, l.start+l.took)
		}
	}
}

// checkReentry checks that a reentry names the token of the hold it is drawn under.
func checkReentry(t *testing.T, l *line) {
	t.Helper()
	for _, c := range l.children {
		if c.kind == "reentry" {
			key, detail, _ := strings.Cut(c.rest, "  ")
			if !strings.HasPrefix(l.rest, key+"  ") || !strings.HasPrefix(detail, strings.SplitN(l.rest, "  ", 2)[1]+",") {
				t.Errorf("reentry %q is under hold %q: not the same key and token", c.rest, l.rest)
			}
		}
		checkReentry(t, c)
	}
}

// TestRawJSON: with -json the program prints OpenTelemetry's stdout exporters' JSON, one
// object a line, the guard.acquire spans with their attributes and the guard.released
// events on the checkouts, and no trees.
func TestRawJSON(t *testing.T) {
	srv := redistest.Start(t)
	var out bytes.Buffer
	if err := run(&out, srv.Addr(), output{json: true}); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	names := map[string]int{}
	events := 0
	for _, s := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.HasPrefix(s, "{") {
			continue
		}
		var span struct {
			Name   string
			Events []struct{ Name string }
		}
		if err := json.Unmarshal([]byte(s), &span); err != nil {
			t.Fatalf("line %.80q…: %v", s, err)
		}
		names[span.Name]++
		for _, e := range span.Events {
			if e.Name == "guard.released" {
				events++
			}
		}
	}
	if names["guard.acquire"] != 8 || names["checkout"] != 4 {
		t.Errorf("spans by name %v, want 8 guard.acquire and 4 checkout", names)
	}
	if events != 7 { // every acquisition but the reentry is released
		t.Errorf("%d guard.released events, want 7", events)
	}
	if strings.Contains(out.String(), "└─") || !slices.Contains(strings.Split(out.String(), "\n"), "metrics:") {
		t.Errorf("the JSON output has a tree, or no metrics line:\n%s", out.String())
	}
}
