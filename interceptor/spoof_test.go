package interceptor_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor"
	"github.com/guardkit/guardkit/internal/redistest"
)

// TestSpoofedOwnerNeverReenters: while an owner holds a lock, RPCs that claim to be that
// owner through anything but a valid, trusted token find the lock busy, and the busy
// status says why a token sent under the metadata key was rejected.
func TestSpoofedOwnerNeverReenters(t *testing.T) {
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

	// The service trusts the current key and, during rotation, the previous one.
	verifier := newSigner(t, []ctxid.Key{keyCurrent, keyOld})
	debit := func(ctx context.Context, _ *dynamicpb.Message) (*wrapperspb.Int64Value, error) {
		return wrapperspb.Int64(0), nil
	}
	rules := interceptor.WithRules(interceptor.Rule{Method: mDebit, Key: "account:{req.from_account}",
		Options: []guard.Option{guard.Retry(guard.NoRetry())}})
	sd := service(map[string]unaryFunc{"Debit": debit}, nil)
	conn := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(
		interceptor.UnaryServerInterceptor(locker, unregistered, rules, interceptor.WithSigner(verifier)))))
	// A second instance that takes owners only from callers outside loopback.
	external := func(ctx context.Context) bool {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return false
		}
		ap, ok := p.Addr.(*net.TCPAddr)
		return ok && !ap.IP.IsLoopback()
	}
	untrusting := dial(t, serve(t, sd, grpc.ChainUnaryInterceptor(
		interceptor.UnaryServerInterceptor(locker, unregistered, rules, interceptor.WithSigner(verifier), interceptor.WithTrustedPeer(external)))))

	sign := func(s *ctxid.Signer, hops int) string {
		t.Helper()
		tok, err := s.Sign(owner, hops)
		if err != nil {
			t.Fatalf("Sign: %v", err)
		}
		return tok
	}
	valid := sign(newSigner(t, []ctxid.Key{keyCurrent}), 1)
	// Tokens signed with the right key for other sections of the holder's request.
	signAs := func(id ctxid.ID) string {
		t.Helper()
		tok, err := newSigner(t, []ctxid.Key{keyCurrent}).Sign(id, 1)
		if err != nil {
			t.Fatalf("Sign: %v", err)
		}
		return tok
	}
	sibling, _ := ctxid.Section(owner.Root())
	within, _ := ctxid.Section(owner)
	fields := strings.Split(valid, ".")
	tamper := func(i int, v string) string {
		f := append([]string(nil), fields...)
		f[i] = v
		return strings.Join(f, ".")
	}
	now := time.Now()
	const key = interceptor.MetadataKey

	for _, tc := range []struct {
		name   string
		md     []string // key, value pairs
		conn   *grpc.ClientConn
		reuse  bool   // reenters
		reason string // why the busy status says the token was rejected; "" for none (no token, or one of another section)
	}{
		{name: "valid token", md: []string{key, valid}, reuse: true},
		{name: "token of the previous key", md: []string{key, sign(newSigner(t, []ctxid.Key{keyOld}), 1)}, reuse: true},
		{name: "token of a section within the holder", md: []string{key, signAs(within)}, reuse: true},
		{name: "token of the holder's request root", md: []string{key, signAs(owner.Root())}},
		{name: "token of a sibling section", md: []string{key, signAs(sibling)}},
		{name: "no token", md: nil},
		{name: "bare owner ID", md: []string{key, string(owner)}, reason: "malformed"},
		{name: "wrong secret", md: []string{key, sign(newSigner(t, []ctxid.Key{{ID: keyCurrent.ID, Secret: []byte("attacker-secret-0123456789abcdef")}}), 1)}, reason: "bad_signature"},
		{name: "unknown key ID", md: []string{key, sign(newSigner(t, []ctxid.Key{{ID: "k9", Secret: keyCurrent.Secret}}), 1)}, reason: "unknown_key"},
		{name: "expired", md: []string{key, sign(newSigner(t, []ctxid.Key{keyCurrent}, ctxid.WithClock(func() time.Time { return now.Add(-time.Hour) })), 1)}, reason: "expired"},
		{name: "issued in the future", md: []string{key, sign(newSigner(t, []ctxid.Key{keyCurrent}, ctxid.WithClock(func() time.Time { return now.Add(time.Hour) })), 1)}, reason: "not_yet_valid"},
		{name: "too many hops", md: []string{key, sign(newSigner(t, []ctxid.Key{keyCurrent}, ctxid.MaxHops(255)), 9)}, reason: "too_many_hops"},
		{name: "tampered owner", md: []string{key, tamper(2, string(ctxid.New()))}, reason: "bad_signature"},
		{name: "owner not an ID", md: []string{key, tamper(2, "not-an-owner")}, reason: "invalid_owner"},
		{name: "tampered hops", md: []string{key, tamper(4, "0")}, reason: "bad_signature"},
		{name: "oversized", md: []string{key, valid + strings.Repeat("A", ctxid.MaxTokenLen)}, reason: "too_long"},
		{name: "empty value", md: []string{key, ""}, reason: "malformed"},
		{name: "duplicate values", md: []string{key, valid, key, valid}, reason: "several_values"},
		{name: "binary variant", md: []string{key + "-bin", valid}},
		{name: "other key", md: []string{"guardkit-owner-id", valid}},
		{name: "untrusted peer", md: []string{key, valid}, conn: untrusting, reason: "untrusted_peer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := conn
			if tc.conn != nil {
				c = tc.conn
			}
			ctx := metadata.AppendToOutgoingContext(ctxTimeout(t, 5*time.Second), tc.md...)
			_, err := invoke(ctx, c, mDebit, transfer("9"))
			if tc.reuse {
				if err != nil {
					t.Fatalf("valid owner token did not reenter: %v", err)
				}
				return
			}
			wantRejected(t, err, mDebit, tc.reason)
		})
	}
}
