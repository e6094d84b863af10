package keyfunc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Getter reads one placeholder's value from the render input. It returns an
// error matching ErrMissing when the value is absent.
type Getter[In any] func(in In) (string, error)

// A Source resolves a placeholder path into a Getter. Parse calls it once per
// placeholder; the Getter runs on every Render. path is the text after
// "name." ("" for a bare "{name}" placeholder). A Source returns an error to
// reject the path at parse time.
type Source[In any] func(path string) (Getter[In], error)

// Sources maps source names, as written in templates, to their Source.
type Sources[In any] map[string]Source[In]

// Template is a parsed key template. It is immutable and safe for
// concurrent use.
type Template[In any] struct {
	text  string
	lits  []string // literal runs, unescaped; len(lits) == len(parts)+1
	parts []part[In]
	// esc marks the bytes that are percent-encoded in rendered values; nil
	// when values render verbatim (templates with at most one placeholder).
	esc    *[256]bool
	litLen int
}

type part[In any] struct {
	name string // placeholder without braces, as in "req.From"
	get  Getter[In]
}

// Parse parses text and binds each placeholder to its source. Every
// mistake is reported here, not at render time: a malformed template
// returns a *SyntaxError, an unknown source or a path its source rejects
// returns a *BindError. Both carry the column of the problem.
func Parse[In any](text string, sources Sources[In]) (*Template[In], error) {
	lits, phs, err := scan(text)
	if err != nil {
		var se *SyntaxError
		if errors.As(err, &se) && se.body != "" {
			name, path, _ := strings.Cut(se.body, ".")
			se.hint = suggestion(sources, name, path)
		}
		return nil, err
	}
	t := &Template[In]{text: text, lits: lits}
	for _, l := range lits {
		t.litLen += len(l)
	}
	for _, p := range phs {
		get, err := bind(sources, p)
		if err != nil {
			return nil, &BindError{Text: text, Placeholder: p.body, Col: column(text, p.start), Err: err,
				hint: suggestion(sources, p.source, p.path)}
		}
		t.parts = append(t.parts, part[In]{name: p.body, get: get})
	}
	if len(phs) > 1 {
		// See "Escaping" in the package documentation for why these bytes
		// make rendering injective.
		t.esc = new([256]bool)
		t.esc['%'] = true
		for _, l := range lits[1 : len(lits)-1] {
			if c := l[0]; c < utf8.RuneSelf {
				t.esc[c] = true
				continue
			}
			// Encoding only a lead byte would split characters of values;
			// encoding every non-ASCII byte keeps UTF-8 values valid.
			for c := utf8.RuneSelf; c < len(t.esc); c++ {
				t.esc[c] = true
			}
		}
	}
	return t, nil
}

func bind[In any](sources Sources[In], p placeholder) (Getter[In], error) {
	src := sources[p.source]
	if src == nil {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownSource, p.source, knownSources(sources))
	}
	get, err := src(p.path)
	if err != nil {
		return nil, err
	}
	if get == nil {
		return nil, errors.New("keyfunc: source returned a nil Getter")
	}
	return get, nil
}

