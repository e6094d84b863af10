package keyfunc

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

type account struct {
	ID    string
	N     uint
	Owner *person
}

type person struct{ Name string }

type base struct {
	Tenant string
	Region string `key:"region"`
}

type meta struct{ Zone string }

type inner struct{ Shard int }

type side int

func (s side) String() string {
	if s == 1 {
		return "buy"
	}
	return "sell"
}

// sku formats through a pointer receiver.
type sku struct {
	Prefix string
	N      int
}

func (s *sku) MarshalText() ([]byte, error) { return fmt.Appendf(nil, "%s-%d", s.Prefix, s.N), nil }

type ref struct{ ID string }

func (r *ref) String() string { return "ref-" + r.ID }

type badText struct{}

func (badText) MarshalText() ([]byte, error) { return nil, errCannotMarshal }

var errCannotMarshal = errors.New("cannot marshal")

type label string

type order struct {
	base
	*meta
	inner
	OrderID  string
	Customer string `key:"customer" json:"cust"`
	SKU      string `json:"sku,omitempty"`
	Secret   string `key:"-" json:"secret"`
	Account  account
	Payer    *account
	Labels   map[string]string
	Named    map[label]string
	Counts   map[int8]string
	Ports    map[uint16]string
	Floats   map[float64]string
	Any      any
	Extra    map[string]any
	N        int
	U        uint8
	F        float64
	F32      float32
	B        bool
	Raw      []byte
	When     time.Time
	WhenP    *time.Time
	Side     side
	Item     sku
	Items    map[string]sku
	Ref      ref
	Bad      badText
	Ptr      **int
	Tags     []string
	hidden   string
}

func fullOrder() order {
	when := time.Date(2024, 5, 6, 7, 8, 9, 10, time.FixedZone("CEST", 2*3600))
	five := 5
	pfive := &five
	return order{
		base:     base{Tenant: "acme", Region: "eu"},
		meta:     &meta{Zone: "z1"},
		inner:    inner{Shard: 3},
		OrderID:  "42",
		Customer: "alice",
		SKU:      "S-1",
		Secret:   "s3cret",
		Account:  account{ID: "acct-7", Owner: &person{Name: "bob"}},
		Payer:    &account{ID: "p-1"},
		Labels:   map[string]string{"tenant": "t1"},
		Named:    map[label]string{"x": "named"},
		Counts:   map[int8]string{-3: "minus three"},
		Ports:    map[uint16]string{443: "https"},
		Any:      "dyn",
		Extra:    map[string]any{"n": 7, "acct": account{ID: "x"}, "p": &account{ID: "y"}},
		N:        -5,
		U:        200,
		F:        0.1,
		F32:      0.1,
		B:        true,
		Raw:      []byte("raw\x00"),
		When:     when,
		WhenP:    &when,
		Side:     1,
		Item:     sku{Prefix: "S", N: 9},
		Items:    map[string]sku{"a": {Prefix: "T", N: 1}},
		Ref:      ref{ID: "r1"},
		Ptr:      &pfive,
		Tags:     []string{"a"},
		hidden:   "h",
	}
}

