package ctxid

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxTokenLen is the longest token [Signer.Verify] reads; longer input is
// rejected before any parsing. Tokens made by [Signer.Sign] are at most 225
// bytes long: 117 for a root owner with a 32-character key ID, and 9 more
// per section of the owner, [MaxDepth] sections at most.
const MaxTokenLen = 256

// Header is the conventional name of the HTTP header (and, lower-cased, of the
// gRPC metadata key) that carries an owner token between services.
const Header = "Guardkit-Owner"

const (
	tokenVersion = "v1"
	tokenFields  = 6
	macLen       = 43 // unpadded base64 of a SHA-256 sum
	maxKeyIDLen  = 32
	minSecretLen = 16
	// maxIssuedDigits keeps the issue time within int64 while parsing.
	maxIssuedDigits = 18
)

// Key is one signing key of a [Signer].
type Key struct {
	// ID names the key inside tokens, so that a verifier picks the right
	// secret during rotation: 1 to 32 characters of [A-Za-z0-9_-]. It is
	// not secret.
	ID string
	// Secret is the HMAC-SHA256 key: at least 16 bytes, and 32 random bytes
	// are recommended. Every service that shares it trusts the others'
	// owners.
	Secret []byte
}

// Claims is what a verified token says.
type Claims struct {
	// Owner is the owner ID the token vouches for.
	Owner ID
	// Hops is how many service hops the token has travelled.
	Hops int
	// IssuedAt is when the token was signed, to the second, in UTC.
	IssuedAt time.Time
	// KeyID is the ID of the key that signed the token.
	KeyID string
}

// Signer signs owner IDs into tokens for the wire and verifies inbound
// tokens, so that a downstream service reenters the locks of the calling
// request. A Signer is safe for concurrent use.
//
// A nil *Signer trusts nothing and signs nothing: Verify rejects every token,
// Accept always makes a fresh owner, Outbound sends no token, and Sign fails.
// That is what "no signing key configured" means for a transport.
type Signer struct {
	signing *signingKey
	keys    map[string]*signingKey
	cfg     config
}

// signingKey keeps a pool of keyed HMAC states, so that the inner and outer
// pads are not derived again for every token.
type signingKey struct {
	id   string
	pool sync.Pool // of *macState
}

type macState struct {
	h   hash.Hash
	buf []byte
	sum []byte
}

// NewSigner returns a Signer. The first key signs; every key verifies. To
// rotate, put the new key first and keep the old one after it until tokens
// signed with it have aged out (MaxAge), then drop it. Every service must
// know a key before any service signs with it, so deploy a new key in second
// place first and promote it once everyone has it.
//
// Configuration errors wrap [ErrConfig] and name the offending field. The
// secrets are copied.
func NewSigner(keys []Key, opts ...Option) (*Signer, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.maxAge <= 0:
		return nil, fmt.Errorf("%w: MaxAge must be positive, got %v", ErrConfig, cfg.maxAge)
	case cfg.maxSkew < 0:
		return nil, fmt.Errorf("%w: MaxSkew must not be negative, got %v", ErrConfig, cfg.maxSkew)
	case cfg.maxHops < 1 || cfg.maxHops > hopsLimit:
		return nil, fmt.Errorf("%w: MaxHops must be between 1 and %d, got %d", ErrConfig, hopsLimit, cfg.maxHops)
	case len(keys) == 0:
		return nil, fmt.Errorf("%w: keys: at least one key is required", ErrConfig)
	}
	s := &Signer{keys: make(map[string]*signingKey, len(keys)), cfg: cfg}
	for i, k := range keys {
		if !validKeyID(k.ID) {
			return nil, fmt.Errorf("%w: keys[%d].ID must be 1 to %d characters of [A-Za-z0-9_-]", ErrConfig, i, maxKeyIDLen)
		}
		if len(k.Secret) < minSecretLen {
			return nil, fmt.Errorf("%w: keys[%d].Secret is %d bytes, want at least %d", ErrConfig, i, len(k.Secret), minSecretLen)
		}
		if _, dup := s.keys[k.ID]; dup {
			return nil, fmt.Errorf("%w: keys[%d].ID %q is a duplicate", ErrConfig, i, k.ID)
		}
		sk := newSigningKey(k.ID, k.Secret)
		s.keys[k.ID] = sk
		if i == 0 {
			s.signing = sk
		}
	}
	return s, nil
}

