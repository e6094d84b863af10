package interceptor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// clientText is everything a client can read of a status: its message and details.
func clientText(err error) string {
	st := status.Convert(err)
	text := st.Message()
	for _, d := range st.Details() {
		text += fmt.Sprintf(" %v", d)
	}
	return text
}

// noSecrets fails t when text holds one of secrets.
func noSecrets(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("%s: the client reads %q, which holds %q", what, text, s)
		}
	}
}

// TestStatusTextsKeepSecrets: a client reads what happened in plain words — busy,
// unavailable, lease lost — and never the lock key (here an account ID), the owner, its
// token or the Redis address, which stay in the error chain on the server; ErrorInfo
// reasons are unchanged. WithExposeKey adds the key for internal APIs.
func TestStatusTextsKeepSecrets(t *testing.T) {
	srv := redistest.Start(t)
	locker, rdb := newLocker(t, srv, guard.TTL(600*time.Millisecond))
	signer := newSigner(t, []ctxid.Key{keyCurrent})
	const account = "user-4242-secret"
	owner := ctxid.New()
	tok, err := signer.Sign(owner, 1)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{account, string(owner), tok, srv.Addr(), "127.0.0.1"}
	entered := make(chan struct{}, 1)
	hold := func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		entered <- struct{}{}
		<-ctx.Done() // until the lease is lost
		return wrapperspb.Int64(1), nil
	}
	rec := make(recorder, 1)
	rules := interceptor.WithRules(
		interceptor.Rule{Method: mHold, Key: "account:{req.from_account}"},
		interceptor.Rule{Method: mDebit, Key: "account:{req.from_account}", Options: []guard.Option{guard.Retry(guard.NoRetry())}},
	)
	build := func(l *guard.Locker, opts ...interceptor.Option) *grpc.ClientConn {
		return dial(t, serve(t, service(map[string]unaryFunc{"Hold": hold, "Debit": ok}, nil),
			grpc.ChainUnaryInterceptor(rec.unary, interceptor.UnaryServerInterceptor(l,
				append([]interceptor.Option{unregistered, rules, interceptor.WithSigner(signer)}, opts...)...))))
	}
	conn := build(locker)
	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t, 10*time.Second), interceptor.MetadataKey, tok)

	// Busy: another owner holds the account.
	le, err := locker.TryAcquire(context.Background(), "account:"+account)
	if err != nil {
		t.Fatal(err)
	}
	_, err = invoke(ctx, conn, mDebit, transfer(account))
	wantReason(t, wantCode(t, err, codes.Aborted), interceptor.ReasonLocked, mDebit)
	t.Logf("busy: %s", clientText(err))
	noSecrets(t, "busy", clientText(err), secrets...)
	if serverErr := rec.next(t); !strings.Contains(serverErr.Error(), account) {
		t.Errorf("server-side error %v: want the key in the chain, for the log", serverErr)
	}
	exposed := build(locker, interceptor.WithExposeKey(true))
	_, err = invoke(ctx, exposed, mDebit, transfer(account))
	rec.next(t)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `key "account:`+account+`"`) {
		t.Errorf("WithExposeKey: message %q, want the key", msg)
	}
	_ = le.Release(context.Background())

	// Lease lost: the lock is deleted while the handler runs.
	errc := make(chan error, 1)
	go func() {
		_, err := invoke(ctx, conn, mHold, transfer(account))
		errc <- err
	}()
	<-entered
	if err := rdb.Del(context.Background(), "guard:{account:"+account+"}").Err(); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	wantReason(t, wantCode(t, err, codes.Aborted), interceptor.ReasonLeaseLost, mHold)
	t.Logf("lease lost: %s", clientText(err))
	noSecrets(t, "lease lost", clientText(err), secrets...)
	rec.next(t)

	// Unavailable: Redis is gone.
	down := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	downLocker, err := guard.New(down)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = downLocker.Close() })
	downConn := build(downLocker)
	srv.Kill(t)
	_, err = invoke(ctx, downConn, mDebit, transfer(account))
	wantReason(t, wantCode(t, err, codes.Unavailable), interceptor.ReasonUnavailable, mDebit)
	t.Logf("unavailable: %s", clientText(err))
	noSecrets(t, "unavailable", clientText(err), secrets...)
	if serverErr := rec.next(t); !strings.Contains(serverErr.Error(), srv.Addr()) {
		t.Errorf("server-side error %v: want the Redis address in the chain, for the log", serverErr)
	}
}

// TestStatusHelper: a handler that makes a guarded call of its own answers its error with
// interceptor.Status as the interceptors would: Aborted with RetryInfo for a busy lock.
func TestStatusHelper(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	reserve := guard.Wrap(func(context.Context, string) (int, error) { return 1, nil },
		guard.Use(locker), guard.Key("sku:{req}"), guard.Retry(guard.NoRetry()))
	debit := func(ctx context.Context, req *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		n, err := reserve(ctx, "ab-12")
		if err != nil {
			return nil, interceptor.Status(ctx, err)
		}
		return wrapperspb.Int64(int64(n)), nil
	}
	conn := dial(t, serve(t, service(map[string]unaryFunc{"Debit": debit}, nil),
		grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(locker, unregistered,
			interceptor.WithRules(interceptor.Rule{Method: mHold, Key: "unused"})))))
	le, err := locker.TryAcquire(context.Background(), "sku:ab-12")
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(context.Background())
	_, err = invoke(ctxTimeout(t, 5*time.Second), conn, mDebit, transfer("1"))
	wantBusy(t, err, mDebit, 30*time.Second)
	noSecrets(t, "busy", clientText(err), "ab-12")

	if err := interceptor.Status(context.Background(), nil); err != nil {
		t.Fatalf("Status(nil) = %v", err)
	}
	other := errors.New("not guard's")
	if err := interceptor.Status(context.Background(), other); err != other {
		t.Fatalf("Status of another error = %v, want it unchanged", err)
	}
	if err := interceptor.Status(context.Background(), guard.ErrUnavailable); status.Code(err) != codes.Unavailable || !errors.Is(err, guard.ErrUnavailable) {
		t.Fatalf("Status(ErrUnavailable) = %v, want Unavailable with the cause in the chain", err)
	}
}
