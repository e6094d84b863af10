package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/guardkit/guardkit/guard/semconv"
)

// A node is one line of the span tree: a request (a span of the program's own), the wait
// for a lock (a guard.acquire span), the hold that follows it (from the acquire span's
// end to its guard.released or guard.lease_lost event), a reentry (a guard.acquire span
// that reentered a lock the request holds), or the release that ends a hold.
type node struct {
	kind     string // the span's name for a request; wait, hold, reentry, release
	key      string // the lock's key: guard.lock.key, else guard.lock.name
	detail   string
	start    time.Time
	end      time.Time // equal to start for a release
	children []*node
}

// Kinds of node besides requests.
const (
	nodeWait    = "wait"
	nodeHold    = "hold"
	nodeReentry = "reentry"
	nodeRelease = "release"
)

// spanTrees makes one tree per root span (a span whose parent was not recorded), in the
// order the roots started.
func spanTrees(spans []sdktrace.ReadOnlySpan) []*node {
	byParent := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && ids[p.SpanID()] {
			byParent[p.SpanID()] = append(byParent[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) }
	slices.SortStableFunc(roots, byStart)
	var trees []*node
	for _, r := range roots {
		trees = append(trees, spanNode(r, byParent, byStart))
	}
	return trees
}

// spanNode is the node of span s: its guard.acquire children become waits, holds and
// reentries, nested by time in the holds that contain them; its other children are
// nodes of their own.
func spanNode(s sdktrace.ReadOnlySpan, byParent map[trace.SpanID][]sdktrace.ReadOnlySpan, byStart func(a, b sdktrace.ReadOnlySpan) int) *node {
	n := &node{kind: s.Name(), detail: requestDetail(s), start: s.StartTime(), end: s.EndTime()}
	ends := holdEnds(s)
	children := byParent[s.SpanContext().SpanID()]
	slices.SortStableFunc(children, byStart)
	var flat []*node
	for _, c := range children {
		if c.Name() != "guard.acquire" {
			flat = append(flat, spanNode(c, byParent, byStart))
			continue
		}
		flat = append(flat, acquireNodes(c, ends)...)
	}
	n.children = nest(flat)
	return n
}

// requestDetail is a span's attributes as key=value, guard's own left out.
func requestDetail(s sdktrace.ReadOnlySpan) string {
	var parts []string
	for _, kv := range s.Attributes() {
		if !strings.HasPrefix(string(kv.Key), "guard.") {
			parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
		}
	}
	return strings.Join(parts, " ")
}

// holdEnd is how a hold ended: a guard.released or guard.lease_lost event.
type holdEnd struct {
	at     time.Time
	detail string
	lost   bool
}

// holdEnds maps the lock name and fencing token of each hold released under s to its
// guard.released event; guard.lease_lost events, which carry no token, are kept by lock
// name under token 0.
func holdEnds(s sdktrace.ReadOnlySpan) map[string][]holdEnd {
	ends := map[string][]holdEnd{}
	for _, e := range s.Events() {
		set := attribute.NewSet(e.Attributes...)
		name, _ := set.Value(semconv.AttrLockName)
		switch e.Name {
		case "guard.released":
			token, _ := set.Value(semconv.AttrToken)
			k := holdID(name.AsString(), token.AsInt64())
			ends[k] = append(ends[k], holdEnd{at: e.Time, detail: "released"})
		case "guard.lease_lost":
			reason, _ := set.Value(attribute.Key("guard.reason"))
			k := holdID(name.AsString(), 0)
			ends[k] = append(ends[k], holdEnd{at: e.Time, detail: "lost: " + reason.AsString(), lost: true})
		}
	}
	return ends
}

func holdID(name string, token int64) string { return fmt.Sprintf("%s#%d", name, token) }

// acquireNodes is the wait and hold of a guard.acquire span, or its reentry.
func acquireNodes(s sdktrace.ReadOnlySpan, ends map[string][]holdEnd) []*node {
	set := attribute.NewSet(s.Attributes()...)
	name, _ := set.Value(semconv.AttrLockName)
	key := name.AsString()
	if v, ok := set.Value(semconv.AttrLockKey); ok {
		key = v.AsString()
	}
	outcome, _ := set.Value(semconv.AttrOutcome)
	attempts, _ := set.Value(semconv.AttrAttempts)
	reentrant, _ := set.Value(semconv.AttrReentrant)
	token, hasToken := set.Value(semconv.AttrToken)
	if reentrant.AsBool() {
		return []*node{{kind: nodeReentry, key: key, start: s.StartTime(), end: s.EndTime(),
			detail: fmt.Sprintf("token %d, no Redis call", token.AsInt64())}}
	}
	wait := &node{kind: nodeWait, key: key, start: s.StartTime(), end: s.EndTime(),
		detail: fmt.Sprintf("%s after %d %s", outcome.AsString(), attempts.AsInt64(), plural(attempts.AsInt64(), "attempt"))}
	if outcome.AsString() != semconv.OutcomeAcquired || !hasToken {
		return []*node{wait}
	}
	hold := &node{kind: nodeHold, key: key, start: s.EndTime(), detail: fmt.Sprintf("token %d", token.AsInt64())}
	end, ok := takeEnd(ends, holdID(name.AsString(), token.AsInt64()), s.EndTime())
	if !ok {
		end, ok = takeEnd(ends, holdID(name.AsString(), 0), s.EndTime())
	}
	if !ok {
		hold.detail += ", not released while its request's span was open"
		return []*node{wait, hold}
	}
	hold.end = end.at
	hold.children = []*node{{kind: nodeRelease, key: key, start: end.at, end: end.at, detail: end.detail}}
	return []*node{wait, hold}
}

// takeEnd removes and returns the first end of hold id at or after from.
func takeEnd(ends map[string][]holdEnd, id string, from time.Time) (holdEnd, bool) {
	for i, e := range ends[id] {
		if !e.at.Before(from) {
			ends[id] = slices.Delete(ends[id], i, i+1)
			return e, true
		}
	}
	return holdEnd{}, false
}

// nest puts each node inside the innermost earlier hold whose span contains it, so that
// what ran while a lock was held is drawn under that hold; a hold's release stays last.
func nest(flat []*node) []*node {
	slices.SortStableFunc(flat, func(a, b *node) int { return a.start.Compare(b.start) })
	var top []*node
	var open []*node // holds that may still contain the next node, outermost first
	for _, n := range flat {
		for len(open) > 0 && !contains(open[len(open)-1], n) {
			open = open[:len(open)-1]
		}
		if len(open) == 0 {
			top = append(top, n)
		} else {
			h := open[len(open)-1]
			last := len(h.children) - 1 // the release
			h.children = slices.Insert(h.children, last, n)
		}
		if n.kind == nodeHold && !n.end.IsZero() {
			open = append(open, n)
		}
	}
	return top
}

func contains(h, n *node) bool {
	end := n.end
	if end.IsZero() {
		end = n.start
	}
	return !n.start.Before(h.start) && !end.After(h.end)
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// printTrees writes trees as indented text, a line per node: the node, its start after
// its tree's root started, and its duration (none for a release, an instant).
func printTrees(w io.Writer, trees []*node) {
	var lines [][3]string
	for _, t := range trees {
		lines = treeLines(lines, t, t.start, "", "")
	}
	width := len("request")
	for _, l := range lines {
		width = max(width, utf8.RuneCountInString(l[0]))
	}
	fmt.Fprintf(w, "%-*s %10s %9s\n", width, "request", "start", "took")
	for _, l := range lines {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("%-*s %10s %9s", width, l[0], l[1], l[2]), " "))
	}
}

// treeLines appends the lines of n and its children: first and rest are the tree's
// drawing before n's own line and before its children's.
func treeLines(lines [][3]string, n *node, t0 time.Time, first, rest string) [][3]string {
	label := n.kind
	if n.key != "" {
		label = fmt.Sprintf("%-8s %s", n.kind, n.key)
	}
	if n.detail != "" {
		label += "  " + n.detail
	}
	dur := ""
	switch {
	case n.kind == nodeRelease:
	case n.end.IsZero():
		dur = "?"
	default:
		dur = fmt.Sprintf("%.1f ms", ms(n.end.Sub(n.start)))
	}
	lines = append(lines, [3]string{first + label, fmt.Sprintf("+%.1f ms", ms(n.start.Sub(t0))), dur})
	for i, c := range n.children {
		if i == len(n.children)-1 {
			lines = treeLines(lines, c, t0, rest+"└─ ", rest+"   ")
		} else {
			lines = treeLines(lines, c, t0, rest+"├─ ", rest+"│  ")
		}
	}
	return lines
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
