package ctxid_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/ctxid"
)

var (
	t0      = time.Unix(1_700_000_000, 0)
	secret1 = bytes.Repeat([]byte{0x11}, 32)
	secret2 = bytes.Repeat([]byte{0x22}, 32)
	key1    = ctxid.Key{ID: "k1", Secret: secret1}
	key2    = ctxid.Key{ID: "k2", Secret: secret2}
)

func clockAt(t time.Time) ctxid.Option {
	return ctxid.WithClock(func() time.Time { return t })
}

// newSigner returns a signer with key1 whose clock stands at t0.
func newSigner(t testing.TB, opts ...ctxid.Option) *ctxid.Signer {
	t.Helper()
	s, err := ctxid.NewSigner([]ctxid.Key{key1}, append([]ctxid.Option{clockAt(t0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// macOf computes a token's MAC the way the format documents it.
func macOf(secret []byte, signed string) string {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(signed))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

func TestNewSignerConfig(t *testing.T) {
	tests := []struct {
		name  string
		keys  []ctxid.Key
		opts  []ctxid.Option
		field string
	}{
		{"no keys", nil, nil, "keys"},
		{"empty key ID", []ctxid.Key{{ID: "", Secret: secret1}}, nil, "keys[0].ID"},
		{"long key ID", []ctxid.Key{{ID: strings.Repeat("k", 33), Secret: secret1}}, nil, "keys[0].ID"},
		{"dot in key ID", []ctxid.Key{key1, {ID: "k.2", Secret: secret2}}, nil, "keys[1].ID"},
		{"non-ASCII key ID", []ctxid.Key{{ID: "clé", Secret: secret1}}, nil, "keys[0].ID"},
		{"short secret", []ctxid.Key{key1, {ID: "k2", Secret: secret2[:15]}}, nil, "keys[1].Secret"},
		{"nil secret", []ctxid.Key{{ID: "k1"}}, nil, "keys[0].Secret"},
		{"duplicate key ID", []ctxid.Key{key1, {ID: "k1", Secret: secret2}}, nil, "keys[1].ID"},
		{"zero MaxAge", []ctxid.Key{key1}, []ctxid.Option{ctxid.MaxAge(0)}, "MaxAge"},
		{"negative MaxSkew", []ctxid.Key{key1}, []ctxid.Option{ctxid.MaxSkew(-time.Second)}, "MaxSkew"},
		{"zero MaxHops", []ctxid.Key{key1}, []ctxid.Option{ctxid.MaxHops(0)}, "MaxHops"},
		{"huge MaxHops", []ctxid.Key{key1}, []ctxid.Option{ctxid.MaxHops(256)}, "MaxHops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ctxid.NewSigner(tt.keys, tt.opts...)
			if !errors.Is(err, ctxid.ErrConfig) || s != nil {
				t.Fatalf("NewSigner = %v, %v; want ErrConfig", s, err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("error %q does not name %s", err, tt.field)
			}
		})
	}
	if _, err := ctxid.NewSigner([]ctxid.Key{key1}, nil, ctxid.WithClock(nil), ctxid.MaxHops(255), ctxid.MaxSkew(0)); err != nil {
		t.Fatalf("nil options should be ignored: %v", err)
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	s := newSigner(t)
	owner := ctxid.New()
	for hops := 0; hops <= 8; hops++ {
		tok, err := s.Sign(owner, hops)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("v1.k1.%s.%d.%d.", owner, t0.Unix(), hops)
		if !strings.HasPrefix(tok, want) || tok != want+macOf(secret1, want[:len(want)-1]) {
			t.Fatalf("Sign = %q, want %s<mac>", tok, want)
		}
		if len(tok) > ctxid.MaxTokenLen {
			t.Fatalf("token of %d bytes exceeds MaxTokenLen", len(tok))
		}
		c, err := s.Verify(tok)
		if err != nil {
			t.Fatalf("Verify(%q): %v", tok, err)
		}
		want2 := ctxid.Claims{Owner: owner, Hops: hops, IssuedAt: t0.UTC(), KeyID: "k1"}
		if c != want2 {
			t.Fatalf("Verify = %+v, want %+v", c, want2)
		}
	}
}

func TestSecretIsCopied(t *testing.T) {
	secret := bytes.Clone(secret1)
	s, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: secret}}, clockAt(t0))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Sign(ctxid.New(), 0)
	if err != nil {
		t.Fatal(err)
	}
	clear(secret)
	if _, err := s.Verify(tok); err != nil {
		t.Fatalf("changing the caller's secret slice changed the signer: %v", err)
	}
}

func TestRotation(t *testing.T) {
	old := newSigner(t)
	rotated, err := ctxid.NewSigner([]ctxid.Key{key2, key1}, clockAt(t0))
	if err != nil {
		t.Fatal(err)
	}
	owner := ctxid.New()
	oldTok, _ := old.Sign(owner, 0)
	newTok, err := rotated.Sign(owner, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(newTok, "v1.k2.") {
		t.Fatalf("rotated signer should sign with its first key: %q", newTok)
	}
	if c, err := rotated.Verify(oldTok); err != nil || c.KeyID != "k1" || c.Owner != owner {
		t.Fatalf("rotated signer rejects old token: %+v, %v", c, err)
	}
	if c, err := rotated.Verify(newTok); err != nil || c.KeyID != "k2" {
		t.Fatalf("rotated signer rejects its own token: %+v, %v", c, err)
	}
	if _, err := old.Verify(newTok); !errors.Is(err, ctxid.ErrUnknownKey) {
		t.Fatalf("old signer on new key: %v, want ErrUnknownKey", err)
	}
}

// fields splits a token into its six fields.
func fields(t *testing.T, tok string) []string {
	t.Helper()
	f := strings.Split(tok, ".")
	if len(f) != 6 {
		t.Fatalf("token %q has %d fields", tok, len(f))
	}
	return f
}

func TestVerifyRejects(t *testing.T) {
	s := newSigner(t)
	owner := ctxid.New()
	tok, err := s.Sign(owner, 2)
	if err != nil {
		t.Fatal(err)
	}
	f := fields(t, tok)
	join := func(version, kid, own, issued, hops, mac string) string {
		return strings.Join([]string{version, kid, own, issued, hops, mac}, ".")
	}
	// resign builds a token with a valid MAC over arbitrary fields.
	resign := func(secret []byte, kid, own, issued, hops string) string {
		signed := join("v1", kid, own, issued, hops, "")
		signed = signed[:len(signed)-1]
		return signed + "." + macOf(secret, signed)
	}
	// Same 32 bytes, but the unused low bits of the last character set.
	lastMAC := f[5][len(f[5])-1]
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	sibling := alphabet[strings.IndexByte(alphabet, lastMAC)|1]
	nonCanonicalMAC := f[5][:len(f[5])-1] + string(sibling)
	issued := fmt.Sprint(t0.Unix())

	tests := []struct {
		name string
		tok  string
		want error
	}{
		{"empty", "", ctxid.ErrMalformed},
		{"oversized", tok + strings.Repeat("A", ctxid.MaxTokenLen), ctxid.ErrTooLong},
		{"one byte over", strings.Repeat("A", ctxid.MaxTokenLen+1), ctxid.ErrTooLong},
		{"at the limit", strings.Repeat("A", ctxid.MaxTokenLen), ctxid.ErrMalformed},
		{"trailing CRLF", tok + "\r\n", ctxid.ErrMalformed},
		{"LF inside", strings.Replace(tok, ".", "\n.", 1), ctxid.ErrMalformed},
		{"header injection", tok + "\r\nSet-Cookie: x", ctxid.ErrMalformed},
		{"non-ASCII", strings.Replace(tok, "k1", "ké", 1), ctxid.ErrMalformed},
		{"space", " " + tok, ctxid.ErrMalformed},
		{"NUL", tok + "\x00", ctxid.ErrMalformed},
		{"plus", strings.Replace(tok, ".2.", ".+2.", 1), ctxid.ErrMalformed},
		{"duplicate dots", strings.Replace(tok, ".", "..", 1), ctxid.ErrMalformed},
		{"leading dot", "." + tok, ctxid.ErrMalformed},
		{"trailing dot", tok + ".", ctxid.ErrMalformed},
		{"five fields", join("v1", "k1", owner.String(), issued, "2", "")[:len(tok)-len(f[5])-1], ctxid.ErrMalformed},
		{"seven fields", tok + ".x", ctxid.ErrMalformed},
		{"only dots", ".....", ctxid.ErrMalformed},
		{"version v2", join("v2", f[1], f[2], f[3], f[4], f[5]), ctxid.ErrMalformed},
		{"version V1", join("V1", f[1], f[2], f[3], f[4], f[5]), ctxid.ErrMalformed},
		{"empty key ID", join("v1", "", f[2], f[3], f[4], f[5]), ctxid.ErrMalformed},
		{"long key ID", join("v1", strings.Repeat("k", 33), f[2], f[3], f[4], f[5]), ctxid.ErrMalformed},
		{"unknown key ID", join("v1", "k9", f[2], f[3], f[4], f[5]), ctxid.ErrUnknownKey},
		{"owner too short", join("v1", "k1", f[2][:21], f[3], f[4], f[5]), ctxid.ErrInvalidOwner},
		{"owner non-canonical", resign(secret1, "k1", "AAAAAAAAAAAAAAAAAAAAAB", issued, "2"), ctxid.ErrInvalidOwner},
		{"owner empty", join("v1", "k1", "", f[3], f[4], f[5]), ctxid.ErrInvalidOwner},
		{"issued empty", join("v1", "k1", f[2], "", f[4], f[5]), ctxid.ErrMalformed},
		{"issued leading zero", join("v1", "k1", f[2], "0"+f[3], f[4], f[5]), ctxid.ErrMalformed},
		{"issued negative", join("v1", "k1", f[2], "-"+f[3], f[4], f[5]), ctxid.ErrMalformed},
		{"issued letters", join("v1", "k1", f[2], "17e8", f[4], f[5]), ctxid.ErrMalformed},
		{"issued overflow", join("v1", "k1", f[2], "99999999999999999999", f[4], f[5]), ctxid.ErrMalformed},
		{"hops empty", join("v1", "k1", f[2], f[3], "", f[5]), ctxid.ErrMalformed},
		{"hops leading zero", join("v1", "k1", f[2], f[3], "02", f[5]), ctxid.ErrMalformed},
		{"hops four digits", join("v1", "k1", f[2], f[3], "1000", f[5]), ctxid.ErrMalformed},
		{"mac empty", join("v1", "k1", f[2], f[3], f[4], ""), ctxid.ErrMalformed},
		{"mac short", join("v1", "k1", f[2], f[3], f[4], f[5][:42]), ctxid.ErrMalformed},
		{"mac long", tok + "A", ctxid.ErrMalformed},
		{"tampered owner", join("v1", "k1", ctxid.New().String(), f[3], f[4], f[5]), ctxid.ErrBadSignature},
		{"tampered issued", join("v1", "k1", f[2], fmt.Sprint(t0.Unix()-1), f[4], f[5]), ctxid.ErrBadSignature},
		{"tampered hops", join("v1", "k1", f[2], f[3], "1", f[5]), ctxid.ErrBadSignature},
		{"tampered mac", join("v1", "k1", f[2], f[3], f[4], strings.Repeat("A", 43)), ctxid.ErrBadSignature},
		{"non-canonical mac", join("v1", "k1", f[2], f[3], f[4], nonCanonicalMAC), ctxid.ErrBadSignature},
		{"wrong key under known ID", resign(secret2, "k1", f[2], issued, "2"), ctxid.ErrBadSignature},
		{"hops over max", resign(secret1, "k1", f[2], issued, "9"), ctxid.ErrTooManyHops},
		{"expired", resign(secret1, "k1", f[2], fmt.Sprint(t0.Add(-5*time.Minute-time.Second).Unix()), "2"), ctxid.ErrExpired},
		{"issued at zero", resign(secret1, "k1", f[2], "0", "2"), ctxid.ErrExpired},
		{"future", resign(secret1, "k1", f[2], fmt.Sprint(t0.Add(31*time.Second).Unix()), "2"), ctxid.ErrNotYetValid},
		{"far future", resign(secret1, "k1", f[2], "999999999999999999", "2"), ctxid.ErrNotYetValid},
	}
	reasons := []error{
		ctxid.ErrTooLong, ctxid.ErrMalformed, ctxid.ErrInvalidOwner, ctxid.ErrUnknownKey,
		ctxid.ErrBadSignature, ctxid.ErrExpired, ctxid.ErrNotYetValid, ctxid.ErrTooManyHops,
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := s.Verify(tt.tok)
			if !errors.Is(err, tt.want) || !errors.Is(err, ctxid.ErrUntrusted) {
				t.Fatalf("Verify(%q) = %+v, %v; want %v and ErrUntrusted", tt.tok, c, err, tt.want)
			}
			if c != (ctxid.Claims{}) {
				t.Fatalf("rejected token returned claims %+v", c)
			}
			var ve *ctxid.VerifyError
			if !errors.As(err, &ve) || ve.Reason != tt.want {
				t.Fatalf("error %v is not a *VerifyError with reason %v", err, tt.want)
			}
			for _, r := range reasons {
				if r != tt.want && errors.Is(err, r) {
					t.Fatalf("error %v also matches %v", err, r)
				}
			}
			if !strings.HasPrefix(err.Error(), "ctxid: ") || strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("error message %q is not a single prefixed line", err)
			}
		})
	}
}

func TestVerifyRejectsEveryByteChange(t *testing.T) {
	s := newSigner(t)
	tok, err := s.Sign(ctxid.New(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(tok); i++ {
		for _, c := range []byte{'A', 'z', '0', '_', '-', '.', '\n'} {
			if tok[i] == c {
				continue
			}
			bad := tok[:i] + string(c) + tok[i+1:]
			if _, err := s.Verify(bad); !errors.Is(err, ctxid.ErrUntrusted) {
				t.Fatalf("Verify accepted %q (byte %d changed to %q): %v", bad, i, c, err)
			}
		}
	}
}

func TestVerifyTimeWindow(t *testing.T) {
	owner := ctxid.New()
	tok, err := newSigner(t).Sign(owner, 0)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		now  time.Time
		opts []ctxid.Option
		want error
	}{
		{"at issue", t0, nil, nil},
		{"at max age", t0.Add(5 * time.Minute), nil, nil},
		{"past max age", t0.Add(5*time.Minute + time.Second), nil, ctxid.ErrExpired},
		{"custom max age", t0.Add(2 * time.Second), []ctxid.Option{ctxid.MaxAge(time.Second)}, ctxid.ErrExpired},
		{"within skew", t0.Add(-30 * time.Second), nil, nil},
		{"beyond skew", t0.Add(-31 * time.Second), nil, ctxid.ErrNotYetValid},
		{"custom skew", t0.Add(-2 * time.Second), []ctxid.Option{ctxid.MaxSkew(time.Second)}, ctxid.ErrNotYetValid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := ctxid.NewSigner([]ctxid.Key{key1}, append([]ctxid.Option{clockAt(tt.now)}, tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Verify(tok)
			if tt.want == nil && err != nil || !errors.Is(err, tt.want) {
				t.Fatalf("Verify at %v: %v, want %v", tt.now.Sub(t0), err, tt.want)
			}
		})
	}
}

func TestVerifyHopLimit(t *testing.T) {
	wide := newSigner(t, ctxid.MaxHops(20))
	narrow := newSigner(t, ctxid.MaxHops(3))
	owner := ctxid.New()
	for hops := 0; hops <= 20; hops++ {
		tok, err := wide.Sign(owner, hops)
		if err != nil {
			t.Fatal(err)
		}
		_, err = narrow.Verify(tok)
		if hops <= 3 && err != nil || hops > 3 && !errors.Is(err, ctxid.ErrTooManyHops) {
			t.Fatalf("MaxHops(3) verifying %d hops: %v", hops, err)
		}
	}
}

func TestSignErrors(t *testing.T) {
	s := newSigner(t)
	if _, err := s.Sign("not-an-id", 0); !errors.Is(err, ctxid.ErrInvalid) {
		t.Fatalf("Sign(invalid owner) = %v, want ErrInvalid", err)
	}
	if _, err := s.Sign(ctxid.New(), -1); err == nil || errors.Is(err, ctxid.ErrUntrusted) {
		t.Fatalf("Sign(hops -1) = %v, want a plain error", err)
	}
	if _, err := s.Sign(ctxid.New(), 9); !errors.Is(err, ctxid.ErrTooManyHops) || errors.Is(err, ctxid.ErrUntrusted) {
		t.Fatalf("Sign(hops 9) = %v, want ErrTooManyHops only", err)
	}
	before := newSigner(t, ctxid.WithClock(func() time.Time { return time.Unix(-1, 0) }))
	if _, err := before.Sign(ctxid.New(), 0); err == nil {
		t.Fatal("Sign with a clock before 1970 succeeded")
	}
	var nilSigner *ctxid.Signer
	if _, err := nilSigner.Sign(ctxid.New(), 0); !errors.Is(err, ctxid.ErrConfig) {
		t.Fatalf("nil Signer Sign = %v, want ErrConfig", err)
	}
}

func TestAccept(t *testing.T) {
	s := newSigner(t)
	owner := ctxid.New()
	tok, err := s.Sign(owner, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The server's base context may carry an owner; a request never inherits it.
	base := ctxid.NewContext(context.Background(), ctxid.New())
	baseID, _ := ctxid.FromContext(base)

	ctx, id, err := s.Accept(base, tok)
	if err != nil || id != owner {
		t.Fatalf("Accept(valid) = %q, %v; want %q", id, err, owner)
	}
	if got, _ := ctxid.FromContext(ctx); got != owner || ctxid.HopsFromContext(ctx) != 2 {
		t.Fatalf("Accept(valid) context: %q, hops %d", got, ctxid.HopsFromContext(ctx))
	}

	tests := []struct {
		name    string
		signer  *ctxid.Signer
		tok     string
		wantErr error
	}{
		{"empty", s, "", nil},
		{"tampered", s, tamperLast(tok), ctxid.ErrUntrusted},
		{"garbage", s, "\r\n\x00", ctxid.ErrMalformed},
		{"nil signer empty", nil, "", nil},
		{"nil signer valid token", nil, tok, ctxid.ErrUnknownKey},
		{"nil signer garbage", nil, "garbage", ctxid.ErrUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, id, err := tt.signer.Accept(ctxid.NewContext(base, baseID), tt.tok)
			if tt.wantErr == nil && err != nil || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Accept error %v, want %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ctxid.ErrUntrusted) {
				t.Fatalf("Accept error %v does not match ErrUntrusted", err)
			}
			if id == owner || id == baseID {
				t.Fatalf("Accept kept an untrusted owner %q", id)
			}
			if _, perr := ctxid.Parse(id.String()); perr != nil {
				t.Fatalf("fresh owner %q is not canonical", id)
			}
			if got, _ := ctxid.FromContext(ctx); got != id || ctxid.HopsFromContext(ctx) != 0 {
				t.Fatalf("context carries %q hops %d, want %q hops 0", got, ctxid.HopsFromContext(ctx), id)
			}
		})
	}
}

func TestOutboundCountsHops(t *testing.T) {
	s := newSigner(t, ctxid.MaxHops(3))
	ctx, owner := ctxid.Ensure(context.Background())
	for hop := 1; hop <= 3; hop++ {
		tok, ok := s.Outbound(ctx)
		if !ok {
			t.Fatalf("Outbound refused hop %d", hop)
		}
		var id ctxid.ID
		var err error
		ctx, id, err = s.Accept(context.Background(), tok)
		if err != nil || id != owner || ctxid.HopsFromContext(ctx) != hop {
			t.Fatalf("hop %d: Accept = %q, %v, hops %d", hop, id, err, ctxid.HopsFromContext(ctx))
		}
	}
	if tok, ok := s.Outbound(ctx); ok || tok != "" {
		t.Fatalf("Outbound beyond MaxHops = %q, %v", tok, ok)
	}
}

func TestOutboundRefuses(t *testing.T) {
	s := newSigner(t)
	var nilSigner *ctxid.Signer
	withOwner := ctxid.NewContext(context.Background(), ctxid.New())
	tests := []struct {
		name   string
		signer *ctxid.Signer
		ctx    context.Context
	}{
		{"no owner", s, context.Background()},
		{"empty owner", s, ctxid.NewContext(context.Background(), "")},
		{"invalid owner", s, ctxid.NewContext(context.Background(), "not-an-id")},
		{"nil signer", nilSigner, withOwner},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tok, ok := tt.signer.Outbound(tt.ctx); ok || tok != "" {
				t.Fatalf("Outbound = %q, %v; want none", tok, ok)
			}
		})
	}
	if _, ok := s.Outbound(withOwner); !ok {
		t.Fatal("Outbound refused a valid owner")
	}
}

