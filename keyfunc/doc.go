// Package keyfunc renders lock keys from templates such as
// "order:{req.OrderID}". A template is parsed once, when a decorator,
// middleware or interceptor is built, and rendered on every call from the
// request at hand. Every mistake that can be found without a request (a
// typo in the template, an unknown source, a struct field that does not
// exist) is reported by Parse, with its column.
//
// keyfunc imports neither Redis nor any transport: each entry point brings
// its own sources.
//
// # Syntax
//
// A template is literal text with placeholders:
//
//	order:{req.OrderID}
//	tenant:{header.X-Tenant}:user:{param.id}
//	{method}:{req.account.id}
//
// A placeholder is {source.path} or, for a source that needs no path,
// {source}. A source name matches [a-z][a-z0-9_]*. A path is one or more
// non-empty segments separated by "."; a segment may hold any character
// except "{", "}", ".", white space and control characters, so header
// names like X-Tenant and metadata keys like x-tenant-bin are written as
// they are. What a path means is up to its source: Field follows segments
// into fields and map keys, a Lookup source uses the whole path, dots
// included, as one name.
//
// "{{" and "}}" stand for literal braces. Two placeholders must be
// separated by literal text, and that text must not start with "%" (see
// Escaping). The empty template is invalid.
//
// Parse reports malformed text with a *SyntaxError (matching ErrSyntax)
// and a placeholder it cannot bind with a *BindError; both carry a 1-based
// column counted in characters.
//
// # Sources
//
// A Source turns a placeholder path into a Getter once, at parse time, and
// the Getter reads the value on every render. Sources are passed to Parse
// by name in a Sources map, and the render input type In is whatever the
// entry point has at hand: the request struct for guard, an echo.Context
// for the Echo middleware, the request and metadata for gRPC.
//
// Three constructors cover the usual shapes:
//
//   - FieldSource (and Field) reads Go struct fields, by key tag, Go name
//     or json tag, through nested structs, embedded structs, pointers,
//     maps and interfaces. All the reflection that depends only on the
//     static type is done at parse time.
//   - Lookup reads named strings: route and query parameters, headers,
//     gRPC metadata.
//   - Value reads one string, such as the gRPC method name.
//
// Values are formatted as Format describes: strings as they are, numbers
// in decimal, time.Time in UTC RFC 3339, encoding.TextMarshaler and
// fmt.Stringer through their methods.
//
// Render fails with a *RenderError naming the placeholder when a value is
// missing (ErrMissing: a nil pointer, an absent map key or header) or
// empty (ErrEmpty). An empty value is never rendered: it would put every
// request without that value under one lock.
//
// # Escaping
//
// Rendered values are data and never read as template text: two different
// sets of values never render the same key. With "{a}:{b}", the values
// ("x:y", "z") and ("x", "y:z") must not both give "x:y:z".
//
// A template with at most one placeholder renders its value verbatim:
// prefix + value + suffix already tells values apart. A template with two
// or more placeholders percent-encodes, in every value, "%" and the first
// byte of each literal text between two placeholders, as "%XX" with
// upper-case hex digits; when such a byte is not ASCII, every non-ASCII
// byte is encoded, so values that are valid UTF-8 stay valid UTF-8. With
// "{a}:{b}" that is "%" and ":":
//
//	("x:y", "z")  →  x%3Ay:z
//	("x", "y:z")  →  x:y%3Az
//	("50%", "1")  →  50%25:1
//	("order", "42") → order:42
//
// This is enough for the key to be read back: a value ends at the first
// unencoded occurrence of the first byte of the text that follows it.
// That is also why two placeholders need literal text between them and
// why that text cannot start with "%", which would be confused with an
// encoded byte; Parse rejects both.
//
// Keys rendered by different templates are not kept apart by escaping:
// give each template its own literal prefix, such as "order:" or
// "account:".
//
// # Concurrency
//
// A Template is immutable after Parse and safe for concurrent use; so are
// the Getters that Field returns.
package keyfunc
