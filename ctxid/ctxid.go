package ctxid

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
)

// ID is the owner of locks: one request, wherever its work runs. It is a
// 128-bit random value in unpadded base64url (22 characters), so it is safe
// in Redis keys and fields, HTTP headers and gRPC metadata.
//
// An ID on its own grants nothing across the wire: services accept an owner
// only inside a token signed by a [Signer].
type ID string

// idLen is the length of a canonical ID: 16 bytes in unpadded base64.
const idLen = 22

// New returns a fresh ID made from crypto/rand. It panics only if the system
// random source fails, which Go (since 1.24) treats as fatal anyway: an owner
// ID that is not random could collide and break mutual exclusion.
func New() ID {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("ctxid: crypto/rand failed: %v", err))
	}
	var s [idLen]byte
	base64.RawURLEncoding.Encode(s[:], b[:])
	return ID(s[:])
}

// Parse returns s as an ID when it is canonical: exactly 22 characters of the
// base64url alphabet, without padding, decoding to 16 bytes with zero unused
// bits. Otherwise it returns an error wrapping [ErrInvalid]. The check is
// strict so that one owner has exactly one spelling.
func Parse(s string) (ID, error) {
	if p := idProblem(s); p != "" {
		return "", fmt.Errorf("%w: %s", ErrInvalid, p)
	}
	return ID(s), nil
}

// String returns the ID's text.
func (id ID) String() string { return string(id) }

// b64val maps a base64url character to its 6-bit value, or to 0xFF.
var b64val = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xFF
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = byte(i)
	}
	return t
}()

// idProblem describes why s is not a canonical ID, or returns "".
func idProblem(s string) string {
	if len(s) != idLen {
		return fmt.Sprintf("length %d, want %d", len(s), idLen)
	}
	for i := 0; i < len(s); i++ {
		if b64val[s[i]] == 0xFF {
			return fmt.Sprintf("byte %#02x at offset %d is not base64url", s[i], i)
		}
	}
	// 22 characters carry 132 bits; the last 4 must be zero, or two
	// spellings would name the same 16 bytes.
	if b64val[s[idLen-1]]&0x0F != 0 {
		return "non-canonical final character"
	}
	return ""
}

// ctxKey is the context key of the owner; unexported so that only this
// package can set or read it.
type ctxKey struct{}

// owner is the context value: the ID and how many hops its token travelled.
// They live together so that replacing the owner always resets the hops.
type owner struct {
	id   ID
	hops int
}

func withOwner(ctx context.Context, id ID, hops int) context.Context {
	return context.WithValue(ctx, ctxKey{}, owner{id: id, hops: hops})
}

func ownerFrom(ctx context.Context) (owner, bool) {
	o, ok := ctx.Value(ctxKey{}).(owner)
	return o, ok && o.id != ""
}

// NewContext returns a copy of ctx carrying id as the owner, with a hop count
// of zero. An empty id hides any owner of ctx: FromContext then reports none.
func NewContext(ctx context.Context, id ID) context.Context {
	return withOwner(ctx, id, 0)
}

// FromContext returns the owner carried by ctx, and false when there is none.
//
// Every goroutine that uses ctx (or a context derived from it) sees the same
// owner and therefore reenters the locks that owner holds: the owner is the
// request, not the goroutine. Use [Fork] for work that must be excluded from
// its siblings.
func FromContext(ctx context.Context) (ID, bool) {
	o, ok := ownerFrom(ctx)
	return o.id, ok
}

// HopsFromContext returns how many service hops the owner of ctx has
// travelled: the hop count of the token [Signer.Accept] verified, or 0 when
// the owner was made locally or ctx has none.
func HopsFromContext(ctx context.Context) int {
	o, _ := ownerFrom(ctx)
	return o.hops
}

// Ensure returns ctx unchanged with its owner when it has one; otherwise it
// returns a copy of ctx carrying a fresh owner from [New]. Entry points call
// it so that every lock acquisition has an owner.
func Ensure(ctx context.Context) (context.Context, ID) {
	if id, ok := FromContext(ctx); ok {
		return ctx, id
	}
	id := New()
	return withOwner(ctx, id, 0), id
}

// Fork returns a copy of ctx carrying a fresh owner, whatever ctx carries.
// Work started with the returned context does not reenter the locks of the
// parent request: use it for goroutines that must exclude one another, for
// example parallel workers that each take the same lock.
func Fork(ctx context.Context) (context.Context, ID) {
	id := New()
	return withOwner(ctx, id, 0), id
}
