package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestSketchKeepsTheScenariosGuarantees: the packed sketch prices what it claims to keep
// on the paths the guarantees scenario takes — a retried acquire counts once, a retried
// final release reports it released after other owners took and freed the lock, tokens
// rise, a busy lock answers with its holder's time left, and a layout-3 key fails loudly.
func TestSketchKeepsTheScenariosGuarantees(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: testAddr})
	defer c.Close()
	a, r, err := sketchScripts()
	if err != nil {
		t.Fatal(err)
	}
	acq, rel := redis.NewScript(a), redis.NewScript(r)
	keys := []string{"sketch:k", "sketch:k:q"}
	acquire := func(owner, nonce string) any {
		t.Helper()
		v, err := acq.Run(ctx, c, keys, owner, "10000", nonce, "3600000", "2", "L").Result()
		if err != nil {
			t.Fatalf("acquire %s %s: %v", owner, nonce, err)
		}
		return v
	}
	release := func(owner, nonce string) int64 {
		t.Helper()
		n, err := rel.Run(ctx, c, keys, owner, nonce, "", "3600000", "L", "0", "", "2").Int64()
		if err != nil {
			t.Fatalf("release %s %s: %v", owner, nonce, err)
		}
		return n
	}
	t1, ok := acquire("a", "a1").(int64)
	if !ok {
		t.Fatal("a free lock was not granted")
	}
	if v, want := fmt.Sprint(acquire("a", "a1")), fmt.Sprintf("[1 %d 1]", t1); v != want {
		t.Fatalf("the acquire retried: %s, want %s (counted once)", v, want)
	}
	if v, want := fmt.Sprint(acquire("a", "a2")), fmt.Sprintf("[1 %d 2]", t1); v != want {
		t.Fatalf("a second attempt of the owner: %s, want %s", v, want)
	}
	if v := fmt.Sprint(acquire("b", "b1")); !strings.HasPrefix(v, "[0 ") || !strings.HasSuffix(v, fmt.Sprintf(" %d]", t1)) {
		t.Fatalf("another owner on a held lock: %v, want busy", v)
	}
	if n := release("a", "r1"); n != 2 {
		t.Fatalf("first of two releases: %d, want 2 (still held)", n)
	}
	if n := release("a", "r1"); n != 2 {
		t.Fatalf("that release retried: %d, want 2, counted once", n)
	}
	if n := release("a", "r2"); n != 1 {
		t.Fatalf("the last release: %d, want 1", n)
	}
	t2, ok := acquire("b", "b2").(int64)
	if !ok || t2 <= t1 {
		t.Fatalf("the next owner's token %v, want above %d", t2, t1)
	}
	if n := release("b", "rb"); n != 1 {
		t.Fatalf("b's release: %d, want 1", n)
	}
	if n := release("a", "r2"); n != 1 {
		t.Fatalf("a's final release retried after b took and freed the lock: %d, want 1 (released)", n)
	}
	if n := release("a", "r3"); n != -1 {
		t.Fatalf("a release of a hold that is not there: %d, want -1", n)
	}
	if err := c.HSet(ctx, "sketch:old", "#v", "3", "#o", "x").Err(); err != nil {
		t.Fatal(err)
	}
	err = acq.Run(ctx, c, []string{"sketch:old", "sketch:old:q"}, "a", "10000", "n", "3600000", "2", "L").Err()
	if err == nil || !strings.Contains(err.Error(), "GUARDKIT_LAYOUT 3 sketch") {
		t.Fatalf("a layout-3 key: %v, want GUARDKIT_LAYOUT 3 sketch", err)
	}
}
