package interceptor_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/internal/testproc"
)

// serviceEnv, when set, makes the test binary a service process for
// TestDeadlockAcrossServices: it serves Accounts.Hold and Accounts.Debit, each guarded
// on account:{req.from_account}, says "addr <address>", reads "peer <address>" on stdin
// and says "ready". Hold calls the peer's Debit for the account labels["next"], with the
// owner propagated, once that account is locked; Debit returns at once. It serves until
// its stdin closes.
const serviceEnv = "GUARDKIT_TEST_SERVICE"

type serviceSpec struct {
	Redis string `json:"redis"`
	Label string `json:"label"`
}

func runService(raw string) int {
	var s serviceSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Redis})
	defer rdb.Close()
	l, err := guard.New(rdb, guard.Label(s.Label)) // deadlock detection after the default 1s
	if err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		return 2
	}
	defer l.Close()
	signer, err := ctxid.NewSigner([]ctxid.Key{keyCurrent})
	if err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		return 2
	}
	var peer *grpc.ClientConn
	hold := func(ctx context.Context, req *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		next := label(req, "next")
		for o, _ := redistest.ReadHolder(ctx, rdb, "guard:{account:"+next+"}"); o == ""; o, _ = redistest.ReadHolder(ctx, rdb, "guard:{account:"+next+"}") {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		v, err := invoke(ctx, peer, mDebit, transfer(next))
		return wrapperspb.Int64(v), err
	}
	debit := func(context.Context, *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		return wrapperspb.Int64(1), nil
	}
	key := "account:{req.from_account}"
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor.UnaryServerInterceptor(l, interceptor.WithSigner(signer), unregistered,
		interceptor.WithRules(
			interceptor.Rule{Method: mHold, Key: key},
			interceptor.Rule{Method: mDebit, Key: key, Options: []guard.Option{guard.Retry(guard.MaxWait(20*time.Second, nil))}},
		))))
	srv.RegisterService(service(map[string]unaryFunc{"Hold": hold, "Debit": debit}, nil), struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		return 2
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	fmt.Println("addr", lis.Addr())
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return 1
	}
	peer, err = grpc.NewClient(strings.TrimSpace(strings.TrimPrefix(line, "peer ")),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(signer)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		return 2
	}
	defer peer.Close()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, in)
	return 0
}

// serviceProc is a service process started by startService.
type serviceProc struct {
	stdin io.Writer
	lines <-chan string
}

func startService(t *testing.T, spec serviceSpec) *serviceProc {
	t.Helper()
	p := testproc.Start(t, serviceEnv, spec)
	return &serviceProc{stdin: p.Stdin, lines: p.Lines}
}

func (p *serviceProc) read(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			t.Fatalf("service said %q (open %t), want %q…", l, ok, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, prefix))
	case <-time.After(20 * time.Second):
		t.Fatalf("service did not say %q", prefix)
	}
	return ""
}

// TestDeadlockAcrossServices: the four processes, each a service with its own
// Locker on one Redis. Request 1 holds account X in A and calls B, which needs Y; request
// 2 holds Y in C and calls D, which needs X. The waits in B and D are sections of the
// callers' requests (the owner travels in signed metadata), so the cycle runs through all
// four processes and no one of them sees it: exactly one request fails with Aborted and
// reason DEADLOCK — no key or owner in what its client reads — and the other completes
// once the victim's locks are released.
func TestDeadlockAcrossServices(t *testing.T) {
	srv := redistest.Start(t)
	var procs []*serviceProc
	var addrs []string
	for _, name := range []string{"A", "B", "C", "D"} {
		p := startService(t, serviceSpec{Redis: srv.Addr(), Label: "svc-" + name})
		procs, addrs = append(procs, p), append(addrs, p.read(t, "addr "))
	}
	// A calls B, C calls D; B and D call nobody (their peer is never used).
	for i, peer := range []int{1, 0, 3, 2} {
		fmt.Fprintf(procs[i].stdin, "peer %s\n", addrs[peer])
	}
	for _, p := range procs {
		p.read(t, "ready")
	}
	c1, c2 := dial(t, addrs[0]), dial(t, addrs[2])

	const x, y = "acct-7781", "acct-9902"
	ctx := ctxTimeout(t, 30*time.Second)
	type result struct {
		err error
		at  time.Time
	}
	results := make([]result, 2)
	start := time.Now()
	var wg sync.WaitGroup
	for i, call := range []struct {
		conn       *grpc.ClientConn
		from, next string
	}{{c1, x, y}, {c2, y, x}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := invoke(ctx, call.conn, mHold, transfer(call.from, withLabel("next", call.next)))
			results[i] = result{err, time.Now()}
		}()
	}
	wg.Wait()
	victims := 0
	var victimAt, okAt time.Time
	for i, r := range results {
		switch {
		case r.err == nil:
			okAt = r.at
		case status.Code(r.err) == codes.Aborted && errorInfo(status.Convert(r.err)).GetReason() == interceptor.ReasonDeadlock:
			victims++
			victimAt = r.at
			msg := status.Convert(r.err).Message()
			t.Logf("request %d chosen: %s (%s after the calls)", i+1, msg, r.at.Sub(start))
			for _, secret := range []string{x, y, srv.Addr()} {
				if strings.Contains(msg, secret) {
					t.Errorf("the client reads %q, which holds %q", msg, secret)
				}
			}
			if retryInfo(status.Convert(r.err)) != nil {
				t.Errorf("a deadlock's status carries RetryInfo; waiting does not clear it")
			}
		default:
			t.Errorf("request %d: %v, want OK or Aborted with reason %s", i+1, r.err, interceptor.ReasonDeadlock)
		}
	}
	if victims != 1 || okAt.IsZero() {
		t.Fatalf("%d victims, want exactly 1 and the other request completed", victims)
	}
	if okAt.Before(victimAt.Add(-50 * time.Millisecond)) {
		t.Errorf("the other request completed %s before the victim's answer", victimAt.Sub(okAt))
	}
	t.Logf("the other request completed %s after the calls began", okAt.Sub(start))
}

// TestDeadlockStatus: interceptor.Status answers ErrDeadlock with Aborted, reason
// DEADLOCK, no RetryInfo and no key, and keeps the error in the chain.
func TestDeadlockStatus(t *testing.T) {
	de := &guard.DeadlockError{Key: "acct-1", Cycle: []guard.DeadlockEdge{{Key: "acct-1", Holder: "h"}, {Key: "acct-2", Holder: "g"}}}
	err := interceptor.Status(context.Background(), fmt.Errorf("wrapped: %w", de))
	st := status.Convert(err)
	if st.Code() != codes.Aborted || errorInfo(st).GetReason() != interceptor.ReasonDeadlock || retryInfo(st) != nil {
		t.Fatalf("Status(deadlock) = %v, want Aborted with reason DEADLOCK and no RetryInfo", err)
	}
	if strings.Contains(st.Message(), "acct-") {
		t.Errorf("message %q carries a key", st.Message())
	}
	if !errors.Is(err, guard.ErrDeadlock) {
		t.Errorf("Status(deadlock) = %v: ErrDeadlock is not in its chain", err)
	}
}
