package interceptor_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// rpcSpans is an outer server interceptor that runs each RPC in a span of its own, as an
// OpenTelemetry stats handler does, and keeps the spans.
type rpcSpans struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

func newRPCSpans(t testing.TB) *rpcSpans {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &rpcSpans{tp: tp, rec: rec}
}

func (s *rpcSpans) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, span := s.tp.Tracer("test").Start(ctx, info.FullMethod)
	defer span.End()
	return h(ctx, req)
}

func (s *rpcSpans) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, span := s.tp.Tracer("test").Start(ss.Context(), info.FullMethod)
	defer span.End()
	return h(srv, &ctxStream{ServerStream: ss, ctx: ctx})
}

// ctxStream is a ServerStream with another context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// rejections returns the reasons of the guard.owner_rejected events of the last span
// that ended for method.
func (s *rpcSpans) rejections(t testing.TB, method string) []string {
	t.Helper()
	ended := s.rec.Ended()
	for i := len(ended) - 1; i >= 0; i-- {
		if ended[i].Name() != method {
			continue
		}
		var reasons []string
		for _, ev := range ended[i].Events() {
			if ev.Name != "guard.owner_rejected" {
				continue
			}
			reason := "(no reason)"
			for _, kv := range ev.Attributes {
				if kv.Key == "guard.reason" {
					reason = kv.Value.AsString()
				}
			}
			reasons = append(reasons, reason)
		}
		return reasons
	}
	t.Fatalf("no span ended for %s", method)
	return nil
}

// ownerRejected returns the ErrorInfo with Reason OWNER_TOKEN_REJECTED of st, nil when it
// has none.
func ownerRejected(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == interceptor.ReasonOwnerRejected {
			return ei
		}
	}
	return nil
}

// wantRejected fails the test unless err is the busy status for method and says that
// the owner token was rejected for reason; with reason "", that it says nothing of an
// owner token.
func wantRejected(t testing.TB, err error, method, reason string) {
	t.Helper()
	wantBusy(t, err, method, 30*time.Second)
	st := status.Convert(err)
	ei := ownerRejected(st)
	if reason == "" {
		if ei != nil || strings.Contains(st.Message(), "owner token") {
			t.Fatalf("busy status %v speaks of an owner token, but the call carried none", st)
		}
		return
	}
	if ei == nil || ei.GetDomain() != interceptor.ErrorDomain || ei.GetMetadata()["reason"] != reason || ei.GetMetadata()["method"] != method {
		t.Fatalf("busy status %v: ErrorInfo %v, want %s with reason %q", st, ei, interceptor.ReasonOwnerRejected, reason)
	}
	if want := "owner token rejected (" + reason + ")"; !strings.Contains(st.Message(), want) {
		t.Fatalf("status message %q does not say %q", st.Message(), want)
	}
}

