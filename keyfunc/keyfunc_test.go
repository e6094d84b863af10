package keyfunc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// call is a render input with the shapes every entry point has: a request
// struct, named string values (headers) and a single value (the method).
type call struct {
	req     *order
	headers map[string]string
	method  string
}

func callSources() Sources[call] {
	req := FieldSource[*order]()
	return Sources[call]{
		"req": func(path string) (Getter[call], error) {
			get, err := req(path)
			if err != nil {
				return nil, err
			}
			return func(c call) (string, error) { return get(c.req) }, nil
		},
		"header": Lookup(func(c call, name string) (string, bool) {
			v, ok := c.headers[name]
			return v, ok
		}),
		"method": Value(func(c call) string { return c.method }),
	}
}

func testCall() call {
	return call{
		req: &order{OrderID: "42", Customer: "alice", Account: account{ID: "acct-7"}},
		headers: map[string]string{
			"X-Tenant":     "acme",
			"x-tenant-bin": "AQI=",
			"a.b":          "dotted",
		},
		method: "/bank.Bank/Transfer",
	}
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		text   string
		want   string
		static bool
		phs    []string
	}{
		{text: "order:42", want: "order:42", static: true},
		{text: "{{literal}}", want: "{literal}", static: true},
		{text: "a}}b{{c", want: "a}b{c", static: true},
		{text: "100%", want: "100%", static: true},
		{text: "order:{req.OrderID}", want: "order:42", phs: []string{"req.OrderID"}},
		{text: "{req.Account.ID}", want: "acct-7", phs: []string{"req.Account.ID"}},
		{text: "tenant:{header.X-Tenant}:user:{req.customer}", want: "tenant:acme:user:alice",
			phs: []string{"header.X-Tenant", "req.customer"}},
		{text: "{method}:{req.Account.ID}", want: "/bank.Bank/Transfer:acct-7",
			phs: []string{"method", "req.Account.ID"}},
		{text: "{header.x-tenant-bin}", want: "AQI=", phs: []string{"header.x-tenant-bin"}},
		{text: "{header.a.b}", want: "dotted", phs: []string{"header.a.b"}},
		{text: "rate 100%:{req.OrderID}", want: "rate 100%:42", phs: []string{"req.OrderID"}},
		{text: "{req.OrderID}:50%:{req.Customer}", want: "42:50%:alice",
			phs: []string{"req.OrderID", "req.Customer"}},
		{text: "{req.OrderID}{{{req.Customer}}}", want: "42{alice}",
			phs: []string{"req.OrderID", "req.Customer"}},
		{text: "é{req.OrderID}", want: "é42", phs: []string{"req.OrderID"}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			tpl, err := Parse(tt.text, callSources())
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.Render(testCall())
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Render = %q, want %q", got, tt.want)
			}
			if tpl.String() != tt.text {
				t.Errorf("String = %q, want %q", tpl.String(), tt.text)
			}
			if tpl.Static() != tt.static {
				t.Errorf("Static = %v, want %v", tpl.Static(), tt.static)
			}
			if phs := tpl.Placeholders(); !slices.Equal(phs, tt.phs) {
				t.Errorf("Placeholders = %q, want %q", phs, tt.phs)
			}
		})
	}
}

