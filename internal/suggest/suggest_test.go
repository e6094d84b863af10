package suggest

import "testing"

func TestClosest(t *testing.T) {
	names := []string{"SKU", "OrderID", "Payments", "Orders"}
	for _, c := range []struct{ word, want string }{
		{"Sku", "SKU"},             // case only
		{"sku", "SKU"},             //
		{"OrderId", "OrderID"},     //
		{"Payment", "Payments"},    // one edit
		{"Ordrs", "Orders"},        // one edit
		{"Customer", ""},           // nothing close
		{"x", ""},                  // short words need a close match
		{"Paymentsss", "Payments"}, // two edits of ten bytes
	} {
		if got := Closest(c.word, names); got != c.want {
			t.Errorf("Closest(%q) = %q, want %q", c.word, got, c.want)
		}
	}
	if got := Closest("a", nil); got != "" {
		t.Errorf("Closest among none = %q", got)
	}
}
