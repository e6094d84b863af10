package connectguard_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.IgnoreRedial)
}
