package ctxid_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/guardkit/guardkit/ctxid"
)

func TestNewIsUniqueAndCanonical(t *testing.T) {
	const n = 10000
	seen := make(map[ctxid.ID]bool, n)
	for range n {
		id := ctxid.New()
		if len(id) != 22 {
			t.Fatalf("New() = %q: length %d, want 22", id, len(id))
		}
		if got, err := ctxid.Parse(id.String()); err != nil || got != id {
			t.Fatalf("Parse(New() = %q) = %q, %v", id, got, err)
		}
		if seen[id] {
			t.Fatalf("New() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestParse(t *testing.T) {
	good := ctxid.New().String()
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"fresh", good, true},
		{"all zero", "AAAAAAAAAAAAAAAAAAAAAA", true},
		{"all ones", "_____________________w", true},
		{"canonical last char Q", "AAAAAAAAAAAAAAAAAAAAAQ", true},
		{"empty", "", false},
		{"too short", good[:21], false},
		{"too long", good + "A", false},
		{"standard alphabet plus", "AAAAAAAAAAAAAAAAAAAA+A", false},
		{"standard alphabet slash", "AAAAAAAAAAAAAAAAAAAA/A", false},
		{"dot", "AAAAAAAAAAAAAAAAAAAA.A", false},
		{"space", "AAAAAAAAAAAAAAAAAAAA A", false},
		{"newline", "AAAAAAAAAAAAAAAAAAAAA\n", false},
		{"carriage return", "\rAAAAAAAAAAAAAAAAAAAAA", false},
		{"non-ASCII", "AAAAAAAAAAAAAAAAAAAAé", false},
		{"NUL", "AAAAAAAAAAAAAAAAAAAAA\x00", false},
		{"padded to 24", "AAAAAAAAAAAAAAAAAAAAAA==", false},
		{"padding inside 22", "AAAAAAAAAAAAAAAAAAAA==", false},
		{"non-canonical last char B", "AAAAAAAAAAAAAAAAAAAAAB", false},
		{"non-canonical last char _", "AAAAAAAAAAAAAAAAAAAAA_", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := ctxid.Parse(tt.in)
			if tt.ok {
				if err != nil || id.String() != tt.in {
					t.Fatalf("Parse(%q) = %q, %v; want it back", tt.in, id, err)
				}
				if b, err := base64.RawURLEncoding.Strict().DecodeString(tt.in); err != nil || len(b) != 16 {
					t.Fatalf("accepted %q does not decode to 16 bytes: %d, %v", tt.in, len(b), err)
				}
				return
			}
			if !errors.Is(err, ctxid.ErrInvalid) {
				t.Fatalf("Parse(%q) = %q, %v; want ErrInvalid", tt.in, id, err)
			}
			if id != "" {
				t.Fatalf("Parse(%q) returned %q with an error", tt.in, id)
			}
			if !strings.HasPrefix(err.Error(), "ctxid: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(ctxid.New().String())
	f.Add("AAAAAAAAAAAAAAAAAAAAAB")
	f.Add("AAAAAAAAAAAAAAAAAAAA==")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ctxid.Parse(s)
		if err != nil {
			if !errors.Is(err, ctxid.ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || len(b) != 16 || base64.RawURLEncoding.EncodeToString(b) != id.String() {
			t.Fatalf("Parse accepted %q, which is not the canonical encoding of 16 bytes", s)
		}
	})
}

func TestContext(t *testing.T) {
	bg := context.Background()
	if id, ok := ctxid.FromContext(bg); ok || id != "" {
		t.Fatalf("FromContext(Background) = %q, %v; want none", id, ok)
	}
	if h := ctxid.HopsFromContext(bg); h != 0 {
		t.Fatalf("HopsFromContext(Background) = %d, want 0", h)
	}

	id := ctxid.New()
	ctx := ctxid.NewContext(bg, id)
	if got, ok := ctxid.FromContext(ctx); !ok || got != id {
		t.Fatalf("FromContext = %q, %v; want %q", got, ok, id)
	}
	type otherKey struct{}
	derived, cancel := context.WithCancel(context.WithValue(ctx, otherKey{}, "x"))
	defer cancel()
	if got, _ := ctxid.FromContext(derived); got != id {
		t.Fatalf("derived context lost the owner: %q", got)
	}
	if got, ok := ctxid.FromContext(ctxid.NewContext(ctx, "")); ok || got != "" {
		t.Fatalf("empty ID should hide the owner, got %q, %v", got, ok)
	}
}

func TestEnsure(t *testing.T) {
	ctx, id := ctxid.Ensure(context.Background())
	if _, err := ctxid.Parse(id.String()); err != nil {
		t.Fatalf("Ensure made a non-canonical ID %q: %v", id, err)
	}
	if got, ok := ctxid.FromContext(ctx); !ok || got != id {
		t.Fatalf("Ensure did not attach its ID: %q, %v", got, ok)
	}
	again, id2 := ctxid.Ensure(ctx)
	if again != ctx || id2 != id {
		t.Fatalf("Ensure on a context with an owner changed it: %q -> %q", id, id2)
	}
	_, other := ctxid.Ensure(context.Background())
	if other == id {
		t.Fatalf("two Ensure calls on fresh contexts shared %q", id)
	}
}

func TestForkReplacesOwnerAndHops(t *testing.T) {
	signer := newSigner(t)
	tok, err := signer.Sign(ctxid.New(), 3)
	if err != nil {
		t.Fatal(err)
	}
	parent, parentID, err := signer.Accept(context.Background(), tok)
	if err != nil || ctxid.HopsFromContext(parent) != 3 {
		t.Fatalf("Accept: %v, hops %d", err, ctxid.HopsFromContext(parent))
	}
	child, childID := ctxid.Fork(parent)
	if childID == parentID {
		t.Fatal("Fork kept the parent's owner")
	}
	if got, _ := ctxid.FromContext(child); got != childID {
		t.Fatalf("Fork context carries %q, want %q", got, childID)
	}
	if h := ctxid.HopsFromContext(child); h != 0 {
		t.Fatalf("forked owner has %d hops, want 0", h)
	}
	if got, _ := ctxid.FromContext(parent); got != parentID {
		t.Fatal("Fork changed the parent context")
	}
	if h := ctxid.HopsFromContext(ctxid.NewContext(parent, ctxid.New())); h != 0 {
		t.Fatalf("NewContext kept %d hops of the previous owner", h)
	}
}

func TestGoroutinesShareOwner(t *testing.T) {
	ctx, id := ctxid.Ensure(context.Background())
	got := make(chan ctxid.ID)
	go func() {
		owner, _ := ctxid.FromContext(ctx)
		got <- owner
	}()
	if owner := <-got; owner != id {
		t.Fatalf("goroutine saw owner %q, want %q", owner, id)
	}
}