func newSigningKey(id string, secret []byte) *signingKey {
	secret = append([]byte(nil), secret...)
	k := &signingKey{id: id}
	k.pool.New = func() any {
		return &macState{
			h:   hmac.New(sha256.New, secret),
			buf: make([]byte, 0, MaxTokenLen),
			sum: make([]byte, 0, sha256.Size),
		}
	}
	return k
}

// Sign returns a token vouching for owner after hops service hops (0 for a
// token made where the owner was created; [Signer.Outbound] counts for you).
// The token has the form v1.<key ID>.<owner>.<issued unix seconds>.<hops>.<mac>,
// where mac is the unpadded base64url HMAC-SHA256 of everything before it,
// so it only holds [A-Za-z0-9._/-] ('/' within a section path) and fits in any
// header.
//
// Sign fails when owner is not a canonical ID ([ErrInvalid]), when hops is
// negative or above MaxHops ([ErrTooManyHops]), or when the Signer is nil.
func (s *Signer) Sign(owner ID, hops int) (string, error) {
	if s == nil {
		return "", fmt.Errorf("%w: nil Signer cannot sign", ErrConfig)
	}
	if p := idProblem(string(owner)); p != "" {
		return "", fmt.Errorf("%w: %s", ErrInvalid, p)
	}
	if hops < 0 {
		return "", fmt.Errorf("ctxid: hops %d is negative", hops)
	}
	if hops > s.cfg.maxHops {
		return "", fmt.Errorf("%w: hops %d, max %d", ErrTooManyHops, hops, s.cfg.maxHops)
	}
	issued := s.cfg.now().Unix()
	if issued < 0 {
		return "", fmt.Errorf("ctxid: clock is before 1970: %d", issued)
	}
	k := s.signing
	st := k.pool.Get().(*macState)
	defer k.pool.Put(st)
	b := append(st.buf[:0], tokenVersion...)
	b = append(b, '.')
	b = append(b, k.id...)
	b = append(b, '.')
	b = append(b, owner...)
	b = append(b, '.')
	b = strconv.AppendInt(b, issued, 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(hops), 10)
	sum := st.mac(b)
	b = append(b, '.')
	b = base64.RawURLEncoding.AppendEncode(b, sum)
	st.buf = b[:0]
	return string(b), nil
}

func (st *macState) mac(msg []byte) []byte {
	st.h.Reset()
	st.h.Write(msg)
	st.sum = st.h.Sum(st.sum[:0])
	return st.sum
}

// Verify checks token and returns its claims. Every failure is a
// [*VerifyError] that matches [ErrUntrusted] and one reason sentinel:
// [ErrTooLong], [ErrMalformed], [ErrInvalidOwner], [ErrUnknownKey],
// [ErrBadSignature], [ErrTooManyHops], [ErrNotYetValid] or [ErrExpired].
// The syntax is checked before the MAC, and the hop count and times only
// after the MAC matched, so that no claim is judged before it is
// authenticated. The MAC is compared in constant time. Verify never panics.
func (s *Signer) Verify(token string) (Claims, error) {
	if s == nil {
		return Claims{}, reject(ErrUnknownKey, "no signing key configured")
	}
	if len(token) > MaxTokenLen {
		return Claims{}, reject(ErrTooLong, fmt.Sprintf("%d bytes, max %d", len(token), MaxTokenLen))
	}
	if token == "" {
		return Claims{}, reject(ErrMalformed, "empty token")
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c != '.' && c != sep && b64val[c] == 0xFF {
			return Claims{}, reject(ErrMalformed, fmt.Sprintf("byte %#02x at offset %d is not allowed", c, i))
		}
	}
	var f [tokenFields]string
	rest := token
	for i := 0; i < tokenFields-1; i++ {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, "."); !ok {
			return Claims{}, reject(ErrMalformed, fmt.Sprintf("%d fields, want %d", i+1, tokenFields))
		}
	}
	if strings.IndexByte(rest, '.') >= 0 {
		return Claims{}, reject(ErrMalformed, fmt.Sprintf("more than %d fields", tokenFields))
	}
	f[5] = rest
	version, kid, ownerField, issuedField, hopsField, macField := f[0], f[1], f[2], f[3], f[4], f[5]
	if version != tokenVersion {
		return Claims{}, reject(ErrMalformed, "unsupported version")
	}
	if !validKeyID(kid) {
		return Claims{}, reject(ErrMalformed, "bad key ID")
	}
	if p := idProblem(ownerField); p != "" {
		return Claims{}, reject(ErrInvalidOwner, p)
	}
	issued, ok := parseDecimal(issuedField, maxIssuedDigits)
	if !ok {
		return Claims{}, reject(ErrMalformed, "bad issue time")
	}
	hops, ok := parseDecimal(hopsField, 3)
	if !ok {
		return Claims{}, reject(ErrMalformed, "bad hop count")
	}
	if len(macField) != macLen {
		return Claims{}, reject(ErrMalformed, fmt.Sprintf("MAC is %d characters, want %d", len(macField), macLen))
	}
	k, ok := s.keys[kid]
	if !ok {
		// kid passed validKeyID, so it is short and safe to log.
		return Claims{}, reject(ErrUnknownKey, fmt.Sprintf("key ID %q", kid))
	}
	if !k.verify(token[:len(token)-macLen-1], macField) {
		return Claims{}, reject(ErrBadSignature, fmt.Sprintf("key ID %q", kid))
	}
	if hops > int64(s.cfg.maxHops) {
		return Claims{}, reject(ErrTooManyHops, fmt.Sprintf("hops %d, max %d", hops, s.cfg.maxHops))
	}
	issuedAt := time.Unix(issued, 0).UTC()
	now := s.cfg.now()
	if ahead := issuedAt.Sub(now); ahead > s.cfg.maxSkew {
		return Claims{}, reject(ErrNotYetValid, fmt.Sprintf("issued %v ahead of the clock, max skew %v", ahead.Round(time.Second), s.cfg.maxSkew))
	}
	if age := now.Sub(issuedAt); age > s.cfg.maxAge {
		return Claims{}, reject(ErrExpired, fmt.Sprintf("issued %v ago, max age %v", age.Round(time.Second), s.cfg.maxAge))
	}
	return Claims{Owner: ID(ownerField), Hops: int(hops), IssuedAt: issuedAt, KeyID: kid}, nil
}

