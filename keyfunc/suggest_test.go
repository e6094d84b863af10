package keyfunc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/guardkit/guardkit/keyfunc"
)

type checkout struct {
	SKU     string
	OrderID string `json:"order_id"`
	Ship    struct{ Zip string }
}

// TestSuggestions: a template mistake names the placeholder that was likely meant.
func TestSuggestions(t *testing.T) {
	req := keyfunc.Sources[checkout]{"req": keyfunc.FieldSource[checkout]()}
	for _, c := range []struct {
		text, want string // want "" expects no suggestion
	}{
		{"sku:{SKU}", "did you mean {req.SKU}?"},      // a field without its source
		{"sku:{req.Sku}", "did you mean {req.SKU}?"},  // the field's case
		{"sku:{req.SKUs}", "did you mean {req.SKU}?"}, // a typo
		{"sku:{sku}", "did you mean {req.SKU}?"},      // both
		{"o:{req.orderid}", "did you mean {req.OrderID}?"},
		{"o:{order_id}", "did you mean {req.order_id}?"}, // a json tag without its source
		{"z:{req.Ship.Zp}", "did you mean {req.Ship.Zip}?"},
		{"sku:{rq.SKU}", "did you mean {req.SKU}?"}, // the source's name
		{"c:{req.Customer}", ""},
		{"c:{Customer}", ""},
	} {
		_, err := keyfunc.Parse(c.text, req)
		if err == nil {
			t.Errorf("Parse(%q) succeeded", c.text)
			continue
		}
		msg := err.Error()
		switch {
		case c.want == "" && strings.Contains(msg, "did you mean"):
			t.Errorf("Parse(%q): %s; want no suggestion", c.text, msg)
		case c.want != "" && !strings.HasSuffix(msg, c.want):
			t.Errorf("Parse(%q): %s; want it to end %q", c.text, msg, c.want)
		}
		var se *keyfunc.SyntaxError
		var be *keyfunc.BindError
		if !errors.As(err, &se) && !errors.As(err, &be) {
			t.Errorf("Parse(%q): %T, want a *SyntaxError or a *BindError", c.text, err)
		}
	}

	// Several sources that take any name: a name's source is suggested when misspelt, a
	// bare name is not guessed.
	any := func(string) (keyfunc.Getter[string], error) {
		return func(string) (string, error) { return "v", nil }, nil
	}
	http := keyfunc.Sources[string]{"param": any, "query": any, "header": any}
	if _, err := keyfunc.Parse("order:{parm.id}", http); err == nil || !strings.HasSuffix(err.Error(), "did you mean {param.id}?") {
		t.Errorf("{parm.id}: %v", err)
	}
	if _, err := keyfunc.Parse("order:{id}", http); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("{id}: %v; want no suggestion (param, query and header all take it)", err)
	}

	// Field alone says it too.
	if _, err := keyfunc.Field[checkout]("Sku"); err == nil || !strings.HasSuffix(err.Error(), `did you mean "SKU"?`) {
		t.Errorf("Field(Sku): %v", err)
	}
}
