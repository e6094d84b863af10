package interceptor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestSameKeySerialized: concurrent RPCs on one key run one at a time, in the order of
// their fencing tokens, each under its own fresh owner.
func TestSameKeySerialized(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	checkSerialized(t, locker)
}

// TestSameKeySerializedQuorum is TestSameKeySerialized with a quorum Locker
// (guard.NewQuorum over three servers): the interceptor takes it like any other.
func TestSameKeySerializedQuorum(t *testing.T) {
	var clients []redis.UniversalClient
	for _, srv := range redistest.StartN(t, 3) {
		clients = append(clients, srv.Client(t))
	}
	locker, err := guard.NewQuorum(clients, guard.RestartDelay(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Close() })
	checkSerialized(t, locker)
}

// checkSerialized sends 8 concurrent RPCs that lock one key through locker and checks
// that their handlers ran one at a time, each with its own owner and a rising token.
func checkSerialized(t *testing.T, locker *guard.Locker) {
	type event struct {
		start bool
		token int64
		key   string
		owner ctxid.ID
	}
	var (
		mu  sync.Mutex
		log []event
	)
	hold := func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		le, ok := guard.LeaseFromContext(ctx)
		if !ok {
			t.Error("handler context carries no lease")
			return nil, nil
		}
		owner, _ := ctxid.FromContext(ctx)
		mu.Lock()
		log = append(log, event{start: true, token: le.Token(), key: le.Key(), owner: owner})
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // widen the window an overlap would need
		mu.Lock()
		log = append(log, event{token: le.Token()})
		mu.Unlock()
		return wrapperspb.Int64(le.Token()), nil
	}
	rules := interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"})
	addr := serve(t, service(map[string]unaryFunc{"Hold": hold}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered, rules)))
	conn := dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)

	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := invoke(ctx, conn, mHold, transfer("1"))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("RPC: %v", err)
		}
	}
	if len(log) != 2*n {
		t.Fatalf("%d events, want %d", len(log), 2*n)
	}
	owners := make(map[ctxid.ID]bool)
	for i := 0; i < len(log); i += 2 {
		s, e := log[i], log[i+1]
		if !s.start || e.start || s.token != e.token {
			t.Fatalf("handlers overlapped: event %d %+v then %+v\nlog: %+v", i, s, e, log)
		}
		if s.key != "account:1" {
			t.Fatalf("lease key %q, want account:1", s.key)
		}
		if i > 0 && s.token <= log[i-2].token {
			t.Fatalf("fencing token %d after %d: not increasing", s.token, log[i-2].token)
		}
		owners[s.owner] = true
	}
	if len(owners) != n {
		t.Fatalf("%d distinct owners for %d RPCs without a token, want one each", len(owners), n)
	}
}

// TestDifferentKeysParallel: RPCs on different keys hold their locks at the same time.
// Each handler waits until both have started, which only happens if neither waits for
// the other's lock.
func TestDifferentKeysParallel(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() {
		started.Wait()
		close(both)
	}()
	debit := func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		started.Done()
		select {
		case <-both:
			return wrapperspb.Int64(1), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	rules := interceptor.WithRules(interceptor.Rule{Method: mDebit, Key: "account:{req.from_account}"})
	addr := serve(t, service(map[string]unaryFunc{"Debit": debit}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered, rules)))
	conn := dial(t, addr)
	ctx := ctxTimeout(t, 5*time.Second)

	errs := make(chan error, 2)
	for _, acct := range []string{"1", "2"} {
		go func() {
			_, err := invoke(ctx, conn, mDebit, transfer(acct))
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("RPC on its own key: %v (the two locks did not overlap)", err)
		}
	}
}
