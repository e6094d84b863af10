package keyfunc_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/guardkit/guardkit/keyfunc"
)

type TransferRequest struct {
	From   string `json:"from_account"`
	To     string `json:"to_account"`
	Amount int64
	Payer  *Payer
}

type Payer struct {
	Tenant string `key:"tenant"`
}

// A "req" source reads the fields of the guarded method's request.
func ExampleParse() {
	tpl, err := keyfunc.Parse("transfer:{req.From}:{req.to_account}", keyfunc.Sources[TransferRequest]{
		"req": keyfunc.FieldSource[TransferRequest](),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	key, err := tpl.Render(TransferRequest{From: "acct-1", To: "acct-2"})
	fmt.Println(key, err)
	fmt.Println(tpl.Placeholders())
	// Output:
	// transfer:acct-1:acct-2 <nil>
	// [req.From req.to_account]
}

// request stands for what an HTTP or gRPC entry point has at hand.
type request struct {
	method  string
	params  map[string]string
	headers map[string]string // keys in canonical form
}

// An entry point plugs in its own sources; this is how the Echo middleware
// and the gRPC interceptors read route parameters, headers, metadata and
// the method name.
func ExampleLookup() {
	sources := keyfunc.Sources[*request]{
		"param": keyfunc.Lookup(func(r *request, name string) (string, bool) {
			v, ok := r.params[name]
			return v, ok
		}),
		"header": keyfunc.Lookup(func(r *request, name string) (string, bool) {
			v, ok := r.headers[strings.ToLower(name)]
			return v, ok
		}),
		"method": keyfunc.Value(func(r *request) string { return r.method }),
	}
	tpl, err := keyfunc.Parse("{method}:tenant:{header.X-Tenant}:order:{param.id}", sources)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := &request{
		method:  "PUT",
		params:  map[string]string{"id": "42"},
		headers: map[string]string{"x-tenant": "acme"},
	}
	fmt.Println(tpl.Render(r))

	delete(r.headers, "x-tenant")
	_, err = tpl.Render(r)
	fmt.Println(err)
	// Output:
	// PUT:tenant:acme:order:42 <nil>
	// keyfunc: {header.X-Tenant}: missing value
}

// Mistakes in a template are reported when it is parsed, with the column.
func ExampleSyntaxError() {
	sources := keyfunc.Sources[TransferRequest]{"req": keyfunc.FieldSource[TransferRequest]()}
	for _, text := range []string{
		"transfer:{req.From",
		"transfer:{req.From}{req.To}",
		"transfer:{request.From}",
		"transfer:{req.Form}",
	} {
		_, err := keyfunc.Parse(text, sources)
		fmt.Println(errors.Is(err, keyfunc.ErrSyntax), err)
	}
	// Output:
	// true keyfunc: syntax error in template "transfer:{req.From" at column 10: unclosed "{" (write "{{" for a literal "{")
	// true keyfunc: syntax error in template "transfer:{req.From}{req.To}" at column 20: placeholder {req.To} directly follows {req.From}: put literal text between them, or different values could render the same key
	// false keyfunc: template "transfer:{request.From}" at column 10: {request.From}: unknown source "request" (known: req)
	// false keyfunc: template "transfer:{req.Form}" at column 10: {req.Form}: no field "Form" in keyfunc_test.TransferRequest
}

// A value that is absent or empty is an error, never an empty key part.
func ExampleRenderError() {
	tpl, err := keyfunc.Parse("tenant:{req.Payer.tenant}", keyfunc.Sources[TransferRequest]{
		"req": keyfunc.FieldSource[TransferRequest](),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, req := range []TransferRequest{
		{Payer: &Payer{Tenant: "acme"}},
		{Payer: &Payer{}},
		{},
	} {
		key, err := tpl.Render(req)
		var re *keyfunc.RenderError
		if errors.As(err, &re) {
			fmt.Printf("%s | missing: %v, empty: %v\n", err, errors.Is(err, keyfunc.ErrMissing), errors.Is(err, keyfunc.ErrEmpty))
			continue
		}
		fmt.Println(key)
	}
	// Output:
	// tenant:acme
	// keyfunc: {req.Payer.tenant}: empty value | missing: false, empty: true
	// keyfunc: {req.Payer.tenant}: missing value: Payer is nil | missing: true, empty: false
}

// Values that contain the template's separators are encoded, so different
// values never share a key.
func Example_escaping() {
	tpl, err := keyfunc.Parse("{req.From}:{req.To}", keyfunc.Sources[TransferRequest]{
		"req": keyfunc.FieldSource[TransferRequest](),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, req := range []TransferRequest{
		{From: "a:b", To: "c"},
		{From: "a", To: "b:c"},
		{From: "100%", To: "x"},
	} {
		fmt.Println(tpl.Render(req))
	}
	// Output:
	// a%3Ab:c <nil>
	// a:b%3Ac <nil>
	// 100%25:x <nil>
}

func ExampleFormat() {
	for _, v := range []any{42, 2.5, true, time.Date(2024, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)), struct{}{}} {
		fmt.Println(keyfunc.Format(v))
	}
	// Output:
	// 42 <nil>
	// 2.5 <nil>
	// true <nil>
	// 2024-01-02T02:04:05Z <nil>
	//  keyfunc: unsupported type struct {}: not key text (want a string, number, bool, []byte, time.Time, encoding.TextMarshaler or fmt.Stringer; name a field or key inside it)
}
