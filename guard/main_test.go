package guard_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/internal/redistest"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(soakEnv); spec != "" {
		os.Exit(runSoak(spec)) // this binary is a soak process of a deadlock test
	}
	if spec := os.Getenv(cyclerEnv); spec != "" {
		os.Exit(runCycler(spec)) // this binary is a process of a deadlock test
	}
	if spec := os.Getenv(setterEnv); spec != "" {
		os.Exit(runSetter(spec)) // this binary is a set worker of TestSetProcessesOppositeOrders
	}
	if spec := os.Getenv(holderEnv); spec != "" {
		os.Exit(runHolder(spec)) // this binary is a holder process of a kinds test
	}
	goleak.VerifyTestMain(redistest.StopAfter(m, cluster, sentinel), redistest.IgnoreRedial)
}
