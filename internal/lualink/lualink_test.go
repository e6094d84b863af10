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

// TestLink: the body gets the functions it calls and those they call, in the fragment's
// order, each with its comment; not those named in comments or strings only.
func TestLink(t *testing.T) {
	got, err := Link("-- c() is not called here\nreturn b(1) .. 'c()'\n", Fragment{"lib", lib})
	if err != nil {
		t.Fatal(err)
	}
	want := "-- a doubles.\nlocal function a(x)\n  return 2 * x\nend\n" +
		"-- b calls a.\nlocal function b(x)\n  if x then\n    return a(x)\n  end\nend\n" +
		"-- c() is not called here\nreturn b(1) .. 'c()'\n"
	if got != want {
		t.Fatalf("linked:\n%s\nwant:\n%s", got, want)
	}
	if got, _ := Link("return string.a(1)\n", Fragment{"lib", lib}); strings.Contains(got, "local function") {
		t.Fatalf("a field's name linked a function:\n%s", got)
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