func TestFieldRender(t *testing.T) {
	tests := []struct {
		path string
		want string
		edit func(*order)
	}{
		{path: "OrderID", want: "42"},
		{path: "customer", want: "alice"},
		{path: "Customer", want: "alice"},
		{path: "cust", want: "alice"},
		{path: "sku", want: "S-1"},
		{path: "Tenant", want: "acme"},
		{path: "region", want: "eu"},
		{path: "Zone", want: "z1"},
		{path: "Shard", want: "3"},
		{path: "Account.ID", want: "acct-7"},
		{path: "Account.Owner.Name", want: "bob"},
		{path: "Payer.ID", want: "p-1"},
		{path: "Labels.tenant", want: "t1"},
		{path: "Named.x", want: "named"},
		{path: "Counts.-3", want: "minus three"},
		{path: "Ports.443", want: "https"},
		{path: "Any", want: "dyn"},
		{path: "Any", want: "12", edit: func(o *order) { o.Any = int16(12) }},
		{path: "Any.ID", want: "acct-1", edit: func(o *order) { o.Any = account{ID: "acct-1"} }},
		{path: "Any.ID", want: "acct-2", edit: func(o *order) { o.Any = &account{ID: "acct-2"} }},
		{path: "Any.k", want: "v", edit: func(o *order) { o.Any = map[string]any{"k": "v"} }},
		{path: "Extra.n", want: "7"},
		{path: "Extra.acct.ID", want: "x"},
		{path: "Extra.p.ID", want: "y"},
		{path: "N", want: "-5"},
		{path: "U", want: "200"},
		{path: "F", want: "0.1"},
		{path: "F32", want: "0.1"},
		{path: "B", want: "true"},
		{path: "Raw", want: "raw\x00"},
		{path: "When", want: "2024-05-06T05:08:09.00000001Z"},
		{path: "WhenP", want: "2024-05-06T05:08:09.00000001Z"},
		{path: "Side", want: "buy"},
		{path: "Item", want: "S-9"},
		{path: "Items.a", want: "T-1"},
		{path: "Ref", want: "ref-r1"},
		{path: "Ptr", want: "5"},
	}
	for _, tt := range tests {
		t.Run(tt.path+"="+tt.want, func(t *testing.T) {
			o := fullOrder()
			if tt.edit != nil {
				tt.edit(&o)
			}
			for _, get := range gettersFor(t, tt.path) {
				got, err := get(o)
				if err != nil {
					t.Fatal(err)
				}
				if got != tt.want {
					t.Errorf("got %q, want %q", got, tt.want)
				}
			}
		})
	}
}

// gettersFor binds path for order values and for order pointers, so both
// addressable and copied roots are covered.
func gettersFor(t *testing.T, path string) []func(order) (string, error) {
	t.Helper()
	byValue, err := Field[order](path)
	if err != nil {
		t.Fatal(err)
	}
	byPointer, err := Field[*order](path)
	if err != nil {
		t.Fatal(err)
	}
	byInterface, err := Field[any](path)
	if err != nil {
		t.Fatal(err)
	}
	return []func(order) (string, error){
		func(o order) (string, error) { return byValue(o) },
		func(o order) (string, error) { return byPointer(&o) },
		func(o order) (string, error) { return byInterface(o) },
	}
}