func TestParseSyntaxErrors(t *testing.T) {
	tests := []struct {
		text string
		col  int
		msg  string
	}{
		{"", 1, "empty template"},
		{"order:{", 7, `unclosed "{" (write "{{" for a literal "{")`},
		{"order:{req.OrderID", 7, `unclosed "{" (write "{{" for a literal "{")`},
		{"order:}", 7, `unmatched "}" (write "}}" for a literal "}")`},
		{"{req.OrderID}}", 14, `unmatched "}" (write "}}" for a literal "}")`},
		{"a{b{c}", 4, `"{" inside a placeholder`},
		{"x{}", 2, "empty placeholder"},
		{"{.x}", 2, "missing source name before the dot"},
		{"{Req.x}", 2, `invalid character 'R' in source name (want [a-z][a-z0-9_]*)`},
		{"{r-q}", 3, `invalid character '-' in source name (want [a-z][a-z0-9_]*)`},
		{"{1a}", 2, `invalid character '1' in source name (want [a-z][a-z0-9_]*)`},
		{"{ req}", 2, `invalid character ' ' in source name (want [a-z][a-z0-9_]*)`},
		{"{req.}", 6, `empty path after "req."`},
		{"{req..x}", 6, "empty path segment"},
		{"{req.x.}", 8, "empty path segment"},
		{"{header.X Tenant}", 10, `invalid character ' ' in path`},
		{"{req.a\tb}", 7, `invalid character '\t' in path`},
		{"{req.a\xffb}", 7, "invalid UTF-8 in path"},
		{"{req.OrderID}{req.Customer}", 14,
			"placeholder {req.Customer} directly follows {req.OrderID}: put literal text between them, or different values could render the same key"},
		{"{req.OrderID}%{req.Customer}", 14,
			`literal text between two placeholders cannot start with "%": it is the escape character of rendered values`},
		// Columns count characters, not bytes.
		{"ééé:{", 5, `unclosed "{" (write "{{" for a literal "{")`},
		// The whole template is checked before any source is asked.
		{"{nope.x}{", 9, `unclosed "{" (write "{{" for a literal "{")`},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			_, err := Parse(tt.text, callSources())
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *SyntaxError", err)
			}
			if !errors.Is(err, ErrSyntax) {
				t.Error("errors.Is(err, ErrSyntax) = false")
			}
			if se.Col != tt.col || se.Msg != tt.msg || se.Text != tt.text {
				t.Errorf("got col %d msg %q text %q, want col %d msg %q", se.Col, se.Msg, se.Text, tt.col, tt.msg)
			}
			want := fmt.Sprintf("keyfunc: syntax error in template %q at column %d: %s", tt.text, tt.col, tt.msg)
			if err.Error() != want {
				t.Errorf("Error() =\n%s\nwant\n%s", err, want)
			}
		})
	}
}

