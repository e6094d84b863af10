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

var update = flag.Bool("update", false, "rewrite the README's example blocks from the examples' code")

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

const readmePath = "../README.md"

// TestREADMEQuickStarts checks that every example block of the README is the region of
// the example it names, character for character, and that every region is shown. With
// -update it rewrites the blocks instead.
func TestREADMEQuickStarts(t *testing.T) {
	regions := allRegions(t)
	raw, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	shown := map[string]bool{}
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
			t.Errorf("README line %d names %s: no such region (// readme:begin %s in %s)", i+1, id, m[2], m[1])
			continue
		}
		shown[id] = true
		fence := fenceOf(m[1])
		if i+1 >= len(lines) || lines[i+1] != fence {
			t.Errorf("README line %d: the marker of %s must be followed by a %s fence", i+1, id, fence)
			continue
		}
		end := i + 2
		for end < len(lines) && lines[end] != "```" {
			end++
		}
		if end == len(lines) {
			t.Fatalf("README line %d: unterminated code block", i+2)
		}
		block := strings.Join(lines[i+2:end], "\n")
		if block != code && !*update {
			t.Errorf("README block of %s (line %d) differs from the example; run go test ./examples -run README -update\n--- README\n%s\n--- %s\n%s",
				id, i+2, block, id, code)
		}
		out = append(out, fence, code, "```")
		i = end
	}
	for id := range regions {
		if !shown[id] {
			file, _, _ := strings.Cut(id, "#")
			t.Errorf("region %s is not shown in the README: add <!-- example: %s --> and a %s block", id, id, fenceOf(file))
		}
	}
	if *update && !t.Failed() {
		if err := os.WriteFile(readmePath, []byte(strings.Join(out, "\n")), 0o644); err != nil {
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
