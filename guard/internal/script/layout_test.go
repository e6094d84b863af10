package script_test

import (
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/guard/internal/store"
)

// layoutMentions are the places where a script names the data layout's version: a
// check of the version a key carries (in HMGET's reply, or kinds/lib's version), the
// version a script writes, and the one its error names as wanted.
var layoutMentions = regexp.MustCompile(`(?:v\[\d+\] ~= '|version ~= '|'#v', '|GUARDKIT_LAYOUT ' \.\. .*? \.\. ' )(\d+)'`)

// TestScriptsAgreeOnTheLayout: every script checks for and writes the one version the
// Go side reports (store.Layout, the Want of a LayoutError), so that a layout bump that
// misses one mention fails here, not in a mixed fleet.
func TestScriptsAgreeOnTheLayout(t *testing.T) {
	var names []string
	for _, dir := range []string{"", "kinds"} {
		es, err := os.ReadDir(path.Join("lua", dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if n, ok := strings.CutSuffix(e.Name(), ".lua"); ok {
				names = append(names, path.Join(dir, n))
			}
		}
	}
	n := 0
	for _, name := range names {
		for _, m := range layoutMentions.FindAllStringSubmatch(script.Source(name), -1) {
			n++
			if m[1] != store.Layout {
				t.Errorf("%s.lua: %q names layout %s, the Go side %s", name, m[0], m[1], store.Layout)
			}
		}
	}
	// Every acquire, release and renew script checks the version, and every one that
	// starts a hash writes it: twenty and more. Fewer means the pattern no longer matches
	// how the scripts name it.
	if n < 20 {
		t.Fatalf("found %d mentions of the layout version, want at least 20: update layoutMentions", n)
	}
	t.Logf("%d mentions of layout %s in %d scripts", n, store.Layout, len(names))
}