func TestVerifyConcurrent(t *testing.T) {
	s := newSigner(t)
	done := make(chan error)
	for range 4 {
		go func() {
			for range 200 {
				owner := ctxid.New()
				tok, err := s.Sign(owner, 1)
				if err != nil {
					done <- err
					return
				}
				if c, err := s.Verify(tok); err != nil || c.Owner != owner {
					done <- fmt.Errorf("Verify: %+v, %v", c, err)
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func FuzzVerify(f *testing.F) {
	keys := []ctxid.Key{key1, key2}
	verifier, err := ctxid.NewSigner(keys, clockAt(t0), ctxid.MaxHops(20))
	if err != nil {
		f.Fatal(err)
	}
	owner := ctxid.New()
	for hops := range 3 {
		tok, err := verifier.Sign(owner, hops)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tok)
	}
	s2, err := ctxid.NewSigner([]ctxid.Key{key2}, clockAt(t0.Add(-time.Minute)), ctxid.MaxHops(20))
	if err != nil {
		f.Fatal(err)
	}
	tok2, err := s2.Sign(owner, 20)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok2)
	f.Add(tok2[:len(tok2)-1])
	f.Add("v1.k1.AAAAAAAAAAAAAAAAAAAAAA.1700000000.0.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("")
	f.Add(".....")
	f.Add("v1..\r\n")

	f.Fuzz(func(t *testing.T, tok string) {
		c, err := verifier.Verify(tok)
		if err != nil {
			var ve *ctxid.VerifyError
			if !errors.Is(err, ctxid.ErrUntrusted) || !errors.As(err, &ve) || ve.Reason == nil {
				t.Fatalf("Verify(%q) error %v is not an untrusted *VerifyError", tok, err)
			}
			return
		}
		// An accepted token must be exactly what Sign produces for its claims.
		var k ctxid.Key
		for _, key := range keys {
			if key.ID == c.KeyID {
				k = key
			}
		}
		again, err := ctxid.NewSigner([]ctxid.Key{k}, clockAt(c.IssuedAt), ctxid.MaxHops(20))
		if err != nil {
			t.Fatal(err)
		}
		want, err := again.Sign(c.Owner, c.Hops)
		if err != nil || want != tok {
			t.Fatalf("Verify accepted %q, but Sign makes %q (%v)", tok, want, err)
		}
	})
}

func BenchmarkSign(b *testing.B) {
	s := newSigner(b)
	owner := ctxid.New()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Sign(owner, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	s := newSigner(b)
	tok, err := s.Sign(ctxid.New(), 1)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyBadSignature(b *testing.B) {
	s := newSigner(b)
	tok, err := s.Sign(ctxid.New(), 1)
	if err != nil {
		b.Fatal(err)
	}
	bad := tok[:len(tok)-2] + "AA"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Verify(bad); err == nil {
			b.Fatal("accepted")
		}
	}
}

func BenchmarkNew(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		ctxid.New()
	}
}

// TestVerifyErrorCode: every rejection reason has its own stable code.
func TestVerifyErrorCode(t *testing.T) {
	seen := map[string]bool{}
	for reason, want := range map[error]string{
		ctxid.ErrTooLong: "too_long", ctxid.ErrMalformed: "malformed", ctxid.ErrInvalidOwner: "invalid_owner",
		ctxid.ErrUnknownKey: "unknown_key", ctxid.ErrBadSignature: "bad_signature", ctxid.ErrExpired: "expired",
		ctxid.ErrNotYetValid: "not_yet_valid", ctxid.ErrTooManyHops: "too_many_hops", nil: "untrusted",
	} {
		got := (&ctxid.VerifyError{Reason: reason}).Code()
		if got != want || seen[got] {
			t.Errorf("Code of %v = %q, want %q, once", reason, got, want)
		}
		seen[got] = true
	}
	s, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Verify("not a token")
	var ve *ctxid.VerifyError
	if !errors.As(err, &ve) || ve.Code() != "malformed" {
		t.Fatalf("Verify(garbage) = %v, want code malformed", err)
	}
}

// tamperLast changes the last character of tok, which carries the last bits of the MAC,
// to another canonical one: 'A' unless it already is 'A', then 'E'.
func tamperLast(tok string) string {
	c := "A"
	if strings.HasSuffix(tok, c) {
		c = "E"
	}
	return tok[:len(tok)-1] + c
}
