//go:build chaos

package chaos_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/chaos"
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

// TestChaos runs every fault scenario at full size and prints the results table.
func TestChaos(t *testing.T) {
	start := time.Now()
	rows := runScenarios(t, fullScale, func(scenario) bool { return true })
	rev := ""
	if r := os.Getenv(revEnv); r != "" {
		rev = " of " + r
	}
	table := fmt.Sprintf("Run%s on %s, %d CPUs (%s, -race), %s in all. Slack: I4 %s, M2 %s, plus the scheduling stall measured at the time.\n\n%s",
		rev, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(),
		time.Since(start).Round(time.Second), fullScale.slack.Call, fullScale.slack.Loss, chaos.Markdown(rows))
	fmt.Println("\n" + table)
	path := os.Getenv(docEnv)
	if path == "" {
		return
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", docEnv, err)
	}
	before, rest, ok1 := strings.Cut(string(doc), tableBegin)
	_, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no %s … %s markers", path, tableBegin, tableEnd)
	}
	out := before + tableBegin + "\n" + table + tableEnd + after
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}
