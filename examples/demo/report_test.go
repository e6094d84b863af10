package main

import (
	"strings"
	"testing"
	"time"
)

func TestReportAccounting(t *testing.T) {
	c := config{accounts: 2, requests: 6, amount: 10, balance: 100}
	result := func(ok []int, final []int64, busy, failed int) *outcome {
		return &outcome{ok: ok, final: final, busy: busy, failed: failed, waits: []time.Duration{time.Millisecond}}
	}
	// Unguarded: 3 withdrawals answered 200 on each account, but the balances show
	// only 1 and 2 of them.
	unguarded := result([]int{3, 3}, []int64{90, 80}, 0, 0)
	if got := unguarded.lost(c); got != 3 {
		t.Fatalf("unguarded lost = %d, want 3", got)
	}
	for _, tc := range []struct {
		name    string
		guarded *outcome
		pass    bool
		says    string
	}{
		{"every success in the balances", result([]int{3, 3}, []int64{70, 70}, 0, 0), true, "PASS"},
		// A 409 is not a withdrawal: the expected balance counts only 200 OK answers.
		{"busy answers are not withdrawals", result([]int{2, 3}, []int64{80, 70}, 1, 0), true, "PASS"},
		{"a lost update", result([]int{3, 3}, []int64{80, 70}, 0, 0), false, "FAIL"},
		{"a withdrawal that was never answered 200", result([]int{2, 3}, []int64{70, 70}, 0, 1), false, "FAIL"},
		{"a failed request", result([]int{3, 2}, []int64{70, 80}, 0, 1), false, "FAIL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if got := report(&out, c, tc.guarded, unguarded); got != tc.pass {
				t.Fatalf("report = %v, want %v; output:\n%s", got, tc.pass, out.String())
			}
			if !strings.Contains(out.String(), "\n"+tc.says+":") {
				t.Fatalf("output does not say %s:\n%s", tc.says, out.String())
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]string{0.50: "50ms", 0.90: "90ms", 0.99: "99ms"} {
		if got := percentile(ds, q); got != want {
			t.Errorf("p%.0f = %s, want %s", q*100, got, want)
		}
	}
	if got := percentile(nil, 0.5); got != "-" {
		t.Errorf("percentile of nothing = %q, want -", got)
	}
}
