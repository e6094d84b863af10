package main

import (
	"strings"
	"testing"
)

// TestCapacityPage: the capacity page of the committed results has a row for every
// concurrency of each deployment, each with its numbers, and the provisioning rule.
func TestCapacityPage(t *testing.T) {
	r := committedReport(t)
	page := r.capacityPage()
	for _, want := range []string{"## One primary", "## N primaries (Redis Cluster)", "## A quorum of M servers",
		"## What to provision for R locked requests per second", "## Checked against the run"} {
		if !strings.Contains(page, want) {
			t.Errorf("the capacity page has no %q", want)
		}
	}
	for _, scenario := range []string{"uncontended", "cluster-uncontended", "quorum-uncontended"} {
		cells := r.cells(scenario)
		if len(cells) == 0 {
			t.Fatalf("results.jsonl has no %s medians", scenario)
		}
		for _, c := range cells {
			found := false
			for _, line := range strings.Split(page, "\n") {
				if strings.HasPrefix(line, "| "+c+" |") || strings.HasPrefix(line, "| "+scenario+" | "+c+" |") {
					found = true
					if strings.Contains(line, "—") {
						t.Errorf("%s %s: a figure is missing: %s", scenario, c, line)
					}
				}
			}
			if !found {
				t.Errorf("%s %s: no row on the capacity page", scenario, c)
			}
		}
	}
}
