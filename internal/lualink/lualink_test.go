package lualink

import (
	"strings"
	"testing"
)

const lib = `-- lib: a file's header, dropped.

-- a doubles.
local function a(x)
  return 2 * x
end

-- b calls a.
local function b(x)
  if x then
    return a(x)
  end
end

-- c is never called.
local function c()
  return 'b(1) -- not a call'
end
`

// TestLink: the body gets the functions it calls and those they call, each with its
// comment, before the statement that uses them (the body's header comment stays first);
// not those named in comments or strings only. A function only one other calls is
// defined inside it.
func TestLink(t *testing.T) {
	got := mustLink(t, "-- c() is not called here\nreturn b(1) .. 'c()'\n", lib)
	want := "-- c() is not called here\n" +
		"-- b calls a.\nlocal function b(x)\n  if x then\n    -- a doubles.\n    local function a(x)\n      return 2 * x\n    end\n" +
		"    return a(x)\n  end\nend\n" +
		"return b(1) .. 'c()'\n"
	if got != want {
		t.Fatalf("linked:\n%s\nwant:\n%s", got, want)
	}
	if got, _ := Link("return string.a(1)\n", Fragment{"lib", lib}); strings.Contains(got, "local function") {
		t.Fatalf("a field's name linked a function:\n%s", got)
	}
}

// TestLinkNesting: a function stays at the top when the body or two functions use it
// (a is called by both, e is a name in f and in g), or when its one caller declares a
// name it takes from the top (f uses e, which g declares); d, which b alone calls, goes
// inside b.
func TestLinkNesting(t *testing.T) {
	const frag = "local function a()\n  return 1\nend\n" +
		"local function d()\n  return a()\nend\n" +
		"local function b()\n  return a() + d()\nend\n" +
		"local function e()\n  return 2\nend\n" +
		"local function f()\n  return e()\nend\n" +
		"local function g()\n  local e = 3\n  return f() + e\nend\n"
	got := mustLink(t, "return b() + a() + g()\n", frag)
	for _, top := range []string{"a", "b", "e", "f", "g"} {
		if !strings.Contains(got, "\nlocal function "+top+"(") && !strings.HasPrefix(got, "local function "+top+"(") {
			t.Errorf("%s is not at the top:\n%s", top, got)
		}
	}
	if !strings.Contains(got, "local function b()\n  local function d()\n") {
		t.Errorf("d is not inside b, its one caller:\n%s", got)
	}
}

// TestLinkCommonCaller: a function two functions call goes into the one function that
// holds both, into the innermost block that holds their uses.
func TestLinkCommonCaller(t *testing.T) {
	const frag = "local function x()\n  return 1\nend\n" +
		"local function y()\n  return x()\nend\n" +
		"local function z()\n  return x()\nend\n" +
		"local function w(a)\n  if a then\n    return y() + z()\n  end\nend\n"
	got := mustLink(t, "return w(true)\n", frag)
	want := "local function w(a)\n  if a then\n    local function x()\n      return 1\n    end\n" +
		"    local function y()\n      return x()\n    end\n    local function z()\n      return x()\n    end\n" +
		"    return y() + z()\n  end\nend\nreturn w(true)\n"
	if got != want {
		t.Fatalf("linked:\n%s\nwant:\n%s", got, want)
	}
}

// TestLinkPlaces: a nested function goes before the statement that first uses it (a
// after the early return), into the one branch that uses it (b), before the statement
// whose branches both use it (c), never into a loop's body (d).
func TestLinkPlaces(t *testing.T) {
	const frag = "local function a()\n  return 1\nend\n" +
		"local function b()\n  return 2\nend\n" +
		"local function c()\n  return 3\nend\n" +
		"local function d()\n  return 4\nend\n" +
		"local function p(x)\n" +
		"  if x == 1 then\n    return 0\n  end\n" +
		"  local n = a()\n" +
		"  if x == 2 then\n    n = n + b()\n  elseif x == 3 then\n    n = n + c()\n  else\n    n = n + c()\n  end\n" +
		"  for i = 1, x do\n    n = n + d()\n  end\n" +
		"  return n\n" +
		"end\n"
	got := mustLink(t, "return p(5)\n", frag)
	want := "local function p(x)\n" +
		"  if x == 1 then\n    return 0\n  end\n" +
		"  local function a()\n    return 1\n  end\n" +
		"  local n = a()\n" +
		"  local function c()\n    return 3\n  end\n" +
		"  if x == 2 then\n    local function b()\n      return 2\n    end\n    n = n + b()\n" +
		"  elseif x == 3 then\n    n = n + c()\n  else\n    n = n + c()\n  end\n" +
		"  local function d()\n    return 4\n  end\n" +
		"  for i = 1, x do\n    n = n + d()\n  end\n" +
		"  return n\n" +
		"end\n" +
		"return p(5)\n"
	if got != want {
		t.Fatalf("linked:\n%s\nwant:\n%s", got, want)
	}
}

// TestLinkShadow: a function whose name from the top the body declares goes first.
func TestLinkShadow(t *testing.T) {
	got := mustLink(t, "local n = 1\nif n then\n  return f()\nend\n", "local function f()\n  return n\nend\n")
	if want := "local function f()\n  return n\nend\nlocal n = 1\nif n then\n  return f()\nend\n"; got != want {
		t.Fatalf("linked:\n%s\nwant:\n%s", got, want)
	}
}

// TestLinkErrors: what a fragment may not hold, and names defined twice.
func TestLinkErrors(t *testing.T) {
	for name, c := range map[string]struct {
		body  string
		frags []Fragment
		want  string
	}{
		"code outside":  {"return 1", []Fragment{{"f", "local x = 1\n"}}, "f:1: code outside a function"},
		"no end":        {"return 1", []Fragment{{"f", "local function a()\n  return 1\n  end\n"}}, `function a has no "end"`},
		"twice":         {"return a()", []Fragment{{"f", "local function a()\nend\n"}, {"g", "local function a()\nend\n"}}, "g: function a is defined twice"},
		"body defines":  {"local function a()\nend\nreturn a()", []Fragment{{"f", "local function a()\nend\n"}}, "the body defines a"},
		"nameless func": {"return 1", []Fragment{{"f", "local function (x)\nend\n"}}, "f:1: a function definition without its name"},
	} {
		_, err := Link(c.body, c.frags...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, c.want)
		}
	}
}

// mustLink links body with the one fragment frag.
func mustLink(t *testing.T, body, frag string) string {
	t.Helper()
	got, err := Link(body, Fragment{"f", frag})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
