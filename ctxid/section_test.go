package ctxid_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/guardkit/guardkit/ctxid"
)

func TestSectionTree(t *testing.T) {
	root := ctxid.New()
	a, err := ctxid.Section(root)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ctxid.Section(root)
	ab, _ := ctxid.Section(a)
	if a == b {
		t.Fatalf("two sections of one parent are both %q", a)
	}
	if p, ok := ab.Parent(); !ok || p != a || ab.Root() != root || ab.Depth() != 2 {
		t.Fatalf("%q: parent %q %v, root %q, depth %d", ab, p, ok, ab.Root(), ab.Depth())
	}
	if _, ok := root.Parent(); ok || root.Depth() != 0 || root.Root() != root {
		t.Fatalf("root %q: depth %d", root, root.Depth())
	}
	for _, c := range []struct {
		id, in ctxid.ID
		want   bool
	}{
		{a, a, true}, {ab, a, true}, {ab, root, true}, {a, root, true},
		{a, ab, false}, {b, a, false}, {ab, b, false}, {root, a, false},
		{ctxid.ID(string(a) + "x"), a, false}, // a longer segment is not a section of a
		{a, "", false},
	} {
		if got := c.id.Within(c.in); got != c.want {
			t.Errorf("%q.Within(%q) = %v, want %v", c.id, c.in, got, c.want)
		}
	}
	for _, id := range []ctxid.ID{a, ab} {
		if got, err := ctxid.Parse(string(id)); err != nil || got != id {
			t.Fatalf("Parse(%q) = %q, %v", id, got, err)
		}
	}
	for _, bad := range []string{string(root) + "/", string(root) + "/abc", string(a) + "/abcdefg!", string(root) + "//abcdefgh"} {
		if _, err := ctxid.Parse(bad); !errors.Is(err, ctxid.ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := ctxid.Section(""); !errors.Is(err, ctxid.ErrInvalid) {
		t.Fatalf("Section(\"\") = %v, want ErrInvalid", err)
	}
}

// TestSectionDepthAndTokenSize: the deepest section fits a token of the longest key ID
// within MaxTokenLen, travels intact, and has no section below it.
func TestSectionDepthAndTokenSize(t *testing.T) {
	id := ctxid.New()
	for range ctxid.MaxDepth {
		var err error
		if id, err = ctxid.Section(id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ctxid.Section(id); !errors.Is(err, ctxid.ErrTooDeep) {
		t.Fatalf("Section past MaxDepth = %v, want ErrTooDeep", err)
	}
	if _, err := ctxid.Parse(string(id) + "/abcdefgh"); !errors.Is(err, ctxid.ErrInvalid) {
		t.Fatalf("Parse past MaxDepth = %v, want ErrInvalid", err)
	}
	s, err := ctxid.NewSigner([]ctxid.Key{{ID: strings.Repeat("k", 32), Secret: []byte("0123456789abcdef")}}, ctxid.MaxHops(255))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Sign(id, 255)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) > 225 || len(tok) > ctxid.MaxTokenLen {
		t.Fatalf("deepest token is %d bytes, documented at most 225", len(tok))
	}
	c, err := s.Verify(tok)
	if err != nil || c.Owner != id {
		t.Fatalf("Verify: %v, owner %q, want %q", err, c.Owner, id)
	}
}

// TestEnterKeepsHops: entering a section within the owner keeps the hop count it arrived
// with; entering an unrelated owner resets it.
func TestEnterKeepsHops(t *testing.T) {
	s, err := ctxid.NewSigner([]ctxid.Key{{ID: "k", Secret: []byte("0123456789abcdef")}})
	if err != nil {
		t.Fatal(err)
	}
	root := ctxid.New()
	tok, _ := s.Sign(root, 2)
	ctx, _, err := s.Accept(context.Background(), tok)
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := ctxid.Section(root)
	in := ctxid.Enter(ctx, sec)
	if id, _ := ctxid.FromContext(in); id != sec || ctxid.HopsFromContext(in) != 2 {
		t.Fatalf("Enter(section): owner %q hops %d, want %q and 2", id, ctxid.HopsFromContext(in), sec)
	}
	out := ctxid.Enter(ctx, ctxid.New())
	if ctxid.HopsFromContext(out) != 0 {
		t.Fatalf("Enter(unrelated owner) kept %d hops", ctxid.HopsFromContext(out))
	}
}

// TestNewSection: NewSection is a section directly in a new root, spelled as Section
// spells one (canonical for Parse), each call makes a new root, and it costs fewer
// allocations than Section(New()).
func TestNewSection(t *testing.T) {
	seen := map[ctxid.ID]bool{}
	for range 1000 {
		s := ctxid.NewSection()
		if _, err := ctxid.Parse(string(s)); err != nil {
			t.Fatalf("NewSection() = %q: %v", s, err)
		}
		root, ok := s.Parent()
		if !ok || s.Depth() != 1 || root != s.Root() || !s.Within(root) {
			t.Fatalf("NewSection() = %q: want one section directly in its root %q", s, root)
		}
		if seen[root] {
			t.Fatalf("NewSection() made root %q twice", root)
		}
		seen[root] = true
	}
	// One allocation fewer than the two calls it replaces (the race detector's build
	// allocates more for both).
	one := testing.AllocsPerRun(100, func() { sinkRoot, sinkSection = "", ctxid.NewSection() })
	two := testing.AllocsPerRun(100, func() {
		sinkRoot = ctxid.New()
		sinkSection, _ = ctxid.Section(sinkRoot)
	})
	if one >= two {
		t.Errorf("NewSection: %.0f allocations, Section(New()): %.0f; want fewer", one, two)
	}
}

// sinkRoot and sinkSection keep the IDs TestNewSection makes, as a caller keeps an owner.
var sinkRoot, sinkSection ctxid.ID
