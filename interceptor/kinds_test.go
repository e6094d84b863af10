package interceptor_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/interceptor/lockpb"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestAnnotationKinds: the lock option's kind. Hold, declared KIND_READ, lets its callers
// in together; Debit, KIND_WRITE on the same key, is refused while they are in and runs
// once they are done; Audit, KIND_SEMAPHORE with 2 permits, admits two and refuses a
// third. The caller's signed owner, holding the write lock in another service, reenters
// it in Debit with the same token and takes the read lock it implies in Hold; another
// owner finds both busy. Each handler's lease reports its kind.
func TestAnnotationKinds(t *testing.T) {
	const readers = 3
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	holder, _ := newLocker(t, srv)
	signer := newSigner(t, []ctxid.Key{keyCurrent})
	files := annotate(t, map[string]*lockpb.Lock{
		"Hold":  {Key: "account:{from_account}", Kind: lockpb.Kind_KIND_READ, Wait: failFast()},
		"Debit": {Key: "account:{from_account}", Kind: lockpb.Kind_KIND_WRITE, Wait: failFast()},
		"Audit": {Key: "audit:{from_account}", Kind: lockpb.Kind_KIND_SEMAPHORE, Permits: 2, Wait: failFast()},
	})
	var (
		gate              = make(chan struct{}) // closed to let blocked handlers return
		inside, auditing  atomic.Int32
		kinds             sync.Map // method → guard.Kind seen
		block             atomic.Bool
		allIn, auditsFull = make(chan struct{}), make(chan struct{})
	)
	handler := func(name string, full chan struct{}, n *atomic.Int32, want int32) unaryFunc {
		return func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
			le, ok := guard.LeaseFromContext(ctx)
			if !ok {
				return nil, status.Error(codes.Internal, "no lease")
			}
			kinds.Store(name, le.Kind())
			if block.Load() && full != nil {
				if n.Add(1) == want {
					close(full)
				}
				select {
				case <-gate:
				case <-time.After(10 * time.Second):
					return nil, status.Error(codes.DeadlineExceeded, "never let go")
				}
			}
			return wrapperspb.Int64(le.Token()), nil
		}
	}
	sd := service(map[string]unaryFunc{
		"Hold":  handler("Hold", allIn, &inside, readers),
		"Debit": handler("Debit", nil, nil, 0),
		"Audit": handler("Audit", auditsFull, &auditing, 2),
	}, nil)
	conn := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
		interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files), interceptor.WithSigner(signer)))),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(signer)))
	ctx := ctxTimeout(t, 30*time.Second)

	block.Store(true)
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := invoke(ctx, conn, mHold, transfer("1")); err != nil {
				t.Errorf("Hold: %v", err)
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := invoke(ctx, conn, mAudit, transfer("1")); err != nil {
				t.Errorf("Audit: %v", err)
			}
		}()
	}
	for what, ch := range map[string]chan struct{}{"readers": allIn, "audits": auditsFull} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never all inside at once (%d readers, %d audits)", what, inside.Load(), auditing.Load())
		}
	}
	_, err := invoke(ctx, conn, mDebit, transfer("1"))
	wantBusy(t, err, mDebit, 30*time.Second)
	_, err = invoke(ctx, conn, mAudit, transfer("1"))
	wantBusy(t, err, mAudit, 30*time.Second)
	close(gate)
	wg.Wait()
	block.Store(false)
	if _, err := invoke(ctx, conn, mDebit, transfer("1")); err != nil {
		t.Fatalf("Debit after the readers: %v", err)
	}
	for method, want := range map[string]guard.Kind{"Hold": guard.KindRead, "Debit": guard.KindWrite, "Audit": guard.KindSemaphore} {
		if got, _ := kinds.Load(method); got != want {
			t.Errorf("%s's lease kind %v, want %v", method, got, want)
		}
	}

	// Across services with the signed owner.
	mine := ctxid.NewContext(ctx, ctxid.New())
	outer, err := holder.Acquire(mine, "account:2", guard.Write())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer outer.Release(context.Background())
	token, err := invoke(ctxid.NewContext(ctx, outer.Owner()), conn, mDebit, transfer("2")) // from inside the writer's section
	if err != nil || token != outer.Token() {
		t.Fatalf("Debit as the writer's owner: token %d, %v; want a reentry of token %d", token, err, outer.Token())
	}
	if _, err := invoke(ctxid.NewContext(ctx, outer.Owner()), conn, mHold, transfer("2")); err != nil {
		t.Fatalf("Hold as the writer's owner: %v, want the read lock the write lock implies", err)
	}
	_, err = invoke(ctx, conn, mDebit, transfer("2"))
	wantBusy(t, err, mDebit, 30*time.Second)
	_, err = invoke(ctx, conn, mHold, transfer("2"))
	wantBusy(t, err, mHold, 30*time.Second)
}

// TestUpgradeRefused: a caller whose owner holds an account's read lock calls a method
// that writes it: the server refuses at once with codes.FailedPrecondition and reason
// LOCK_UPGRADE_REFUSED instead of leaving the call waiting for its own caller.
func TestUpgradeRefused(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	signer := newSigner(t, []ctxid.Key{keyCurrent})
	sd := service(map[string]unaryFunc{"Hold": func(context.Context, *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		return wrapperspb.Int64(1), nil
	}}, nil)
	rules := interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "account:{req.from_account}", Options: []guard.Option{guard.Write()}})
	conn := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered, rules, interceptor.WithSigner(signer)))),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(signer)))
	ctx := ctxTimeout(t, 10*time.Second)
	reading, err := locker.Acquire(ctx, "account:acct-up", guard.Read())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reading.Release(context.Background()) }()
	start := time.Now()
	_, err = invoke(reading.Context(), conn, mHold, transfer("acct-up"))
	st := wantCode(t, err, codes.FailedPrecondition)
	wantReason(t, st, interceptor.ReasonUpgradeRefused, mHold)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the refusal took %s: it must not wait", d)
	}
}