// verify reports whether macField is the canonical encoding of the MAC of
// signed. Comparing encodings rejects non-canonical spellings of a right MAC.
func (k *signingKey) verify(signed, macField string) bool {
	st := k.pool.Get().(*macState)
	defer k.pool.Put(st)
	st.buf = append(st.buf[:0], signed...)
	var want [macLen]byte
	base64.RawURLEncoding.Encode(want[:], st.mac(st.buf))
	st.buf = append(st.buf[:0], macField...)
	return hmac.Equal(want[:], st.buf)
}

// Accept turns an inbound token into the owner of the request: it returns a
// copy of ctx carrying the token's owner and hop count when the token
// verifies. Otherwise the inbound owner is ignored and the returned context
// carries a fresh owner with zero hops; the error is nil for an empty token
// (the caller sent none) and the [Signer.Verify] error otherwise, for
// logging. Any owner ctx already had is replaced, because the request is a
// new owner unless a trusted caller says otherwise.
//
// With a nil Signer every non-empty token is rejected with [ErrUnknownKey]
// (and so [ErrUntrusted]): without a key, inbound owners are never trusted.
func (s *Signer) Accept(ctx context.Context, token string) (context.Context, ID, error) {
	var err error
	if token != "" {
		var c Claims
		if c, err = s.Verify(token); err == nil {
			return withOwner(ctx, c.Owner, c.Hops), c.Owner, nil
		}
	}
	id := New()
	return withOwner(ctx, id, 0), id, err
}

// Outbound returns the token to send with an outgoing call made on behalf of
// the owner in ctx, counting one more hop. It reports false, and no token
// should be sent, when the Signer is nil, ctx has no valid owner, or the hop
// would exceed MaxHops; the callee then runs as a fresh owner and cannot
// reenter the caller's locks.
func (s *Signer) Outbound(ctx context.Context) (string, bool) {
	if s == nil {
		return "", false
	}
	o, ok := ownerFrom(ctx)
	if !ok || o.hops >= s.cfg.maxHops {
		return "", false
	}
	tok, err := s.Sign(o.id, o.hops+1)
	if err != nil {
		return "", false
	}
	return tok, true
}

// validKeyID reports whether id is 1 to 32 characters of [A-Za-z0-9_-].
func validKeyID(id string) bool {
	if len(id) == 0 || len(id) > maxKeyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if b64val[id[i]] == 0xFF {
			return false
		}
	}
	return true
}

// parseDecimal parses a canonical non-negative decimal (no sign, no leading
// zero) of at most maxDigits digits, so that each number has one spelling.
func parseDecimal(s string, maxDigits int) (int64, bool) {
	if len(s) == 0 || len(s) > maxDigits || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
