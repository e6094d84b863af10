package examples_test

import (
	"bufio"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the example blocks of the README and docs/ from the examples' code")

// The README marks each block copied from an example with a comment on the line before
// its fence:
//
//	<!-- example: examples/echo/main.go#echo -->
//	```go
//	...
//	```
//
// and the example marks the region with "// readme:begin echo" and "// readme:end".
// Regions of .proto files are shown the same way, in ```proto blocks.
var (
	readmeMarker = regexp.MustCompile(`^<!-- example: (\S+)#(\S+) -->$`)
	regionBegin  = regexp.MustCompile(`^\s*// readme:begin (\S+)$`)
	regionEnd    = regexp.MustCompile(`^\s*// readme:end$`)
)

// readmePath is the README; the pages of docs/ are checked the same way.
const readmePath = "../README.md"

// TestREADMEQuickStarts checks that every example block of the README and of the pages
// of docs/ is the region of the example it names, character for character, and that
// every region is shown in one of them. With -update it rewrites the blocks instead.
func TestREADMEQuickStarts(t *testing.T) {
	regions := allRegions(t)
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]bool{}
	for _, page := range append([]string{readmePath}, pages...) {
		checkBlocks(t, page, regions, shown)
	}
	for id := range regions {
		if !shown[id] {
			file, _, _ := strings.Cut(id, "#")
			t.Errorf("region %s is not shown in the README or docs/: add <!-- example: %s --> and a %s block", id, id, fenceOf(file))
		}
	}
}

// checkBlocks checks the example blocks of the page at path against regions, marking
// those it shows; with -update it rewrites them.
func checkBlocks(t *testing.T, path string, regions map[string]string, shown map[string]bool) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Base(path)
	lines := strings.Split(string(raw), "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		out = append(out, lines[i])
		m := readmeMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		id := m[1] + "#" + m[2]
		code, ok := regions[id]
		if !ok {
			t.Errorf("%s line %d names %s: no such region (// readme:begin %s in %s)", page, i+1, id, m[2], m[1])
			continue
		}
		shown[id] = true
		fence := fenceOf(m[1])
		if i+1 >= len(lines) || lines[i+1] != fence {
			t.Errorf("%s line %d: the marker of %s must be followed by a %s fence", page, i+1, id, fence)
			continue
		}
		end := i + 2
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			t.Fatalf("%s line %d: unterminated code block", page, i+2)
		}
		block := strings.Join(lines[i+2:end], "\n")
		if block != code && !*update {
			t.Errorf("%s block of %s (line %d) differs from the example; run go test ./examples -run README -update\n--- %s\n%s\n--- %s\n%s",
				page, id, i+2, page, block, id, code)
		}
		out = append(out, fence, code, "```")
		i = end
	}
	if *update && !t.Failed() {
		if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fenceOf returns the opening fence of a README block copied from file.
func fenceOf(file string) string {
	if strings.HasSuffix(file, ".proto") {
		return "```proto"
	}
	return "```go"
}

// allRegions reads the readme regions of every Go and .proto file under examples, by
// "examples/<path>#<name>", dedented.
func allRegions(t *testing.T) map[string]string {
	t.Helper()
	regions := map[string]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") ||
			!strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".proto") {
			return err
		}
		found, err := fileRegions(path)
		if err != nil {
			return err
		}
		for name, code := range found {
			id := "examples/" + filepath.ToSlash(path) + "#" + name
			if _, dup := regions[id]; dup {
				return fmt.Errorf("%s: region %s defined twice", path, name)
			}
			regions[id] = code
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(regions) == 0 {
		t.Fatal("no readme regions found under examples")
	}
	return regions
}

func fileRegions(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	regions := map[string]string{}
	var (
		name string
		body []string
		n    int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch m := regionBegin.FindStringSubmatch(line); {
		case m != nil:
			if name != "" {
				return nil, fmt.Errorf("%s:%d: region %s begins inside region %s", path, n, m[1], name)
			}
			if _, dup := regions[m[1]]; dup {
				return nil, fmt.Errorf("%s:%d: region %s defined twice", path, n, m[1])
			}
			name, body = m[1], nil
		case regionEnd.MatchString(line):
			if name == "" {
				return nil, fmt.Errorf("%s:%d: readme:end outside a region", path, n)
			}
			regions[name] = dedent(body)
			name = ""
		case name != "":
			body = append(body, line)
		}
	}
	if name != "" {
		return nil, fmt.Errorf("%s: region %s has no readme:end", path, name)
	}
	return regions, sc.Err()
}

// dedent drops the blank lines around lines and the tabs that all of them start with.
func dedent(lines []string) string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, "\t")); indent < 0 || n < indent {
			indent = n
		}
	}
	prefix := strings.Repeat("\t", max(indent, 0))
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimPrefix(l, prefix)
	}
	return strings.Join(out, "\n")
}

// TestREADMEShape checks what the README promises a first reader: under 300 lines, a
// diagram GitHub renders, a contents list, and links that lead somewhere — its own and
// those of the pages of docs/, which it links.
func TestREADMEShape(t *testing.T) {
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	if n := strings.Count(readme, "\n"); n >= 300 {
		t.Errorf("README has %d lines, want under 300", n)
	}
	for _, want := range []string{"```mermaid", "**Contents:**", "redis.NewClient", "guard.New(", ".Acquire(", ".Release(", "guard.Wrap(", "LICENSE", "CHANGELOG.md"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README lacks %q", want)
		}
	}
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`)
	for _, page := range append([]string{readmePath}, pages...) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if page != readmePath && !strings.Contains(readme, "docs/"+filepath.Base(page)) {
			t.Errorf("README does not link %s", page)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "<") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(page), target)); err != nil {
				t.Errorf("%s links %s: %v", page, target, err)
			}
		}
	}
	for _, f := range []string{"../LICENSE", "../CHANGELOG.md"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}
