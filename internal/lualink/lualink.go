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
	"sync"
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
// call is defined inside the function that holds all its callers, before the statement
// of that one's body that first needs it: its closure is then made only when the call
// gets that far. A name defined twice, in two fragments or in a fragment and the body, is
// an error. Nested functions rely on the fragments' layout: a body indented by two spaces
// a level, a statement that goes on over more lines indented deeper.
func Link(body string, frags ...Fragment) (string, error) {
	lk, err := collect(frags)
	if err != nil {
		return "", err
	}
	for _, n := range Names(body) {
		if _, ok := lk.at[n]; ok && strings.Contains(body, "local function "+n+"(") {
			return "", fmt.Errorf("the body defines %s, which a fragment defines too", n)
		}
	}
	lk.reach(body)
	lk.nest()
	bl := strings.SplitAfter(body, "\n")
	lk.emit(bl, lk.places(-1, bl, 0, len(bl), 0), "")
	return lk.b.String(), nil
}

// linker is one Link in progress.
type linker struct {
	fns    []Func
	at     map[string]int // a function's index in fns, by name
	calls  [][]int        // for each function and for the body (len(fns)), those it uses
	need   []bool         // the functions the body uses, directly or through others
	parent []int          // the function each one is defined in, -1 for the top
	b      strings.Builder
}

// collect reads the functions of frags, refusing a name defined twice.
func collect(frags []Fragment) (*linker, error) {
	lk := &linker{at: map[string]int{}}
	for _, f := range frags {
		fs, err := Functions(f)
		if err != nil {
			return nil, err
		}
		for _, fn := range fs {
			if _, dup := lk.at[fn.Name]; dup {
				return nil, fmt.Errorf("%s: function %s is defined twice", f.Name, fn.Name)
			}
			lk.at[fn.Name] = len(lk.fns)
			lk.fns = append(lk.fns, fn)
		}
	}
	return lk, nil
}

// reach sets calls and need: what each function and the body use, and what the body
// needs, directly or through one another.
func (lk *linker) reach(body string) {
	n := len(lk.fns)
	lk.calls = make([][]int, n+1)
	for i, fn := range lk.fns {
		lk.calls[i] = uses(namesOf(fn.Text).used, lk.at, i)
	}
	lk.calls[n] = uses(Names(body), lk.at, -1)
	lk.need = make([]bool, n)
	var visit func(i int)
	visit = func(i int) {
		for _, j := range lk.calls[i] {
			if !lk.need[j] {
				lk.need[j] = true
				visit(j)
			}
		}
	}
	visit(n)
}

// outer returns i and the functions it is in, innermost first.
func (lk *linker) outer(i int) []int {
	var c []int
	for ; i >= 0; i = lk.parent[i] {
		c = append(c, i)
	}
	return c
}

// nest sets parent. A function goes into the innermost function that holds every one
// of its callers (each caller, or a function it is in), unless the body calls it or a
// function on the way declares a name it takes from outside. Callers come after what
// they call, so the last is placed first.
func (lk *linker) nest() {
	n := len(lk.fns)
	lk.parent = make([]int, n)
	for i := range lk.parent {
		lk.parent[i] = -1
	}
	for j := n - 1; j >= 0; j-- {
		if !lk.need[j] || slices.Contains(lk.calls[n], j) {
			continue
		}
		common := lk.commonOuter(j)
		if len(common) == 0 {
			continue
		}
		names := namesOf(lk.fns[j].Text).free
		if !slices.ContainsFunc(lk.outer(common[0]), func(k int) bool { return overlap(namesOf(lk.fns[k].Text).declared, names) }) {
			lk.parent[j] = common[0]
		}
	}
}

// commonOuter returns the functions that hold every caller of j, innermost first.
func (lk *linker) commonOuter(j int) []int {
	var common []int
	first := true
	for i := range lk.fns {
		if !lk.need[i] || !slices.Contains(lk.calls[i], j) {
			continue
		}
		if first {
			common, first = lk.outer(i), false
			continue
		}
		o := lk.outer(i)
		common = slices.DeleteFunc(common, func(k int) bool { return !slices.Contains(o, k) })
	}
	return common
}

