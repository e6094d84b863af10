//go:build !chaos

package chaos_test

import (
	"testing"

	"github.com/guardkit/guardkit/internal/chaos"
)

// TestSmoke runs the smoke subset of the fault scenarios at small sizes; `make chaos`
// runs all of them at full size.
func TestSmoke(t *testing.T) {
	rows := runScenarios(t, smokeScale, func(s scenario) bool { return s.smoke })
	t.Logf("smoke results (timing slack %s per call, %s per loss):\n%s", smokeScale.slack.Call, smokeScale.slack.Loss, chaos.Markdown(rows))
}
