package guard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/internal/testproc"
)

// setterEnv, when set, makes the test binary a set worker: it takes its keys as one lock
// (AcquireAll) Rounds times, and inside each hold checks, in Redis, that nobody else is
// inside any of the keys (a counter per key that must read 1) and that each key's token
// is above every token seen for it before (fencing). It prints "done <rounds>" or the
// first failure, "fail <error>".
const setterEnv = "GUARDKIT_TEST_SETTER"

type setterSpec struct {
	Addr   string   `json:"addr"`
	Keys   []string `json:"keys"`
	Rounds int      `json:"rounds"`
}

// probeScript enters a key's probe: it counts the holder in (returning the count, which
// must be 1) and records its token, returning 0 for a token not above the last.
var probeScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) <= last then return -n end
redis.call('SET', KEYS[2], ARGV[1])
return n`)

func runSetter(raw string) int {
	var s setterSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Println("fail", err)
		return 2
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	l, err := guard.New(c, guard.Retry(guard.MaxWait(30*time.Second, nil)))
	if err != nil {
		fmt.Println("fail", err)
		return 2
	}
	defer l.Close()
	ctx := context.Background()
	for round := range s.Rounds {
		if err := setRound(ctx, l, c, s.Keys); err != nil {
			fmt.Printf("fail round %d: %v\n", round, err)
			return 1
		}
	}
	fmt.Println("done", s.Rounds)
	return 0
}

// setRound takes keys as one lock, probes each key inside the hold, and releases.
func setRound(ctx context.Context, l *guard.Locker, c *redis.Client, keys []string) error {
	le, err := l.AcquireAll(ctx, keys)
	if err != nil {
		return err
	}
	var errs []error
	for i, k := range le.Keys() {
		n, err := probeScript.Run(ctx, c, []string{"probe:in:" + k, "probe:token:" + k}, le.Tokens()[i]).Int()
		switch {
		case err != nil:
			errs = append(errs, err)
		case n < 0:
			errs = append(errs, fmt.Errorf("%s: token %d not above the last one seen", k, le.Tokens()[i]))
		case n != 1:
			errs = append(errs, fmt.Errorf("%s: %d holders inside at once", k, n))
		}
	}
	for _, k := range le.Keys() {
		errs = append(errs, c.Decr(ctx, "probe:in:"+k).Err())
	}
	errs = append(errs, le.Release(ctx))
	return errors.Join(errs...)
}

// TestSetProcessesOppositeOrders: two processes taking {a, b} and {b, a} 1,000 times each
// at once, and three processes taking three keys each listed in a rotated order: never a
// deadlock (nor an ErrDeadlock, nor a wait that runs out), never two holders of a key at
// once, tokens always rising.
func TestSetProcessesOppositeOrders(t *testing.T) {
	srv := redistest.Start(t)
	rounds := envInt("GUARD_SET_PROCESS_ROUNDS", 1000)
	for _, tc := range []struct {
		name  string
		lists [][]string
	}{
		{"two keys", [][]string{{"pa", "pb"}, {"pb", "pa"}}},
		{"three keys", [][]string{{"pa", "pb", "pc"}, {"pb", "pc", "pa"}, {"pc", "pa", "pb"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procs := make([]*testproc.Proc, len(tc.lists))
			for i, keys := range tc.lists {
				procs[i] = testproc.Start(t, setterEnv, setterSpec{Addr: srv.Addr(), Keys: keys, Rounds: rounds})
			}
			for i, p := range procs {
				var last string
				for line := range p.Lines {
					last = line
				}
				if want := fmt.Sprint("done ", rounds); last != want {
					t.Errorf("process %d (%s): %q, want %q", i, strings.Join(tc.lists[i], ","), last, want)
				}
			}
		})
	}
}
