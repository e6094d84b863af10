// Package lualink links a Lua script: it puts before the script's body the functions of
// shared fragments that the body uses, and no others.
//
// Redis runs a script's whole text on every call, and each "local function" it meets
// makes a closure: a fragment's function the script never calls costs every call of it
// all the same. A fragment is a Lua text of top-level "local function" definitions only,
// each ending with a line "end" at column 0, each with its comment directly above it (no
// blank line between); other comments and blank lines between them are dropped.
package lualink

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Fragment is one Lua file of shared functions.
type Fragment struct {
	Name string // for errors: the file's name
	Src  string
}

// Func is one function of a fragment.
type Func struct {
	Name string
	Text string // the comment above it, its definition and the "end" line
}

// Functions returns the functions of a fragment, in order.
func Functions(f Fragment) ([]Func, error) {
	var (
		fns     []Func
		comment []string // the comment lines directly above the next line
		cur     *Func
		body    []string
	)
	for i, line := range strings.Split(f.Src, "\n") {
		if cur != nil {
			body = append(body, line)
			if strings.TrimRight(line, " \t\r") == "end" {
				cur.Text = strings.Join(body, "\n") + "\n"
				fns = append(fns, *cur)
				cur, body = nil, nil
			}
			continue
		}
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			comment = nil
		case strings.HasPrefix(trimmed, "--"):
			comment = append(comment, line)
		case strings.HasPrefix(line, "local function "):
			name, _, ok := strings.Cut(strings.TrimPrefix(line, "local function "), "(")
			if !ok || !ident.MatchString(name) {
				return nil, fmt.Errorf("%s:%d: a function definition without its name", f.Name, i+1)
			}
			cur = &Func{Name: name}
			body = append(comment, line)
			comment = nil
		default:
			return nil, fmt.Errorf("%s:%d: code outside a function: a fragment holds local functions only", f.Name, i+1)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s: function %s has no \"end\" line at column 0", f.Name, cur.Name)
	}
	return fns, nil
}

// ident is a whole Lua name.
var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Link returns body with, before it, the functions of frags that it uses, directly or
// through one another, in the order the fragments define them (frags in dependency
// order: a function uses only those defined before it). A function the body does not
// call is defined inside the function that holds all its callers, first in its body: its
// closure is then made only when that one runs. A name defined twice, in two fragments
// or in a fragment and the body, is an error.
func Link(body string, frags ...Fragment) (string, error) {
	var fns []Func
	at := map[string]int{}
	for _, f := range frags {
		fs, err := Functions(f)
		if err != nil {
			return "", err
		}
		for _, fn := range fs {
			if _, dup := at[fn.Name]; dup {
				return "", fmt.Errorf("%s: function %s is defined twice", f.Name, fn.Name)
			}
			at[fn.Name] = len(fns)
			fns = append(fns, fn)
		}
	}
	for _, n := range Names(body) {
		if _, ok := at[n]; ok && strings.Contains(body, "local function "+n+"(") {
			return "", fmt.Errorf("the body defines %s, which a fragment defines too", n)
		}
	}
	// calls lists, for each function and for the body (len(fns)), the functions it uses.
	calls := make([][]int, len(fns)+1)
	for i, fn := range fns {
		calls[i] = uses(fn.Text, at, i)
	}
	calls[len(fns)] = uses(body, at, -1)
	need := make([]bool, len(fns))
	var visit func(i int)
	visit = func(i int) {
		for _, j := range calls[i] {
			if !need[j] {
				need[j] = true
				visit(j)
			}
		}
	}
	visit(len(fns))
	// parent is the function each one is defined in, -1 for the top. A function goes into
	// the innermost function that holds every one of its callers (each caller, or a
	// function it is in), unless the body calls it or a function on the way declares a
	// name it takes from outside. Callers come after what they call, so the last is
	// placed first.
	parent := make([]int, len(fns))
	for i := range parent {
		parent[i] = -1
	}
	outer := func(i int) []int { // i and the functions it is in, innermost first
		var c []int
		for ; i >= 0; i = parent[i] {
			c = append(c, i)
		}
		return c
	}
	for j := len(fns) - 1; j >= 0; j-- {
		if !need[j] || slices.Contains(calls[len(fns)], j) {
			continue
		}
		var common []int
		first := true
		for i := range fns {
			if !need[i] || !slices.Contains(calls[i], j) {
				continue
			}
			if first {
				common, first = outer(i), false
				continue
			}
			common = slices.DeleteFunc(common, func(k int) bool { return !slices.Contains(outer(i), k) })
		}
		if len(common) == 0 {
			continue
		}
		names := free(fns[j].Text)
		if !slices.ContainsFunc(outer(common[0]), func(k int) bool { return overlap(declared(fns[k].Text), names) }) {
			parent[j] = common[0]
		}
	}
	var b strings.Builder
	var emit func(i int, indent string)
	emit = func(i int, indent string) {
		lines := strings.SplitAfter(fns[i].Text, "\n")
		for _, line := range lines {
			if line != "" && line != "\n" {
				b.WriteString(indent)
			}
			b.WriteString(line)
			if strings.HasPrefix(line, "local function "+fns[i].Name+"(") {
				// Its nested functions, first in its body.
				for j := range fns {
					if need[j] && parent[j] == i {
						emit(j, indent+"  ")
					}
				}
			}
		}
	}
	for i := range fns {
		if need[i] && parent[i] < 0 {
			emit(i, "")
		}
	}
	b.WriteString(body)
	return b.String(), nil
}

