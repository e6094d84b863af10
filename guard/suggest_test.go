package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/guardkit/guardkit/guard"
)

type checkoutRequest struct {
	OrderID string
	SKU     string
}

// TestKeySuggestions: a Key template naming a field the request lacks fails WrapE with a
// *guard.ConfigError that names the field it likely meant.
func TestKeySuggestions(t *testing.T) {
	fn := func(context.Context, checkoutRequest) (int, error) { return 0, nil }
	for text, want := range map[string]string{
		"sku:{SKU}":       "did you mean {req.SKU}?",
		"sku:{req.Sku}":   "did you mean {req.SKU}?",
		"o:{req.OrderId}": "did you mean {req.OrderID}?",
	} {
		_, err := guard.WrapE(fn, guard.Key(text))
		var ce *guard.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Key" || !strings.Contains(err.Error(), want) {
			t.Errorf("WrapE with Key(%q): %v; want a *guard.ConfigError for Key saying %q", text, err, want)
		}
	}
}
