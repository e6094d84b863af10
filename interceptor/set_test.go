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
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/interceptor/lockpb"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestMoreKeys: a rule's MoreKeys, and an option's more_keys, lock the from and the to
// account of each transfer as one lease; transfers in opposite directions never overlap
// on an account nor deadlock.
func TestMoreKeys(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	files := annotate(t, map[string]*lockpb.Lock{
		"Debit": {Key: "acct:{from_account}", MoreKeys: []string{"acct:{to.id}"}, Wait: maxWait(20 * time.Second)},
	})
	var inside atomic.Int32
	var bad atomic.Value
	h := func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		le, ok := guard.LeaseFromContext(ctx)
		if !ok || len(le.Keys()) != 2 {
			return nil, status.Error(codes.Internal, "the handler's lease does not hold both accounts")
		}
		if inside.Add(1) != 1 {
			bad.Store("two transfers of one pair inside at once")
		}
		time.Sleep(time.Millisecond)
		inside.Add(-1)
		return wrapperspb.Int64(int64(len(le.Tokens()))), nil
	}
	sd := service(map[string]unaryFunc{"Hold": h, "Debit": h}, nil)
	conn := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
		interceptor.WithProtoOptions(), interceptor.WithProtoRegistry(files),
		interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "acct:{from_account}", MoreKeys: []string{"acct:{to.id}"},
			Options: []guard.Option{guard.Retry(guard.MaxWait(20*time.Second, nil))}})))))
	ctx := ctxTimeout(t, 60*time.Second)
	to := func(id string) func(*dynamicpb.Message) {
		return func(m *dynamicpb.Message) {
			acct := m.Mutable(transferDesc.Fields().ByName("to")).Message()
			acct.Set(acct.Descriptor().Fields().ByName("id"), protoreflect.ValueOfString(id))
		}
	}
	for _, method := range []string{mHold, mDebit} {
		inside.Store(0)
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				from, dest := "p", "q"
				if i%2 == 1 {
					from, dest = dest, from
				}
				for range 15 {
					if n, err := invoke(ctx, conn, method, transfer(from, to(dest))); err != nil || n != 2 {
						t.Errorf("%s %s→%s = %d, %v", method, from, dest, n, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
}