// TestRejectedOwnerToken: a caller that signs its owner with keys the server does not
// share, or a server without a signer, shows up in the busy status and on the RPC's span
// with the reason, and the call never reenters. A token that verifies reenters.
func TestRejectedOwnerToken(t *testing.T) {
	srv := redistest.Start(t)
	holder, _ := newLocker(t, srv)
	locker, _ := newLocker(t, srv)
	owner := ctxid.New()
	le, err := holder.Acquire(ctxid.NewContext(ctxTimeout(t, 5*time.Second), owner), "account:9")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	owner = le.Owner() // callers act from inside the section that holds the lock
	defer le.Release(context.Background())

	watch := func(_ *dynamicpb.Message, ss grpc.ServerStream) error {
		v, _ := ok(ss.Context(), nil)
		return ss.SendMsg(v)
	}
	sd := service(map[string]unaryFunc{"Debit": ok, "Plain": ok}, map[string]streamFunc{"Watch": watch})
	noRetry := []guard.Option{guard.Retry(guard.NoRetry())}
	rules := interceptor.WithRules(
		interceptor.Rule{Method: mDebit, Key: "account:{req.from_account}", Options: noRetry},
		interceptor.Rule{Method: mWatch, Key: "account:{md.x-account}", Options: noRetry},
	)
	spans := newRPCSpans(t)
	last := &chainErr{}
	start := func(opts ...interceptor.Option) string {
		opts = append(opts, rules)
		return serve(t, sd,
			grpc.ChainUnaryInterceptor(spans.unary, last.unary, interceptor.UnaryServerInterceptor(locker, append([]interceptor.Option{unregistered}, opts...)...)),
			grpc.ChainStreamInterceptor(spans.stream, interceptor.StreamServerInterceptor(locker, append([]interceptor.Option{unregistered}, opts...)...)))
	}
	verifying := start(interceptor.WithSigner(newSigner(t, []ctxid.Key{keyCurrent, keyOld})))
	withoutSigner := start()

	for _, tc := range []struct {
		name   string
		addr   string
		signer *ctxid.Signer // the client's
		reason string        // "" for none
		reuse  bool          // reenters
	}{
		{name: "shared key reenters", addr: verifying, signer: newSigner(t, []ctxid.Key{keyCurrent}), reuse: true},
		{name: "previous key reenters", addr: verifying, signer: newSigner(t, []ctxid.Key{keyOld}), reuse: true},
		{name: "client key unknown to the server", addr: verifying,
			signer: newSigner(t, []ctxid.Key{{ID: "k9", Secret: keyCurrent.Secret}}), reason: "unknown_key"},
		{name: "client secret differs", addr: verifying,
			signer: newSigner(t, []ctxid.Key{{ID: keyCurrent.ID, Secret: []byte("another-secret-0123456789abcdef!")}}), reason: "bad_signature"},
		{name: "server without signer", addr: withoutSigner, signer: newSigner(t, []ctxid.Key{keyCurrent}), reason: "no_signer"},
		{name: "client without signer", addr: verifying},
		{name: "neither side has a signer", addr: withoutSigner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dial(t, tc.addr,
				grpc.WithChainUnaryInterceptor(interceptor.UnaryClientInterceptor(tc.signer)),
				grpc.WithChainStreamInterceptor(interceptor.StreamClientInterceptor(tc.signer)))
			ctx := ctxid.NewContext(ctxTimeout(t, 10*time.Second), owner)
			var events []string
			if tc.reason != "" {
				events = []string{tc.reason}
			}
			wantEvents := func(method string) {
				t.Helper()
				if got := spans.rejections(t, method); strings.Join(got, ",") != strings.Join(events, ",") {
					t.Fatalf("%s: guard.owner_rejected events %q, want %q", method, got, events)
				}
			}

			v, err := invoke(ctx, conn, mDebit, transfer("9"))
			switch {
			case tc.reuse && (err != nil || v != 1):
				t.Fatalf("unary: %d, %v; want the caller's owner to reenter", v, err)
			case !tc.reuse:
				wantRejected(t, err, mDebit, tc.reason)
			}
			wantEvents(mDebit)
			if tc.reason != "" && tc.addr == verifying {
				if err := last.last(); !errors.Is(err, guard.ErrLocked) || !errors.Is(err, ctxid.ErrUntrusted) {
					t.Fatalf("server-side error %v: want guard.ErrLocked and ctxid.ErrUntrusted in the chain", err)
				}
			}

			stream, err := conn.NewStream(metadata.AppendToOutgoingContext(ctx, "x-account", "9"),
				&grpc.StreamDesc{ServerStreams: true}, mWatch)
			if err != nil {
				t.Fatalf("NewStream: %v", err)
			}
			if err := stream.SendMsg(transfer("9")); err != nil {
				t.Fatalf("SendMsg: %v", err)
			}
			var got wrapperspb.Int64Value
			err = stream.RecvMsg(&got)
			switch {
			case tc.reuse && (err != nil || got.GetValue() != 1):
				t.Fatalf("stream: %d, %v; want the caller's owner to reenter", got.GetValue(), err)
			case tc.reuse:
				// The stream's end comes after its span's.
				if err := stream.RecvMsg(&got); err != io.EOF {
					t.Fatalf("stream end: %v", err)
				}
			default:
				wantRejected(t, err, mWatch, tc.reason)
			}
			wantEvents(mWatch)

			// A method without a rule runs, and a rejected token is on its span all the same.
			if _, err := invoke(ctx, conn, mPlain, transfer("9")); err != nil {
				t.Fatalf("unguarded method: %v", err)
			}
			wantEvents(mPlain)
		})
	}
}
