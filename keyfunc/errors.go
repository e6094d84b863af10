package keyfunc

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors for errors.Is. Parse errors are *SyntaxError or *BindError,
// render errors are *RenderError; each matches one of these.
var (
	// ErrSyntax matches every *SyntaxError.
	ErrSyntax = errors.New("keyfunc: syntax error")
	// ErrUnknownSource is the cause of a *BindError whose placeholder names a
	// source that was not passed to Parse.
	ErrUnknownSource = errors.New("keyfunc: unknown source")
	// ErrUnsupported reports a Go type that cannot be read as key text, or
	// a path segment that asks to look inside a type that has no fields or
	// keys (an int, a slice).
	ErrUnsupported = errors.New("keyfunc: unsupported type")
	// ErrMissing reports a value that is absent at render time: a nil
	// pointer, map or interface on the path, a missing map key, header or
	// metadata entry.
	ErrMissing = errors.New("keyfunc: missing value")
	// ErrEmpty reports a placeholder that rendered as empty text. It is an
	// error because an empty value would map every such request onto the
	// same key.
	ErrEmpty = errors.New("keyfunc: empty value")
)

// SyntaxError reports a malformed template. It matches ErrSyntax.
type SyntaxError struct {
	// Text is the whole template.
	Text string
	// Col is the 1-based column of the offending character, counted in
	// characters (runes) from the start of Text.
	Col int
	// Msg says what is wrong.
	Msg string

	body string // the placeholder whose source name is malformed, if that is the error
	hint string // the placeholder it likely meant, without braces
}

// Error shows the template, the column and what is wrong, and suggests the placeholder
// that was likely meant, as in `did you mean {req.SKU}?`, when one is.
func (e *SyntaxError) Error() string {
	msg := fmt.Sprintf("keyfunc: syntax error in template %q at column %d: %s", e.Text, e.Col, e.Msg)
	if e.hint != "" {
		msg += "; did you mean {" + e.hint + "}?"
	}
	return msg
}

// Unwrap returns ErrSyntax, for errors.Is (as guard's typed errors unwrap to their
// sentinel).
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// BindError reports a well-formed placeholder that could not be bound at
// parse time: its source is unknown (Err matches ErrUnknownSource) or the
// source rejected its path (Err is the source's error).
type BindError struct {
	// Text is the whole template.
	Text string
	// Placeholder is the placeholder without braces, as in "req.From".
	Placeholder string
	// Col is the 1-based column of the placeholder's "{", counted in
	// characters (runes).
	Col int
	// Err is the cause.
	Err error

	hint string // the placeholder it likely meant, without braces
}

// Error shows the template, the column, the placeholder and the cause, and suggests the
// placeholder that was likely meant, as in `did you mean {req.SKU}?`, when one is.
func (e *BindError) Error() string {
	cause := causeText(e.Err)
	if e.hint == "" {
		return fmt.Sprintf("keyfunc: template %q at column %d: {%s}: %s", e.Text, e.Col, e.Placeholder, cause)
	}
	var nf *noFieldError
	if errors.As(e.Err, &nf) {
		cause = strings.TrimPrefix(nf.plain(), "keyfunc: ")
	}
	return fmt.Sprintf("keyfunc: template %q at column %d: {%s}: %s; did you mean {%s}?", e.Text, e.Col, e.Placeholder, cause, e.hint)
}

// Unwrap returns the cause.
func (e *BindError) Unwrap() error { return e.Err }

// RenderError reports a placeholder that could not be rendered. Err matches
// ErrMissing for an absent value, ErrEmpty for an empty one, or is the
// source's or the value's own error (for example from MarshalText).
type RenderError struct {
	// Placeholder is the placeholder without braces, as in "req.From".
	Placeholder string
	// Err is the cause.
	Err error
}

// Error shows the placeholder and the cause.
func (e *RenderError) Error() string {
	return fmt.Sprintf("keyfunc: {%s}: %s", e.Placeholder, causeText(e.Err))
}

// Unwrap returns the cause.
func (e *RenderError) Unwrap() error { return e.Err }

// causeText returns err's message without the package prefix that the
// wrapping error already prints, so a chain reads "keyfunc: ..." once.
func causeText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return strings.TrimPrefix(err.Error(), "keyfunc: ")
}