func knownSources[In any](sources Sources[In]) string {
	var names []string
	for name, src := range sources {
		if src != nil {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Render renders the key for in. It fails with a *RenderError when a
// placeholder's value is missing or empty.
func (t *Template[In]) Render(in In) (string, error) {
	if len(t.parts) == 0 {
		return t.lits[0], nil
	}
	// Values are collected first so the key is built in one allocation.
	var buf [8]string
	vals := buf[:0]
	n := t.litLen
	for _, p := range t.parts {
		s, err := p.get(in)
		if err != nil {
			return "", &RenderError{Placeholder: p.name, Err: err}
		}
		if s == "" {
			return "", &RenderError{Placeholder: p.name, Err: ErrEmpty}
		}
		n += len(s) + 2*t.escapes(s)
		vals = append(vals, s)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(t.lits[0])
	for i, s := range vals {
		t.writeValue(&b, s)
		b.WriteString(t.lits[i+1])
	}
	return b.String(), nil
}

// escapes counts the bytes of s that writeValue percent-encodes.
func (t *Template[In]) escapes(s string) int {
	if t.esc == nil {
		return 0
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if t.esc[s[i]] {
			n++
		}
	}
	return n
}

func (t *Template[In]) writeValue(b *strings.Builder, s string) {
	if t.esc == nil {
		b.WriteString(s)
		return
	}
	const hex = "0123456789ABCDEF"
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !t.esc[c] {
			continue
		}
		b.WriteString(s[start:i])
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
		start = i + 1
	}
	b.WriteString(s[start:])
}

// String returns the template text as given to Parse.
func (t *Template[In]) String() string { return t.text }

// Static reports whether the template has no placeholders, so every Render
// returns the same key.
func (t *Template[In]) Static() bool { return len(t.parts) == 0 }

// Placeholders returns the placeholders in order of appearance, without
// braces, as in ["tenant.id", "req.From"]. The result is a fresh slice.
func (t *Template[In]) Placeholders() []string {
	names := make([]string, len(t.parts))
	for i, p := range t.parts {
		names[i] = p.name
	}
	return names
}

// placeholder is one "{...}" of a template, before binding.
type placeholder struct {
	start, end   int    // byte offsets of "{" and "}"
	body         string // text between the braces
	source, path string
}

// scan splits text into literal runs and placeholders and checks the
// syntax. The literal runs have "{{" and "}}" unescaped.
func scan(text string) (lits []string, phs []placeholder, err error) {
	if text == "" {
		return nil, nil, syntaxError(text, 0, "empty template")
	}
	var lit []byte
	for i := 0; i < len(text); {
		switch c := text[i]; c {
		case '{':
			if i+1 < len(text) && text[i+1] == '{' {
				lit = append(lit, '{')
				i += 2
				continue
			}
			end := strings.IndexAny(text[i+1:], "{}")
			if end < 0 {
				return nil, nil, syntaxError(text, i, `unclosed "{" (write "{{" for a literal "{")`)
			}
			end += i + 1
			if text[end] == '{' {
				return nil, nil, syntaxError(text, end, `"{" inside a placeholder`)
			}
			p := placeholder{start: i, end: end, body: text[i+1 : end]}
			if err := p.check(text); err != nil {
				return nil, nil, err
			}
			if len(phs) > 0 {
				prev := phs[len(phs)-1]
				if len(lit) == 0 {
					return nil, nil, syntaxError(text, i, fmt.Sprintf(
						"placeholder {%s} directly follows {%s}: put literal text between them, or different values could render the same key",
						p.body, prev.body))
				}
				if lit[0] == '%' {
					return nil, nil, syntaxError(text, prev.end+1,
						`literal text between two placeholders cannot start with "%": it is the escape character of rendered values`)
				}
			}
			lits = append(lits, string(lit))
			lit = lit[:0]
			phs = append(phs, p)
			i = end + 1
		case '}':
			if i+1 < len(text) && text[i+1] == '}' {
				lit = append(lit, '}')
				i += 2
				continue
			}
			return nil, nil, syntaxError(text, i, `unmatched "}" (write "}}" for a literal "}")`)
		default:
			lit = append(lit, c)
			i++
		}
	}
	return append(lits, string(lit)), phs, nil
}

// check validates the placeholder's source name and path and splits them.
func (p *placeholder) check(text string) error {
	if p.body == "" {
		return syntaxError(text, p.start, "empty placeholder")
	}
	name, path, dotted := strings.Cut(p.body, ".")
	if name == "" {
		return syntaxError(text, p.start+1, "missing source name before the dot")
	}
	for i, r := range name {
		if 'a' <= r && r <= 'z' || i > 0 && ('0' <= r && r <= '9' || r == '_') {
			continue
		}
		se := syntaxError(text, p.start+1+i, fmt.Sprintf("invalid character %q in source name (want [a-z][a-z0-9_]*)", r))
		se.body = p.body // Parse suggests what it may have meant
		return se
	}
	p.source, p.path = name, path
	if !dotted {
		return nil
	}
	off := p.start + 1 + len(name) + 1 // byte offset of path in text
	if path == "" {
		return syntaxError(text, off, fmt.Sprintf("empty path after %q", name+"."))
	}
	segStart := true
	for i := 0; i < len(path); {
		r, size := utf8.DecodeRuneInString(path[i:])
		switch {
		case r == '.':
			if segStart {
				return syntaxError(text, off+i, "empty path segment")
			}
			segStart = true
			i += size
			continue
		case r == utf8.RuneError && size == 1:
			return syntaxError(text, off+i, "invalid UTF-8 in path")
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return syntaxError(text, off+i, fmt.Sprintf("invalid character %q in path", r))
		}
		segStart = false
		i += size
	}
	if segStart {
		return syntaxError(text, off+len(path), "empty path segment")
	}
	return nil
}

func syntaxError(text string, off int, msg string) *SyntaxError {
	return &SyntaxError{Text: text, Col: column(text, off), Msg: msg}
}

// column converts a byte offset into a 1-based column in runes.
func column(text string, off int) int {
	return utf8.RuneCountInString(text[:off]) + 1
}
