package main

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSets runs the several-keys scenario small: both variants complete sets without
// errors, and AcquireAll makes two round trips per set (one script call to take the
// keys, one to give them back) where nested acquisitions make two per key.
func TestSets(t *testing.T) {
	info := redis.NewClient(&redis.Options{Addr: testAddr, PoolSize: 1})
	defer info.Close()
	e := &env{addr: testAddr, info: info, ttl: 10 * time.Second,
		dur: durations{warm: 20 * time.Millisecond, contended: 200 * time.Millisecond}}
	for _, k := range []int{2, 10} {
		set, _, err := e.sets(variantByName(t, "guardkit/set"), k)
		if err != nil {
			t.Fatal(err)
		}
		nested, _, err := e.sets(variantByName(t, "guardkit/nested"), k)
		if err != nil {
			t.Fatal(err)
		}
		if set["errors"] != 0 || nested["errors"] != 0 || set["sets_per_s"] <= 0 || nested["sets_per_s"] <= 0 {
			t.Fatalf("K=%d: set %v, nested %v", k, set, nested)
		}
		if rt := set["rt_per_set_hook"]; rt != 2 {
			t.Errorf("K=%d: AcquireAll made %.2f round trips per set, want 2", k, rt)
		}
		if rt := nested["rt_per_set_hook"]; rt != float64(2*k) {
			t.Errorf("K=%d: nested acquisitions made %.2f round trips per set, want %d", k, rt, 2*k)
		}
	}
}
