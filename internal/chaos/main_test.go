package chaos_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/guardkit/guardkit/internal/redistest"

	"github.com/guardkit/guardkit/internal/chaos"
)

func TestMain(m *testing.M) {
	// go-redis logs dial failures and pool trouble, which the faults provoke by design.
	redis.SetLogger(quiet{})
	if spec := os.Getenv(workerEnv); spec != "" {
		os.Exit(workerMain(spec))
	}
	if os.Getenv(clockEnv) != "" {
		fmt.Println(int64(chaos.Now()))
		os.Exit(0)
	}
	goleak.VerifyTestMain(m, redistest.IgnoreRedial)
}

// clockEnv, when set, makes the test binary print chaos.Now() and exit, so that a test
// can compare clocks across processes.
const clockEnv = "GUARDKIT_CHAOS_CLOCK"

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
