package ctxid

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	mrand "math/rand/v2"
	"strings"
)

// ID is the owner of locks: a request, or a section of one, wherever its work
// runs. A request's ID (a root) is a 128-bit random value in unpadded
// base64url (22 characters). A section's ID is the path of sections from the
// root down to it: the root, then for each section a '/' and 8 characters
// (48 random bits), for example "Rk3V…Zw/x1Yq_b0T/9sKc-2Lm". Every form is
// safe in Redis keys and fields, HTTP headers and gRPC metadata.
//
// A lock held by a section is reentered by that section and by the sections
// below it ([ID.Within]), and by nobody else, not even other sections of the
// same request.
//
// An ID on its own grants nothing across the wire: services accept an owner
// only inside a token signed by a [Signer].
type ID string

// MaxDepth is how many sections deep below its root an ID may be. It bounds
// the signed token (at most [MaxTokenLen] bytes with the longest key ID):
// [Section] fails with [ErrTooDeep] past it.
const MaxDepth = 12

const (
	// idLen is the length of a canonical root: 16 bytes in unpadded base64.
	idLen = 22
	// segLen is the length of one section's segment: 6 bytes in base64.
	segLen = 8
	// sep separates the segments of a path.
	sep = '/'
)

// New returns a fresh ID made from crypto/rand. It panics only if the system
// random source fails, which Go (since 1.24) treats as fatal anyway: an owner
// ID that is not random could collide and break mutual exclusion.
func New() ID {
	var s [idLen]byte
	newRoot(s[:])
	return ID(s[:])
}

// NewSection returns a new section directly in a new root: what Section(New()) returns,
// made in one allocation. The root is the section's Parent (or Root).
func NewSection() ID {
	var s [idLen + 1 + segLen]byte
	newRoot(s[:idLen])
	s[idLen] = sep
	newSegment(s[idLen+1:])
	return ID(s[:])
}

// newRoot fills b, idLen bytes, with a new root: 16 bytes of crypto/rand in base64url.
func newRoot(b []byte) {
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		panic(fmt.Sprintf("ctxid: crypto/rand failed: %v", err))
	}
	base64.RawURLEncoding.Encode(b, r[:])
}

// Parse returns s as an ID when it is canonical: a root of exactly 22
// characters of the base64url alphabet, without padding, decoding to 16 bytes
// with zero unused bits, followed by at most [MaxDepth] sections of '/' and 8
// base64url characters. Otherwise it returns an error wrapping [ErrInvalid].
// The check is strict so that one owner has exactly one spelling.
func Parse(s string) (ID, error) {
	if p := idProblem(s); p != "" {
		return "", fmt.Errorf("%w: %s", ErrInvalid, p)
	}
	return ID(s), nil
}

// String returns the ID's text.
func (id ID) String() string { return string(id) }

// Within reports whether id is ancestor or one of its sections, at any
// depth: whether a lock held by ancestor is reentered by id.
func (id ID) Within(ancestor ID) bool {
	return len(id) >= len(ancestor) && id[:len(ancestor)] == ancestor &&
		(len(id) == len(ancestor) || id[len(ancestor)] == sep) && ancestor != ""
}

// Parent returns the section id is directly in, and false for a root.
func (id ID) Parent() (ID, bool) {
	i := strings.LastIndexByte(string(id), sep)
	if i < 0 {
		return "", false
	}
	return id[:i], true
}

// Root returns the request id belongs to: its path's first segment.
func (id ID) Root() ID {
	if i := strings.IndexByte(string(id), sep); i >= 0 {
		return id[:i]
	}
	return id
}

// Depth returns how many sections below its root id is: 0 for a root.
func (id ID) Depth() int { return strings.Count(string(id), string(sep)) }

// Section returns a new section directly in parent: parent, '/' and 8 random
// base64url characters. Sections are told apart by their random segment,
// which is unique among the sections of one parent with overwhelming
// probability (48 bits); the root's 128 bits keep requests apart. It fails
// with [ErrTooDeep] when parent is [MaxDepth] sections deep already, and with
// [ErrInvalid] when parent is empty.
func Section(parent ID) (ID, error) {
	if parent == "" {
		return "", fmt.Errorf("%w: empty parent", ErrInvalid)
	}
	if parent.Depth() >= MaxDepth {
		return "", fmt.Errorf("%w: %d sections", ErrTooDeep, MaxDepth)
	}
	b := make([]byte, len(parent)+1+segLen)
	copy(b, parent)
	b[len(parent)] = sep
	newSegment(b[len(parent)+1:])
	return ID(b), nil
}

// newSegment fills b, segLen bytes, with a section's random base64url segment.
func newSegment(b []byte) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	r := mrand.Uint64()
	for i := range b {
		b[i] = alphabet[r&63]
		r >>= 6
	}
}

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

// idProblem describes why s is not a canonical ID (a root and its sections),
// or returns "".
func idProblem(s string) string {
	root, rest, _ := strings.Cut(s, string(sep))
	if p := rootProblem(root); p != "" {
		return p
	}
	depth := 0
	for len(rest) > 0 {
		var seg string
		seg, rest, _ = strings.Cut(rest, string(sep))
		if depth++; depth > MaxDepth {
			return fmt.Sprintf("more than %d sections", MaxDepth)
		}
		if len(seg) != segLen {
			return fmt.Sprintf("section %d has length %d, want %d", depth, len(seg), segLen)
		}
		for i := 0; i < len(seg); i++ {
			if b64val[seg[i]] == 0xFF {
				return fmt.Sprintf("byte %#02x in section %d is not base64url", seg[i], depth)
			}
		}
	}
	if strings.HasSuffix(s, string(sep)) {
		return "empty section"
	}
	return ""
}

// rootProblem describes why s is not a canonical root, or returns "".
func rootProblem(s string) string {
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
// The owner is the request, or the section of it that ctx was made in: a
// lease's context carries the section that holds the lock. Every goroutine
// that uses such a context is inside that section and reenters its locks;
// goroutines that share only the request's context each start sections of
// their own and take turns.
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

// Enter returns a copy of ctx carrying section as the owner. When section is
// within the owner of ctx (see [ID.Within]) the hop count of ctx is kept, as
// the section is part of the same call chain; otherwise it is as
// [NewContext].
func Enter(ctx context.Context, section ID) context.Context {
	o, _ := ownerFrom(ctx)
	if o.id != "" && section.Within(o.id) {
		return withOwner(ctx, section, o.hops)
	}
	return withOwner(ctx, section, 0)
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

// Fork returns a copy of ctx carrying a fresh root owner, whatever ctx
// carries. Work started with the returned context belongs to no section of
// the parent request: it does not reenter even the locks that ctx's own
// section holds. Sibling goroutines need no Fork to exclude one another (each
// acquisition outside a section that holds the key is a section of its own);
// use it for work that must not reenter what its caller holds.
func Fork(ctx context.Context) (context.Context, ID) {
	id := New()
	return withOwner(ctx, id, 0), id
}
