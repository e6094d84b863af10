package ctxid_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/guardkit/guardkit/ctxid"
)

func ExampleEnsure() {
	// An entry point gives the request an owner...
	ctx, owner := ctxid.Ensure(context.Background())

	// ...and nested calls keep it, so they reenter the request's locks.
	_, again := ctxid.Ensure(ctx)
	fmt.Println(again == owner)

	// Goroutines started with the request's context share its owner too.
	var wg sync.WaitGroup
	var seen ctxid.ID
	wg.Add(1)
	go func() {
		defer wg.Done()
		seen, _ = ctxid.FromContext(ctx)
	}()
	wg.Wait()
	fmt.Println(seen == owner)
	// Output:
	// true
	// true
}

func ExampleFork() {
	ctx, owner := ctxid.Ensure(context.Background())

	// Work that must not reenter what its caller holds takes an owner of its own.
	a, ownerA := ctxid.Fork(ctx)
	_, ownerB := ctxid.Fork(ctx)
	fmt.Println(ownerA != owner, ownerB != owner, ownerA != ownerB)

	got, _ := ctxid.FromContext(a)
	fmt.Println(got == ownerA)
	// Output:
	// true true true
	// true
}

func ExampleSection() {
	root := ctxid.New()
	x, _ := ctxid.Section(root) // what guard makes for an acquisition in root
	inX, _ := ctxid.Section(x)  // a section nested in x
	sibling, _ := ctxid.Section(root)

	// A lock held by x is reentered from inside x, not by a sibling section.
	fmt.Println(inX.Within(x), sibling.Within(x), x.Within(root))
	fmt.Println(inX.Depth(), inX.Root() == root)
	// Output:
	// true false true
	// 2 true
}

func ExampleNewSection() {
	// A section of a request that has no owner yet: its root is the section's Root.
	x := ctxid.NewSection()
	root := x.Root()
	sibling, _ := ctxid.Section(root)
	fmt.Println(x.Depth(), x.Within(root), sibling.Within(x))
	// Output:
	// 1 true false
}

func ExampleParse() {
	_, err := ctxid.Parse("AAAAAAAAAAAAAAAAAAAAAA")
	fmt.Println(err)
	_, err = ctxid.Parse("not an owner")
	fmt.Println(errors.Is(err, ctxid.ErrInvalid))
	// Output:
	// <nil>
	// true
}

func ExampleNewSigner() {
	// In production the secrets come from a secret store: 32 random bytes each.
	oldKey := ctxid.Key{ID: "2024-01", Secret: []byte("old secret, 32 bytes long......!")}
	newKey := ctxid.Key{ID: "2024-06", Secret: []byte("new secret, 32 bytes long......!")}

	before, err := ctxid.NewSigner([]ctxid.Key{oldKey})
	if err != nil {
		panic(err)
	}
	// Rotation: the new key signs, the old one still verifies.
	after, err := ctxid.NewSigner([]ctxid.Key{newKey, oldKey})
	if err != nil {
		panic(err)
	}
	oldToken, _ := before.Sign(ctxid.New(), 0)
	c, err := after.Verify(oldToken)
	fmt.Println(c.KeyID, err)

	_, err = ctxid.NewSigner([]ctxid.Key{{ID: "short", Secret: []byte("too short")}})
	fmt.Println(errors.Is(err, ctxid.ErrConfig))
	fmt.Println(err)
	// Output:
	// 2024-01 <nil>
	// true
	// ctxid: invalid configuration: keys[0].Secret is 9 bytes, want at least 16
}

func ExampleSigner_Accept() {
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("shared secret, 32 bytes long...!")}})
	if err != nil {
		panic(err)
	}
	caller := ctxid.New()
	token, _ := signer.Sign(caller, 1)

	// A token signed with a configured key: the request reenters the caller's locks.
	ctx, owner, err := signer.Accept(context.Background(), token)
	fmt.Println(owner == caller, ctxid.HopsFromContext(ctx), err)

	// A client choosing its own owner gets a fresh one, and an error to log.
	_, owner, err = signer.Accept(context.Background(), caller.String())
	fmt.Println(owner == caller, errors.Is(err, ctxid.ErrUntrusted))

	// No token: a fresh owner, no error.
	_, _, err = signer.Accept(context.Background(), "")
	fmt.Println(err)

	// Without a signing key nothing inbound is trusted.
	var none *ctxid.Signer
	_, owner, err = none.Accept(context.Background(), token)
	fmt.Println(owner == caller, errors.Is(err, ctxid.ErrUntrusted))
	// Output:
	// true 1 <nil>
	// false true
	// <nil>
	// false true
}

func ExampleSigner_Outbound() {
	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k1", Secret: []byte("shared secret, 32 bytes long...!")}})
	if err != nil {
		panic(err)
	}
	ctx, owner := ctxid.Ensure(context.Background())

	// Client side: attach the owner to the outgoing request.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://inventory.internal/reserve", nil)
	if token, ok := signer.Outbound(ctx); ok {
		req.Header.Set(ctxid.Header, token)
	}

	// Server side of the downstream service: the same owner, one hop further.
	downstream, got, err := signer.Accept(context.Background(), req.Header.Get(ctxid.Header))
	fmt.Println(got == owner, ctxid.HopsFromContext(downstream), err)

	// A context without an owner sends nothing.
	_, ok := signer.Outbound(context.Background())
	fmt.Println(ok)
	// Output:
	// true 1 <nil>
	// false
}

// ExampleSigner_Inbound shows the owner policy of a transport the kit has no adapter for:
// a net/http handler that takes the caller's owner from the Guardkit-Owner header, or
// runs as a fresh owner and says why when the token is refused.
func ExampleSigner_Inbound() {
	key := ctxid.Key{ID: "2024-06", Secret: []byte("new secret, 32 bytes long......!")}
	signer, err := ctxid.NewSigner([]ctxid.Key{key})
	if err != nil {
		panic(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, _, refused := signer.Inbound(r.Context(), ctxid.Header+" header", r.Header.Values(ctxid.Header))
		if refused != nil {
			fmt.Println("refused:", refused.Reason) // log it; the request runs as a fresh owner
		}
		ctx, _ = ctxid.Ensure(ctx)
		_ = ctx // guarded calls made with ctx reenter the caller's sections
	})

	caller, _ := ctxid.Ensure(context.Background())
	tok, _ := signer.Outbound(caller)
	for _, h := range [][]string{{tok}, {tok, tok}, {"forged"}} {
		r := httptest.NewRequest(http.MethodPost, "/orders/42/cancel", nil)
		r.Header[ctxid.Header] = h
		handler.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// refused: several_values
	// refused: malformed
}