// emit writes lines, indented by indent, with the functions placed at each line before
// it, each with the functions nested in it.
func (lk *linker) emit(lines []string, at map[int][]placed, indent string) {
	for k, line := range lines {
		for _, p := range at[k] {
			fl := strings.SplitAfter(lk.fns[p.fn].Text, "\n")
			head := slices.IndexFunc(fl, func(l string) bool { return strings.HasPrefix(l, "local function "+lk.fns[p.fn].Name+"(") })
			lk.emit(fl, lk.places(p.fn, fl, head+1, len(fl)-1, 2), indent+p.indent)
		}
		if line != "" && line != "\n" {
			lk.b.WriteString(indent)
		}
		lk.b.WriteString(line)
	}
}

// level is a block that holds a line: its opening line, and the first line of its
// statement that holds the line.
type level struct{ open, stmt int }

// places returns where the functions nested in function i (-1: the top-level functions,
// in the script's body) go in lines, whose statements from line first to line end
// (excluding) are indented by indent: by line index, those to write before that line, in
// order, each with the indentation to write it at. Each goes into the innermost block
// that holds every use of it (a loop's body excepted: it would be made on every turn),
// before the first statement of that block that uses it: a function that only a rarer
// path uses is made only when the call takes that path. A use by a function nested
// beside it, or within one, counts where that one goes. Blocks are told by indentation:
// a statement's lines after its first are indented deeper, a block's statements two
// spaces deeper than the line that opens it ("then", "else", "do", "repeat").
func (lk *linker) places(i int, lines []string, first, end, indent int) map[int][]placed {
	scope := scopes(lines, first, end, indent)
	var kids []int
	for j := range lk.fns {
		if lk.need[j] && lk.parent[j] == i {
			kids = append(kids, j)
		}
	}
	// A top-level function goes first when the body declares a name it takes from the
	// top: placed after that declaration, it would take the body's instead.
	var bodyNames []string
	if i < 0 {
		bodyNames = declared(strings.Join(lines, ""))
	}
	where := map[int][]level{}            // a function's place: the scope of the line it goes before
	for n := len(kids) - 1; n >= 0; n-- { // users come after what they use
		j := kids[n]
		if overlap(bodyNames, namesOf(lk.fns[j].Text).free) {
			where[j] = []level{{first - 1, first}}
			continue
		}
		where[j] = lk.place(j, i, lines, scope, where, first, end)
	}
	out := map[int][]placed{}
	for _, j := range kids {
		w := where[j]
		at := w[len(w)-1].stmt
		c := at
		for c > first && c > w[len(w)-1].open+1 && strings.HasPrefix(strings.TrimSpace(lines[c-1]), "--") {
			c--
		}
		if c > first {
			at = c // above the statement's comment, unless that is the text's own header
		}
		out[at] = append(out[at], placed{j, strings.Repeat("  ", len(w)-1+indent/2)})
	}
	return out
}

// scopes returns, for each line k of lines from first to end, the blocks that hold it,
// outermost first: each block's opening line (first-1 for the whole) and the first line
// of its statement that holds line k. Statements from line first are indented by indent.
func scopes(lines []string, first, end, indent int) [][]level {
	scope := make([][]level, len(lines))
	type block struct{ open, indent, last int }
	stack := []block{{open: first - 1, indent: indent, last: first}}
	for k := first; k < end; k++ {
		code := strings.TrimSpace(strip(lines[k]))
		if code == "" {
			continue
		}
		d := len(lines[k]) - len(strings.TrimLeft(lines[k], " "))
		for len(stack) > 1 && stack[len(stack)-1].indent > d {
			stack = stack[:len(stack)-1]
		}
		top := &stack[len(stack)-1]
		word, _, _ := strings.Cut(code, " ")
		if d == top.indent && word != "end" && word != "else" && word != "elseif" && word != "until" {
			top.last = k // a new statement; else a part of the latest one
		}
		for _, b := range stack {
			scope[k] = append(scope[k], level{b.open, b.last})
		}
		if d == top.indent && opensBlock(code) {
			stack = append(stack, block{open: k, indent: d + 2, last: k + 1})
		}
	}
	return scope
}