// uses returns the functions of at that code uses, but self.
func uses(code string, at map[string]int, self int) []int {
	var out []int
	for _, n := range Names(code) {
		if j, ok := at[n]; ok && j != self {
			out = append(out, j)
		}
	}
	return out
}

// declared returns the names a function text declares: its name and parameters, its
// locals, local functions and loop variables.
func declared(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line = strip(line)
		for _, m := range declaration.FindAllStringSubmatch(line, -1) {
			for _, g := range m[1:] {
				out = append(out, name.FindAllString(g, -1)...)
			}
		}
	}
	return out
}

// free returns the names a function text uses and does not declare: those it takes from
// where it is defined.
func free(text string) []string {
	var out []string
	for _, n := range Names(text) {
		if !slices.Contains(declared(text), n) {
			out = append(out, n)
		}
	}
	return out
}

// overlap reports whether a and b share a name.
func overlap(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// declaration matches what declares names: a local function's name and parameters, a
// local statement's names, a for loop's variables.
var declaration = regexp.MustCompile(`\blocal\s+function\s+(\w+)\s*\(([^)]*)\)|\blocal\s+(\w+(?:\s*,\s*\w+)*)|\bfor\s+(\w+(?:\s*,\s*\w+)*)\s*(?:=|\bin\b)`)

// Names returns the names code uses, outside comments and string literals, that are
// not fields (after "." or ":"), once each, in order.
func Names(code string) []string {
	var out []string
	seen := map[string]bool{}
	for _, line := range strings.Split(code, "\n") {
		line = strip(line)
		for _, m := range name.FindAllStringIndex(line, -1) {
			if m[0] > 0 && (line[m[0]-1] == '.' || line[m[0]-1] == ':') {
				continue
			}
			if n := line[m[0]:m[1]]; !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

var name = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// strip returns line without its comment and with its string literals ('…' and "…",
// which the scripts keep on one line) blanked.
func strip(line string) string {
	b := []byte(line)
	var quote byte
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case quote != 0:
			if c == '\\' && i+1 < len(b) {
				b[i], b[i+1] = ' ', ' '
				i++
			} else if c == quote {
				quote = 0
			} else {
				b[i] = ' '
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && i+1 < len(b) && b[i+1] == '-':
			return string(b[:i])
		}
	}
	return string(b)
}