func TestParseBindErrors(t *testing.T) {
	tests := []struct {
		text string
		is   error
		want string
	}{
		{"x:{nope.a}", ErrUnknownSource,
			`keyfunc: template "x:{nope.a}" at column 3: {nope.a}: unknown source "nope" (known: header, method, req)`},
		{"id:{req.Nope}", nil,
			`keyfunc: template "id:{req.Nope}" at column 4: {req.Nope}: no field "Nope" in keyfunc.order`},
		{"{req.Account}", ErrUnsupported,
			`keyfunc: template "{req.Account}" at column 1: {req.Account}: unsupported type keyfunc.account: not key text (want a string, number, bool, []byte, time.Time, encoding.TextMarshaler or fmt.Stringer; name a field or key inside it)`},
		{"{method.x}", nil,
			`keyfunc: template "{method.x}" at column 1: {method.x}: this source takes no path; write it as {source}`},
		{"a:{header}", nil,
			`keyfunc: template "a:{header}" at column 3: {header}: this source needs a key, as in {source.key}`},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			_, err := Parse(tt.text, callSources())
			var be *BindError
			if !errors.As(err, &be) {
				t.Fatalf("err = %v, want *BindError", err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(err, %v) = false", tt.is)
			}
			if errors.Is(err, ErrSyntax) {
				t.Error("a bind error matches ErrSyntax")
			}
			if err.Error() != tt.want {
				t.Errorf("Error() =\n%s\nwant\n%s", err, tt.want)
			}
		})
	}

	t.Run("no sources", func(t *testing.T) {
		_, err := Parse[int]("{req}", nil)
		if want := `keyfunc: template "{req}" at column 1: {req}: unknown source "req" (known: none)`; err == nil || err.Error() != want {
			t.Errorf("err = %v, want %s", err, want)
		}
	})
	t.Run("source error kept", func(t *testing.T) {
		cause := errors.New("no such column")
		_, err := Parse("{db.x}", Sources[int]{"db": func(string) (Getter[int], error) { return nil, cause }})
		if !errors.Is(err, cause) {
			t.Errorf("err = %v, want it to wrap the source's error", err)
		}
	})
	t.Run("nil getter", func(t *testing.T) {
		_, err := Parse("{db.x}", Sources[int]{"db": func(string) (Getter[int], error) { return nil, nil }})
		if want := `keyfunc: template "{db.x}" at column 1: {db.x}: source returned a nil Getter`; err == nil || err.Error() != want {
			t.Errorf("err = %v, want %s", err, want)
		}
	})
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		text string
		edit func(*call)
		is   error
		want string
	}{
		{"order:{req.OrderID}", func(c *call) { c.req.OrderID = "" }, ErrEmpty,
			"keyfunc: {req.OrderID}: empty value"},
		{"order:{req.OrderID}", func(c *call) { c.req = nil }, ErrMissing,
			"keyfunc: {req.OrderID}: missing value: nil"},
		{"t:{header.X-Tenant}", func(c *call) { delete(c.headers, "X-Tenant") }, ErrMissing,
			"keyfunc: {header.X-Tenant}: missing value"},
		{"t:{header.X-Tenant}", func(c *call) { c.headers["X-Tenant"] = "" }, ErrEmpty,
			"keyfunc: {header.X-Tenant}: empty value"},
		{"{method}:{req.OrderID}", func(c *call) { c.method = "" }, ErrEmpty,
			"keyfunc: {method}: empty value"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			tpl, err := Parse(tt.text, callSources())
			if err != nil {
				t.Fatal(err)
			}
			c := testCall()
			tt.edit(&c)
			key, err := tpl.Render(c)
			if key != "" {
				t.Errorf("key = %q on error", key)
			}
			var re *RenderError
			if !errors.As(err, &re) || !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want *RenderError matching %v", err, tt.is)
			}
			if err.Error() != tt.want {
				t.Errorf("Error() =\n%s\nwant\n%s", err, tt.want)
			}
		})
	}

	t.Run("getter error kept", func(t *testing.T) {
		cause := errors.New("boom")
		tpl, err := Parse("{db.x}", Sources[int]{"db": func(string) (Getter[int], error) {
			return func(int) (string, error) { return "", cause }, nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tpl.Render(1)
		var re *RenderError
		if !errors.As(err, &re) || re.Placeholder != "db.x" || !errors.Is(err, cause) {
			t.Errorf("err = %#v, want *RenderError for db.x wrapping the cause", err)
		}
	})
}

func TestEscaping(t *testing.T) {
	sources := Sources[[2]string]{
		"a": Value(func(in [2]string) string { return in[0] }),
		"b": Value(func(in [2]string) string { return in[1] }),
	}
	tests := []struct {
		text string
		a, b string
		want string
	}{
		// One placeholder: values render verbatim.
		{"order:{a}", "4:2%", "", "order:4:2%"},
		{"{a}", "{b}", "", "{b}"},
		// Ordinary values are unchanged.
		{"{a}:{b}", "order", "42", "order:42"},
		// The separator's first byte and "%" are encoded, nothing else.
		{"{a}:{b}", "a:b", "c", "a%3Ab:c"},
		{"{a}:{b}", "a", "b:c", "a:b%3Ac"},
		{"{a}:{b}", "100%", "x", "100%25:x"},
		{"x{a}-to-{b}y", "a-b:t", "c-d", "xa%2Db:t-to-c%2Ddy"},
		{"{a}{{{b}", "{", "}", "%7B{}"},
		{"{a}2{b}", "12", "3", "1%3223"},
		// A separator that starts with a non-ASCII byte encodes every
		// non-ASCII byte, so UTF-8 values stay whole.
		{"{a}é{b}", "ü-é", "ü", "%C3%BC-%C3%A9é%C3%BC"},
	}
	for _, tt := range tests {
		t.Run(tt.text+" "+tt.want, func(t *testing.T) {
			tpl, err := Parse(tt.text, sources)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tpl.Render([2]string{tt.a, tt.b})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Render = %q, want %q", got, tt.want)
			}
		})
	}
}

// decode recovers the placeholder values from a key rendered by tpl, which
// shows that rendering loses nothing. It fails when key is not a rendering.
func decode[In any](tpl *Template[In], key string) ([]string, error) {
	lits := tpl.lits
	n := len(tpl.parts)
	if n == 0 {
		if key != lits[0] {
			return nil, fmt.Errorf("static key %q, want %q", key, lits[0])
		}
		return nil, nil
	}
	rest, ok := strings.CutPrefix(key, lits[0])
	if !ok {
		return nil, fmt.Errorf("no prefix %q", lits[0])
	}
	rest, ok = strings.CutSuffix(rest, lits[n])
	if !ok {
		return nil, fmt.Errorf("no suffix %q", lits[n])
	}
	vals := make([]string, n)
	for i := range n {
		raw := rest
		if i < n-1 {
			sep := lits[i+1]
			j := 0
			for j < len(rest) && rest[j] != sep[0] {
				if rest[j] == '%' {
					j += 3
				} else {
					j++
				}
			}
			if j > len(rest) || !strings.HasPrefix(rest[j:], sep) {
				return nil, fmt.Errorf("value %d: no separator %q", i, sep)
			}
			raw, rest = rest[:j], rest[j+len(sep):]
		}
		v, err := unescape(tpl.esc, raw)
		if err != nil {
			return nil, fmt.Errorf("value %d: %w", i, err)
		}
		vals[i] = v
	}
	return vals, nil
}

func unescape(esc *[256]bool, s string) (string, error) {
	if esc == nil {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) {
				return "", fmt.Errorf("short escape in %q", s)
			}
			var x byte
			if _, err := fmt.Sscanf(s[i+1:i+3], "%02X", &x); err != nil || !esc[x] {
				return "", fmt.Errorf("bad escape %q in %q", s[i:i+3], s)
			}
			b.WriteByte(x)
			i += 2
		case esc[c]:
			return "", fmt.Errorf("bare %q in %q", c, s)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// injectivitySources reads up to three values by position.
func injectivitySources() Sources[[3]string] {
	return Sources[[3]string]{
		"a": Value(func(in [3]string) string { return in[0] }),
		"b": Value(func(in [3]string) string { return in[1] }),
		"c": Value(func(in [3]string) string { return in[2] }),
	}
}

// used returns the values of the placeholders of tpl, in order.
func used(tpl *Template[[3]string], in [3]string) []string {
	var vals []string
	for _, name := range tpl.Placeholders() {
		vals = append(vals, in[name[0]-'a'])
	}
	return vals
}

func TestRenderInjective(t *testing.T) {
	templates := []string{
		"{a}:{b}", "{a}::{b}", "k:{a}:{b}:{c}", "x{a}y{b}z{c}", "{a}2{b}", "{a}A{b}",
		"{a}{{{b}}}{c}", "{a}é{b}", "{a}-{a}", "{a}ab{b}", "{a}", "p{a}s", "{a}:50%:{b}",
	}
	// Pieces chosen to hit separators, escapes and their look-alikes.
	pieces := []string{"a", "b", "x", ":", "::", "%", "%3A", "%25", "2", "A", "{", "}", "é", "\xc3", "-", "ab", "50%"}
	rng := rand.New(rand.NewPCG(1, 2))
	value := func() string {
		var b strings.Builder
		for range 1 + rng.IntN(4) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	for _, text := range templates {
		tpl, err := Parse(text, injectivitySources())
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string][]string{}
		for range 3000 {
			in := [3]string{value(), value(), value()}
			key, err := tpl.Render(in)
			if err != nil {
				t.Fatal(err)
			}
			vals := used(tpl, in)
			if prev, ok := seen[key]; ok && !reflect.DeepEqual(prev, vals) {
				t.Fatalf("%s: %q and %q both render %q", text, prev, vals, key)
			}
			seen[key] = vals
			got, err := decode(tpl, key)
			if err != nil || !reflect.DeepEqual(got, vals) {
				t.Fatalf("%s: decode(%q) = %q, %v; want %q", text, key, got, err, vals)
			}
		}
	}
}

func TestRenderManyPlaceholders(t *testing.T) {
	var text []string
	for range 10 {
		text = append(text, "{a}", "{b}", "{c}")
	}
	tpl, err := Parse(strings.Join(text, "/"), injectivitySources())
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render([3]string{"x", "y/z", "%"})
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("x/y%2Fz/%25/", 10); got+"/" != want {
		t.Errorf("Render = %q, want %q", got, strings.TrimSuffix(want, "/"))
	}
}

func TestConcurrentRender(t *testing.T) {
	tpl, err := Parse("{req.Any.ID}:{req.Any.N}", Sources[order]{"req": FieldSource[order]()})
	if err != nil {
		t.Fatal(err)
	}
	type other struct {
		ID string
		N  uint
	}
	inputs := []order{
		{Any: account{ID: "a", N: 1}},
		{Any: &account{ID: "b", N: 2}},
		{Any: other{ID: "c", N: 3}},
	}
	want := []string{"a:1", "b:2", "c:3"}
	var wg sync.WaitGroup
	errs := make(chan error, 8*len(inputs))
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				k := (g + i) % len(inputs)
				got, err := tpl.Render(inputs[k])
				if err == nil && got != want[k] {
					err = fmt.Errorf("got %q, want %q", got, want[k])
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