// opensBlock reports whether a statement's code opens a block on its line.
func opensBlock(code string) bool {
	return strings.HasSuffix(code, " then") || strings.HasSuffix(code, " do") || code == "else" || code == "repeat" || code == "do"
}

// place returns where function j, nested in function i, goes among lines (see places):
// the scope of the statement it goes before.
func (lk *linker) place(j, i int, lines []string, scope [][]level, where map[int][]level, first, end int) []level {
	var uses [][]level
	for k := first; k < end; k++ {
		if scope[k] != nil && slices.Contains(Names(lines[k]), lk.fns[j].Name) {
			uses = append(uses, scope[k])
		}
	}
	for k := range lk.fns {
		if u := lk.kidOf(k, i); k != j && lk.need[k] && u >= 0 && u != j && slices.Contains(lk.calls[k], j) {
			uses = append(uses, where[u])
		}
	}
	if len(uses) == 0 {
		return []level{{first - 1, end}}
	}
	depth := commonDepth(uses, lines)
	at := uses[0][depth].stmt
	for _, u := range uses[1:] {
		at = min(at, u[depth].stmt)
	}
	return append(append([]level(nil), uses[0][:depth]...), level{uses[0][depth].open, at})
}

// kidOf returns the function directly nested in i that holds function k (k itself, or
// one k is nested in), or -1.
func (lk *linker) kidOf(k, i int) int {
	for ; k >= 0; k = lk.parent[k] {
		if lk.parent[k] == i {
			return k
		}
	}
	return -1
}

// commonDepth returns the depth of the deepest block that holds every use and is no
// loop's body.
func commonDepth(uses [][]level, lines []string) int {
	depth := 0
	for ; ; depth++ {
		ok := true
		for _, u := range uses {
			if len(u) <= depth+1 || u[depth+1].open != uses[0][depth+1].open {
				ok = false
				break
			}
		}
		if !ok || loopBody(lines, uses[0][depth+1].open) {
			return depth
		}
	}
}

// loopBody reports whether line k opens the body of a loop: a "do" ending a for or while
// statement's line, or "repeat".
func loopBody(lines []string, k int) bool {
	code := strings.TrimSpace(strip(lines[k]))
	word, _, _ := strings.Cut(code, " ")
	return word == "for" || word == "while" || code == "repeat"
}

// placed is a nested function and the indentation it is written at, within its parent.
type placed struct {
	fn     int
	indent string
}

// uses returns the functions of at among used (a text's Names), but self.
func uses(used []string, at map[string]int, self int) []int {
	var out []int
	for _, n := range used {
		if j, ok := at[n]; ok && j != self {
			out = append(out, j)
		}
	}
	return out
}

// texts keeps, for each function text read so far, its declared and free names: nest
// and places ask for them again and again, every Link reads the same fragments, and the
// regexps are most of a link's time. The fragments are a program's own, few and small.
var texts sync.Map // string → *names

// names are the names a function text uses (Names), declares and takes from outside.
type names struct{ used, declared, free []string }

// namesOf returns text's declared and free names, read once.
func namesOf(text string) *names {
	if v, ok := texts.Load(text); ok {
		return v.(*names)
	}
	nm := &names{used: Names(text), declared: declared(text)}
	for _, n := range nm.used {
		if !slices.Contains(nm.declared, n) {
			nm.free = append(nm.free, n)
		}
	}
	v, _ := texts.LoadOrStore(text, nm)
	return v.(*names)
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
		for i := 0; i < len(line); {
			if !identStart(line[i]) {
				i++
				continue
			}
			j := i + 1
			for j < len(line) && (identStart(line[j]) || line[j] >= '0' && line[j] <= '9') {
				j++
			}
			if n := line[i:j]; (i == 0 || line[i-1] != '.' && line[i-1] != ':') && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
			i = j
		}
	}
	return out
}

// identStart reports whether c may begin a name: a letter or '_'.
func identStart(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }

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
