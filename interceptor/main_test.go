package interceptor_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/internal/redistest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(serviceEnv); spec != "" {
		os.Exit(runService(spec)) // this binary is a service process of a deadlock test
	}
	goleak.VerifyTestMain(m, redistest.IgnoreRedial)
}
