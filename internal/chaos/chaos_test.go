//go:build chaos

package chaos_test

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/internal/chaos"
)

// docEnv names the Markdown file whose results table TestChaos rewrites, between the
// markers below; `make chaos` points it at docs/RELIABILITY.md.
const docEnv = "GUARDKIT_CHAOS_DOC"

// revEnv names the revision of the code under test, quoted in the table's heading.
const revEnv = "GUARDKIT_CHAOS_REV"

const (
	tableBegin = "<!-- chaos-table:begin -->"
	tableEnd   = "<!-- chaos-table:end -->"
)

// groupEnv names the group of scenarios TestChaos runs (see group); empty for all.
// `make chaos-single`, `chaos-kinds`, `chaos-deploy` and `chaos-quorum` set it, each a run
// of under ten minutes, and `make chaos` runs the four in turn.
const groupEnv = "GUARDKIT_CHAOS_GROUP"

// groups are the groups of scenarios, in the order of the results table.
var groups = []string{"single", "kinds", "deploy", "quorum"}

// group returns the group of scenario s: the lock kinds' rows, the Cluster and Sentinel
// rows, the quorum rows, and the rest on a single server.
func group(s scenario) string {
	switch {
	case strings.HasPrefix(s.name, "read-write:"), strings.HasPrefix(s.name, "semaphore:"), strings.HasPrefix(s.name, "fair:"):
		return "kinds"
	case strings.HasPrefix(s.name, "cluster:"), strings.HasPrefix(s.name, "sentinel:"):
		return "deploy"
	case strings.HasPrefix(s.name, "quorum"):
		return "quorum"
	}
	return "single"
}

// TestChaos runs the fault scenarios of the group groupEnv names (every one when it is
// empty) at full size, prints the results table and writes it into the file docEnv
// names: each group's table between markers of its own inside the results section.
func TestChaos(t *testing.T) {
	start := time.Now()
	want := os.Getenv(groupEnv)
	if want != "" && !slices.Contains(groups, want) {
		t.Fatalf("%s=%q: want one of %v, or empty for all", groupEnv, want, groups)
	}
	var tables []string
	for _, g := range groups {
		if want != "" && g != want {
			continue
		}
		gs := time.Now()
		rows := runScenarios(t, fullScale, func(s scenario) bool { return group(s) == g })
		rev := ""
		if r := os.Getenv(revEnv); r != "" {
			rev = " of " + r
		}
		table := fmt.Sprintf("#### Group %q\n\nRun%s on %s, %d CPUs (%s, -race), %s. Slack: I4 %s, M2 %s, plus the scheduling stall measured at the time.\n\n%s",
			g, rev, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(),
			time.Since(gs).Round(time.Second), fullScale.slack.Call, fullScale.slack.Loss, chaos.Markdown(rows))
		fmt.Println("\n" + table)
		tables = append(tables, g, table)
	}
	t.Logf("%s in all", time.Since(start).Round(time.Second))
	path := os.Getenv(docEnv)
	if path == "" {
		return
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", docEnv, err)
	}
	out := string(doc)
	for i := 0; i < len(tables); i += 2 {
		if out, err = putTable(out, tables[i], tables[i+1]); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// putTable puts table between group g's markers in doc's results section, adding them in
// the groups' order when doc has none yet.
func putTable(doc, g, table string) (string, error) {
	begin, end := "<!-- chaos-table:"+g+":begin -->", "<!-- chaos-table:"+g+":end -->"
	if before, rest, ok := strings.Cut(doc, begin); ok {
		_, after, ok := strings.Cut(rest, end)
		if !ok {
			return "", fmt.Errorf("%s without %s", begin, end)
		}
		return before + begin + "\n" + table + end + after, nil
	}
	before, rest, ok1 := strings.Cut(doc, tableBegin)
	inside, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		return "", fmt.Errorf("no %s … %s markers", tableBegin, tableEnd)
	}
	// Insert before the first later group's markers, or at the end of the section.
	at := len(inside)
	for _, later := range groups[slices.Index(groups, g)+1:] {
		if i := strings.Index(inside, "<!-- chaos-table:"+later+":begin -->"); i >= 0 && i < at {
			at = i
		}
	}
	inside = inside[:at] + begin + "\n" + table + end + "\n" + inside[at:]
	return before + tableBegin + inside + tableEnd + after, nil
}