func TestFieldRenderErrors(t *testing.T) {
	tests := []struct {
		path string
		edit func(*order)
		is   error
		want string
	}{
		{"Payer.ID", func(o *order) { o.Payer = nil }, ErrMissing, "keyfunc: missing value: Payer is nil"},
		{"Account.Owner.Name", func(o *order) { o.Account.Owner = nil }, ErrMissing,
			"keyfunc: missing value: Account.Owner is nil"},
		{"Zone", func(o *order) { o.meta = nil }, ErrMissing, "keyfunc: missing value: meta is nil"},
		{"Labels.tenant", func(o *order) { o.Labels = map[string]string{} }, ErrMissing,
			`keyfunc: missing value: no key "tenant" in Labels`},
		{"Labels.tenant", func(o *order) { o.Labels = nil }, ErrMissing, "keyfunc: missing value: Labels is nil"},
		{"Extra.n", func(o *order) { delete(o.Extra, "n") }, ErrMissing,
			`keyfunc: missing value: no key "n" in Extra`},
		{"Any", func(o *order) { o.Any = nil }, ErrMissing, "keyfunc: missing value: Any is nil"},
		{"Any.ID", func(o *order) { o.Any = (*account)(nil) }, ErrMissing, "keyfunc: missing value: Any is nil"},
		{"Any.Nope", func(o *order) { o.Any = account{} }, ErrMissing,
			`keyfunc: missing value: no field "Nope" in keyfunc.account`},
		{"Any.ID", func(o *order) { o.Any = 5 }, ErrUnsupported,
			`keyfunc: unsupported type int: cannot look up "ID" in it (only struct fields and map keys)`},
		{"Any", func(o *order) { o.Any = []int{1} }, ErrUnsupported,
			"keyfunc: unsupported type []int: not key text (want a string, number, bool, []byte, time.Time, encoding.TextMarshaler or fmt.Stringer)"},
		{"Ptr", func(o *order) { o.Ptr = nil }, ErrMissing, "keyfunc: missing value: Ptr is nil"},
		{"Ptr", func(o *order) { o.Ptr = new(*int) }, ErrMissing, "keyfunc: missing value: Ptr is nil"},
		{"WhenP", func(o *order) { o.WhenP = nil }, ErrMissing, "keyfunc: missing value: WhenP is nil"},
		{"Bad", nil, errCannotMarshal, "keyfunc: keyfunc.badText.MarshalText: cannot marshal"},
	}
	for _, tt := range tests {
		t.Run(tt.path+" "+tt.want, func(t *testing.T) {
			o := fullOrder()
			if tt.edit != nil {
				tt.edit(&o)
			}
			for _, get := range gettersFor(t, tt.path) {
				got, err := get(o)
				if got != "" || !errors.Is(err, tt.is) {
					t.Fatalf("got %q, %v; want an error matching %v", got, err, tt.is)
				}
				if err.Error() != tt.want {
					t.Errorf("Error() =\n%s\nwant\n%s", err, tt.want)
				}
			}
		})
	}

	t.Run("nil root", func(t *testing.T) {
		get, err := Field[*order]("OrderID")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := get(nil); err == nil || err.Error() != "keyfunc: missing value: nil" {
			t.Errorf("err = %v", err)
		}
	})
}

type dup struct {
	dupA
	dupB
}

type dupA struct{ X, Y string }

type dupB struct{ X string }

type shadow struct {
	dupA
	X string
}

type tagged struct {
	A string `key:"b"`
	B string
	C string `json:"a"`
}

func TestFieldBindErrors(t *testing.T) {
	tests := []struct {
		bind func() error
		is   error
		want string
	}{
		{bindErr[order]("Nope"), nil, `keyfunc: no field "Nope" in keyfunc.order`},
		{bindErr[order]("hidden"), nil, "keyfunc: field hidden of keyfunc.order is unexported"},
		{bindErr[order]("base"), nil, "keyfunc: field base of keyfunc.order is unexported"},
		{bindErr[order]("Secret"), nil, `keyfunc: no field "Secret" in keyfunc.order`},
		{bindErr[order]("secret"), nil, `keyfunc: no field "secret" in keyfunc.order`},
		{bindErr[order]("Account.Nope"), nil, `keyfunc: no field "Nope" in keyfunc.account`},
		{bindErr[order]("Account"), ErrUnsupported,
			"keyfunc: unsupported type keyfunc.account: not key text (want a string, number, bool, []byte, time.Time, encoding.TextMarshaler or fmt.Stringer; name a field or key inside it)"},
		{bindErr[order]("Labels"), ErrUnsupported,
			"keyfunc: unsupported type map[string]string: not key text (want a string, number, bool, []byte, time.Time, encoding.TextMarshaler or fmt.Stringer; name a field or key inside it)"},
		{bindErr[order]("Tags"), ErrUnsupported,
			"keyfunc: unsupported type []string: not key text (want a string, number, bool, []byte, time.Time, encoding.TextMarshaler or fmt.Stringer)"},
		{bindErr[order]("Tags.0"), ErrUnsupported,
			`keyfunc: unsupported type []string: cannot look up "0" in it (only struct fields and map keys)`},
		{bindErr[order]("OrderID.x"), ErrUnsupported,
			`keyfunc: unsupported type string: cannot look up "x" in it (only struct fields and map keys)`},
		{bindErr[order]("Counts.x"), nil, `keyfunc: map key "x" is not a valid int8`},
		{bindErr[order]("Counts.300"), nil, `keyfunc: map key "300" is not a valid int8`},
		{bindErr[order]("Ports.-1"), nil, `keyfunc: map key "-1" is not a valid uint16`},
		{bindErr[order]("Floats.1"), ErrUnsupported,
			"keyfunc: unsupported type map[float64]string: map keys must be strings or integers"},
		{bindErr[order]("a..b"), nil, `keyfunc: empty segment in field path "a..b"`},
		{bindErr[dup]("X"), nil, `keyfunc: field "X" is ambiguous in keyfunc.dup (2 fields at the same depth)`},
		{bindErr[chan int](""), ErrUnsupported,
			"keyfunc: unsupported type chan int: not key text (want a string, number, bool, []byte, time.Time, encoding.TextMarshaler or fmt.Stringer)"},
	}
	for _, tt := range tests {
		err := tt.bind()
		if err == nil || err.Error() != tt.want {
			t.Errorf("err = %v\nwant %s", err, tt.want)
			continue
		}
		if tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("%v: errors.Is(err, %v) = false", err, tt.is)
		}
	}
}

