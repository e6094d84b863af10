package ctxid_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/guardkit/guardkit/ctxid"
)

// TestInbound: the one policy both transports apply to inbound owner tokens.
func TestInbound(t *testing.T) {
	s := newSigner(t)
	owner := ctxid.New()
	tok, err := s.Sign(owner, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	got, used, ref := s.Inbound(ctx, "h", nil)
	if ref != nil || used != "" || got != ctx {
		t.Fatalf("no token: ctx changed %v, token %q, refusal %v; want ctx as it is", got != ctx, used, ref)
	}
	got, used, ref = s.Inbound(ctx, "h", []string{tok})
	if id, ok := ctxid.FromContext(got); ref != nil || used != tok || !ok || id != owner || ctxid.HopsFromContext(got) != 2 {
		t.Fatalf("a valid token: owner %q (%v), hops %d, token %v, refusal %v; want %q with 2 hops", id, ok, ctxid.HopsFromContext(got), used == tok, ref, owner)
	}

	bad := tok[:len(tok)-2] + "xx"
	for _, tt := range []struct {
		name   string
		s      *ctxid.Signer
		values []string
		reason string
	}{
		{"several", s, []string{tok, tok}, ctxid.RefusedSeveral},
		{"empty", s, []string{""}, "malformed"},
		{"bad signature", s, []string{bad}, "bad_signature"},
		{"no signer", nil, []string{tok}, ctxid.RefusedNoSigner},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, used, ref := tt.s.Inbound(ctx, "the h header", tt.values)
			if ref == nil || ref.Reason != tt.reason || got != ctx || used != "" {
				t.Fatalf("refusal %v (ctx changed %v, token %q), want reason %q and ctx as it is", ref, got != ctx, used, tt.reason)
			}
			if !errors.Is(ref, ctxid.ErrUntrusted) {
				t.Fatalf("%v does not match ErrUntrusted", ref)
			}
			if strings.Contains(ref.Error(), tok) || strings.Contains(ref.Error(), bad) {
				t.Fatalf("refusal %q quotes the token", ref)
			}
		})
	}
	if _, _, ref := s.Inbound(ctx, "the h header", []string{tok, tok}); !strings.Contains(ref.Error(), "2 values of the h header") {
		t.Fatalf("several values: %q, want the count and where they came from", ref)
	}
}
