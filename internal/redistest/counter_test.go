package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestCounterPipelineVsSingleCommands(t *testing.T) {
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t)
	counter := NewCounter()
	rdb.AddHook(counter)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The new connection's HELLO went through the hook.
	if counter.Calls("hello") != 1 || counter.RoundTrips() < 2 {
		t.Fatalf("first command on a new connection: hello=%d round trips=%d, want the handshake counted",
			counter.Calls("hello"), counter.RoundTrips())
	}
	counter.Reset()
	if counter.RoundTrips() != 0 || counter.Commands() != 0 || counter.Calls("ping") != 0 {
		t.Fatal("Reset left counts behind")
	}

	for _, key := range []string{"a", "b", "c"} {
		if err := rdb.Set(ctx, key, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if rt, n := counter.RoundTrips(), counter.Commands(); rt != 3 || n != 3 {
		t.Fatalf("3 single commands: round trips=%d commands=%d, want 3 and 3", rt, n)
	}

	counter.Reset()
	before := srv.CommandCalls(t)["incr"]
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "a")
		p.Incr(ctx, "b")
		p.Get(ctx, "c")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rt, n := counter.RoundTrips(), counter.Commands(); rt != 1 || n != 3 {
		t.Fatalf("pipeline of 3: round trips=%d commands=%d, want 1 and 3", rt, n)
	}
	if got := counter.Calls("incr"); got != 2 {
		t.Fatalf("Calls(incr) = %d, want 2", got)
	}
	if got := counter.Calls("INCR"); got != 2 {
		t.Fatalf("Calls(INCR) = %d, want 2: names are case-insensitive", got)
	}
	if got := srv.CommandCalls(t)["incr"] - before; got != 2 {
		t.Fatalf("server executed incr %d times, want 2", got)
	}
}

func TestCounterScriptRun(t *testing.T) {
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	counter := NewCounter()
	rdb.AddHook(counter)
	script := redis.NewScript("return 7")

	// Not cached yet: EVALSHA fails with NOSCRIPT and Run falls back to EVAL.
	if got, err := script.Run(ctx, rdb, nil).Int(); err != nil || got != 7 {
		t.Fatalf("first Run = %d, %v", got, err)
	}
	if counter.Calls("evalsha") != 1 || counter.Calls("eval") != 1 || counter.RoundTrips() != 2 {
		t.Fatalf("first Run: evalsha=%d eval=%d round trips=%d, want 1, 1, 2",
			counter.Calls("evalsha"), counter.Calls("eval"), counter.RoundTrips())
	}
	counter.Reset()
	if got, err := script.Run(ctx, rdb, nil).Int(); err != nil || got != 7 {
		t.Fatalf("second Run = %d, %v", got, err)
	}
	if counter.Calls("evalsha") != 1 || counter.Calls("eval") != 0 || counter.RoundTrips() != 1 {
		t.Fatalf("second Run: evalsha=%d eval=%d round trips=%d, want 1, 0, 1",
			counter.Calls("evalsha"), counter.Calls("eval"), counter.RoundTrips())
	}
}