func bindErr[T any](path string) func() error {
	return func() error {
		_, err := Field[T](path)
		return err
	}
}

func TestFieldLookupRules(t *testing.T) {
	check := func(t *testing.T, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	t.Run("key tag, then Go name, then json tag", func(t *testing.T) {
		in := tagged{A: "by key tag", B: "by name", C: "by json"}
		check(t, mustRender(t, "b", in), "by key tag")
		check(t, mustRender(t, "A", in), "by key tag")
		check(t, mustRender(t, "B", in), "by name")
		check(t, mustRender(t, "a", in), "by json")
		check(t, mustRender(t, "C", in), "by json")
	})
	t.Run("outer field hides promoted one", func(t *testing.T) {
		in := shadow{dupA: dupA{X: "inner", Y: "y"}, X: "outer"}
		check(t, mustRender(t, "X", in), "outer")
		check(t, mustRender(t, "Y", in), "y")
	})
	t.Run("ambiguity only for the ambiguous name", func(t *testing.T) {
		check(t, mustRender(t, "Y", dup{dupA: dupA{Y: "y"}}), "y")
	})
	t.Run("whole value", func(t *testing.T) {
		check(t, mustRender(t, "", "plain"), "plain")
		check(t, mustRender(t, "", label("named")), "named")
		check(t, mustRender(t, "", uint64(1<<63)), "9223372036854775808")
	})
}

func mustRender[T any](t *testing.T, path string, in T) string {
	t.Helper()
	get, err := Field[T](path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := get(in)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFormat(t *testing.T) {
	n := 7
	tests := []struct {
		in   any
		want string
	}{
		{"s", "s"},
		{"", ""},
		{-1, "-1"},
		{uint8(255), "255"},
		{&n, "7"},
		{false, "false"},
		{1e21, "1e+21"},
		{float32(1.5), "1.5"},
		{[]byte("b"), "b"},
		{time.Unix(0, 0).In(time.FixedZone("X", -3600)), "1970-01-01T00:00:00Z"},
		{side(2), "sell"},
		{sku{Prefix: "Q", N: 1}, "Q-1"},
		{&sku{Prefix: "P", N: 2}, "P-2"},
		{ref{ID: "z"}, "ref-z"},
	}
	for _, tt := range tests {
		got, err := Format(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("Format(%#v) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []any{nil, (*int)(nil)} {
		if _, err := Format(in); !errors.Is(err, ErrMissing) {
			t.Errorf("Format(%#v) err = %v, want ErrMissing", in, err)
		}
	}
	for _, in := range []any{account{}, []int{1}, complex(1, 2), map[string]string{}} {
		if _, err := Format(in); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Format(%#v) err = %v, want ErrUnsupported", in, err)
		}
	}
}
