// Command semaphore runs export jobs under a semaphore: at most 3 exports per tenant at
// once, across two "processes" (two Lockers), with guard.Wrap and guard.Permits(3). Each
// job counts the exports running beside it; the peak must be 3, never more.
//
//	go run ./examples/semaphore                           # embedded Redis
//	REDIS_ADDR=localhost:6379 go run ./examples/semaphore # a real one
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardkit/guardkit/examples/internal/embedded"
	"github.com/guardkit/guardkit/guard"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis address (default $"+embedded.EnvAddr+", else an embedded Redis)")
	jobs := flag.Int("jobs", 20, "export jobs, split between two processes")
	permits := flag.Int("permits", 3, "exports per tenant at once")
	flag.Parse()
	log.SetFlags(0)
	if err := run(*redisAddr, *jobs, *permits); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// ExportRequest asks for one export of a tenant's data.
type ExportRequest struct {
	Tenant string
	Job    int
}

func run(redisAddr string, jobs, permits int) error {
	rdb, err := embedded.Open(redisAddr, log.Default())
	if err != nil {
		return err
	}
	defer rdb.Close()
	tenant := "tenant-" + embedded.RunID()
	var running, peak atomic.Int64
	export := func(ctx context.Context, req ExportRequest) (guard.Kind, error) {
		now := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond) // the export's work
		le, _ := guard.LeaseFromContext(ctx)
		return le.Kind(), nil
	}
	lockers, closeLockers, err := rdb.Lockers(2, guard.TTL(5*time.Second)) // two processes
	if err != nil {
		return err
	}
	defer closeLockers()
	var exports []func(context.Context, ExportRequest) (guard.Kind, error)
	for _, l := range lockers { // each process with its decorated method
		exports = append(exports, guard.Wrap(export, guard.Use(l), guard.Key("exports:{req.Tenant}"),
			guard.Permits(permits), guard.Retry(guard.MaxWait(20*time.Second, nil))))
	}
	log.Printf("%d exports of %s in two processes, at most %d at once", jobs, tenant, permits)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	start := time.Now()
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kind, err := exports[i%2](ctx, ExportRequest{Tenant: tenant, Job: i})
			if err == nil && kind != guard.KindSemaphore {
				err = fmt.Errorf("job %d ran under a %s lock", i, kind)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	log.Printf("%d exports in %s, at most %d at once", jobs, elapsed.Round(time.Millisecond), peak.Load())
	switch {
	case len(errs) > 0:
		return fmt.Errorf("FAIL: %d exports failed, the first: %w", len(errs), errs[0])
	case peak.Load() > int64(permits):
		return fmt.Errorf("FAIL: %d exports ran at once, more than %d", peak.Load(), permits)
	case peak.Load() < int64(permits):
		return fmt.Errorf("FAIL: at most %d exports ran at once: the %d permits were never all used", peak.Load(), permits)
	}
	log.Printf("ok: %d exports, never more than %d at once", jobs, permits)
	return nil
}
