package keyfunc

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

type fuzzReq struct {
	ID     string
	N      int
	Labels map[string]string
	Any    any
	Next   *fuzzReq
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", "order:42", "{{x}}", "a}}b", "order:{req.ID}", "{req.Next.ID}:{req.N}",
		"{header.X-Tenant}", "{method}", "{req.Labels.t}-{req.Any}", "{a}{b}", "{req.ID}%{req.N}",
		"{Req.x}", "{req..x}", "{req.}", "x{", "x}", "{a{b}", "é{req.ID}", "{req.a\tb}",
	} {
		f.Add(seed)
	}
	sources := Sources[*fuzzReq]{
		"req": FieldSource[*fuzzReq](),
		"header": Lookup(func(r *fuzzReq, name string) (string, bool) {
			v, ok := r.Labels[name]
			return v, ok
		}),
		"method": Value(func(*fuzzReq) string { return "/svc/M" }),
	}
	in := &fuzzReq{ID: "id", N: 1, Labels: map[string]string{"t": "x"}, Any: "any", Next: &fuzzReq{}}
	unbrace := strings.NewReplacer("{{", "{", "}}", "}")
	f.Fuzz(func(t *testing.T, text string) {
		tpl, err := Parse(text, sources)
		if err != nil {
			var se *SyntaxError
			var be *BindError
			switch {
			case errors.As(err, &se):
				if se.Col < 1 || se.Col > utf8.RuneCountInString(text)+1 || se.Text != text {
					t.Fatalf("bad syntax error %#v", se)
				}
			case errors.As(err, &be):
				if be.Col < 1 || be.Col > utf8.RuneCountInString(text) || !strings.Contains(text, "{"+be.Placeholder+"}") {
					t.Fatalf("bad bind error %#v", be)
				}
			default:
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if tpl.String() != text {
			t.Fatalf("String() = %q, want %q", tpl.String(), text)
		}
		key, err := tpl.Render(in)
		if tpl.Static() {
			if want := unbrace.Replace(text); key != want || err != nil {
				t.Fatalf("static Render = %q, %v; want %q", key, err, want)
			}
			return
		}
		var re *RenderError
		if err != nil && (!errors.As(err, &re) || !slices.Contains(tpl.Placeholders(), re.Placeholder)) {
			t.Fatalf("Render error %v does not name a placeholder", err)
		}
		if err == nil && key == "" {
			t.Fatal("empty key without error")
		}
	})
}

func FuzzRender(f *testing.F) {
	f.Add("{a}:{b}", "a:b", "c", "", "a", "b:c", "")
	f.Add("x{a}y{b}z{c}", "y", "z", "%", "%79", "z", "%25")
	f.Add("{a}2{b}", "12", "3", "", "1", "23", "")
	f.Add("{a}{{{b}}}{c}", "{", "}", "}", "{{", "}", "x")
	f.Add("{a}é{b}", "é", "ü", "", "\xc3", "\xa9ü", "")
	f.Add("{a}-{a}:{c}", "a-b", "", "c", "a", "", "b-c")
	f.Fuzz(func(t *testing.T, text, a1, b1, c1, a2, b2, c2 string) {
		tpl, err := Parse(text, injectivitySources())
		if err != nil {
			return
		}
		in1, in2 := [3]string{a1, b1, c1}, [3]string{a2, b2, c2}
		key1, err1 := tpl.Render(in1)
		key2, err2 := tpl.Render(in2)
		for _, err := range []error{err1, err2} {
			if err != nil && !errors.Is(err, ErrEmpty) {
				t.Fatalf("unexpected render error %v", err)
			}
		}
		if err1 != nil || err2 != nil {
			return
		}
		v1, v2 := used(tpl, in1), used(tpl, in2)
		if (key1 == key2) != slices.Equal(v1, v2) {
			t.Fatalf("%q renders %q for %q and %q for %q", text, key1, v1, key2, v2)
		}
		if got, err := decode(tpl, key1); err != nil || !slices.Equal(got, v1) {
			t.Fatalf("decode(%q) = %q, %v; want %q", key1, got, err, v1)
		}
		allValid := !slices.ContainsFunc(v1, func(v string) bool { return !utf8.ValidString(v) })
		if allValid && utf8.ValidString(text) && !utf8.ValidString(key1) {
			t.Fatalf("valid UTF-8 values rendered invalid UTF-8 %q", key1)
		}
	})
}
