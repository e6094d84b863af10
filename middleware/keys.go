package middleware

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/keyfunc"
)

// builtinSources are the key template sources every Lock middleware has.
var builtinSources = keyfunc.Sources[echo.Context]{
	"param":  paramSource,
	"query":  keyfunc.Lookup(queryValue),
	"header": headerSource,
	"form":   formSource,
	"path":   pathSource,
	"route":  keyfunc.Value(func(c echo.Context) string { return c.Path() }),
	"method": keyfunc.Value(func(c echo.Context) string { return c.Request().Method }),
}

// sourceName is the syntax of a source name in a key template.
var sourceName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// keySources returns the built-in sources plus one bare-placeholder source per
// extractor.
func keySources(extractors map[string]Extractor) (keyfunc.Sources[echo.Context], error) {
	if len(extractors) == 0 {
		return builtinSources, nil
	}
	sources := make(keyfunc.Sources[echo.Context], len(builtinSources)+len(extractors))
	for name, src := range builtinSources {
		sources[name] = src
	}
	names := make([]string, 0, len(extractors))
	for name := range extractors {
		names = append(names, name)
	}
	slices.Sort(names) // report the same problem first every time
	for _, name := range names {
		ex := extractors[name]
		switch {
		case !sourceName.MatchString(name):
			return nil, &ConfigError{Field: "Extractors", Reason: fmt.Sprintf("name %q must match [a-z][a-z0-9_]*", name)}
		case builtinSources[name] != nil:
			return nil, &ConfigError{Field: "Extractors", Reason: fmt.Sprintf("name %q is a built-in source", name)}
		case ex == nil:
			return nil, &ConfigError{Field: "Extractors", Reason: fmt.Sprintf("%q is nil", name)}
		}
		sources[name] = extractorSource(ex)
	}
	return sources, nil
}

// extractorSource makes an Extractor the source of a bare placeholder.
func extractorSource(ex Extractor) keyfunc.Source[echo.Context] {
	return func(path string) (keyfunc.Getter[echo.Context], error) {
		if path != "" {
			return nil, errors.New("an extractor takes no path; write it as {name}")
		}
		return keyfunc.Getter[echo.Context](ex), nil
	}
}

// noParamError reports a key that names a route parameter the matched route does not
// have: a mistake in the route or the template, or a route the middleware was not
// meant for, such as the catch-all route that answers 404 for an Echo group.
type noParamError struct {
	route, name string
	notFound    bool // the route is a not-found route (Echo's RouteNotFound), not a handler's
}

func (e *noParamError) Error() string {
	return fmt.Sprintf("middleware: route %q has no parameter %q", e.route, e.name)
}

// notFoundRoute reports whether the route c matched is a not-found route only, such as
// the catch-all an Echo group adds when it has middleware: no route of c's method has
// its path.
func notFoundRoute(c echo.Context) bool {
	e, route, method := c.Echo(), c.Path(), c.Request().Method
	if e == nil {
		return false
	}
	found := false
	for _, r := range e.Routes() {
		if r.Path != route {
			continue
		}
		if r.Method == method {
			return false
		}
		found = found || r.Method == echo.RouteNotFound
	}
	return found
}

// paramSource reads {param.name}: the parameter's text in the request's escaped path
// (URL.EscapedPath), at the parameter's place in the matched route, percent-decoded
// exactly once. It does not decode what c.Param returns: that value is raw when Go kept
// the raw path (URL.RawPath, set for a%2Fb) and decoded otherwise, and other middleware
// may have decoded it already, so decoding it again would give /acct/%257B/op (account
// "%7B") and /acct/%7B/op (account "{") one lock. Two spellings of one value,
// /orders/42 and /orders/4%32, take one lock. The wildcard {param.*} spans segments and
// is written as {path} is, so that a%2Fb/c and a/b/c stay apart.
func paramSource(name string) (keyfunc.Getter[echo.Context], error) {
	if name == "" {
		return nil, errors.New("a route parameter needs a name, as in {param.id}")
	}
	return func(c echo.Context) (string, error) {
		route := c.Path()
		seg, prefix, wildcard, ok := routeParam(route, name)
		if !ok {
			return "", &noParamError{route: route, name: name, notFound: notFoundRoute(c)}
		}
		escaped := c.Request().URL.EscapedPath()
		start, ok := segmentStart(escaped, seg)
		if !ok {
			return "", misfit(route, escaped)
		}
		if wildcard {
			v, ok := decodePath(escaped[start:], prefix)
			if !ok {
				return "", misfit(route, escaped)
			}
			return v, nil
		}
		end := strings.IndexByte(escaped[start:], '/')
		if end < 0 {
			end = len(escaped) - start
		}
		v, err := url.PathUnescape(escaped[start : start+end])
		if err != nil || !strings.HasPrefix(v, prefix) {
			return "", misfit(route, escaped)
		}
		return v[len(prefix):], nil
	}, nil
}

// routeParam finds the parameter name in an Echo route pattern: the index of the
// path segment it is in (0 is the empty segment before the leading '/'), the literal
// text before it in that segment, and whether it is the wildcard "*". As in Echo's
// router, ":" starts a parameter whose name runs to the next '/', "\:" is a literal
// colon, and "*" matches the rest of the path.
func routeParam(route, name string) (seg int, prefix string, wildcard, ok bool) {
	start := 0 // of the current segment
	for i := 0; i < len(route); i++ {
		switch route[i] {
		case '/':
			seg++
			start = i + 1
		case ':':
			if i > 0 && route[i-1] == '\\' {
				continue
			}
			end := strings.IndexByte(route[i:], '/')
			if end < 0 {
				end = len(route) - i
			}
			if route[i+1:i+end] == name {
				return seg, strings.ReplaceAll(route[start:i], `\:`, ":"), false, true
			}
			i += end - 1
		case '*':
			if name != "*" {
				return 0, "", false, false
			}
			return seg, strings.ReplaceAll(route[start:i], `\:`, ":"), true, true
		}
	}
	return 0, "", false, false
}

// segmentStart returns the offset in path of segment seg.
func segmentStart(path string, seg int) (int, bool) {
	start := 0
	for ; seg > 0; seg-- {
		i := strings.IndexByte(path[start:], '/')
		if i < 0 {
			return 0, false
		}
		start += i + 1
	}
	return start, true
}

// misfit reports a matched route that cannot be laid over the request's path: the path
// or the route was changed after routing.
func misfit(route, path string) error {
	return fmt.Errorf("middleware: route %q does not fit the request path %q", route, path)
}

// decodePath turns escaped, a part of a request's escaped path that starts with the
// literal prefix, into key text: the prefix is removed, every '/'-separated segment is
// percent-decoded once, and a '%' or '/' inside a segment is written as %25 or %2F. The
// result tells a%2Fb from a/b and %2525 from %25, and gives 4%32 and 42 the same text.
func decodePath(escaped, prefix string) (string, bool) {
	if strings.IndexByte(escaped, '%') < 0 { // nothing to decode, nothing to encode
		if !strings.HasPrefix(escaped, prefix) {
			return "", false
		}
		return escaped[len(prefix):], true
	}
	var b strings.Builder
	b.Grow(len(escaped))
	for i, seg := range strings.Split(escaped, "/") {
		d, err := url.PathUnescape(seg)
		if err != nil {
			return "", false
		}
		if i == 0 {
			if !strings.HasPrefix(d, prefix) {
				return "", false
			}
			d = d[len(prefix):]
		} else {
			b.WriteByte('/')
		}
		for j := 0; j < len(d); j++ {
			switch d[j] {
			case '%':
				b.WriteString("%25")
			case '/':
				b.WriteString("%2F")
			default:
				b.WriteByte(d[j])
			}
		}
	}
	return b.String(), true
}

// pathSource reads {path}: the request's escaped path (URL.EscapedPath), decoded as
// decodePath says. Neither URL.Path, where a%2Fb and a/b are one text, nor the escaped
// path, where 4%32 and 42 are two, names the resource as the handler sees it.
func pathSource(name string) (keyfunc.Getter[echo.Context], error) {
	if name != "" {
		return nil, errors.New("the request path takes no name; write it as {path}")
	}
	return func(c echo.Context) (string, error) {
		p := c.Request().URL.EscapedPath()
		v, ok := decodePath(p, "")
		if !ok {
			return "", fmt.Errorf("middleware: cannot decode the request path %q", p)
		}
		return v, nil
	}, nil
}

// queryValue reads {query.name}: the first value of the URL query parameter.
func queryValue(c echo.Context, name string) (string, bool) {
	vs := c.QueryParams()[name]
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// headerSource reads {header.Name}: the first value of the request header, whose name
// is canonicalized once here rather than on every request.
func headerSource(name string) (keyfunc.Getter[echo.Context], error) {
	if name == "" {
		return nil, errors.New("a header needs a name, as in {header.X-Tenant}")
	}
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	return func(c echo.Context) (string, error) {
		vs := c.Request().Header[canonical]
		if len(vs) == 0 {
			return "", keyfunc.ErrMissing
		}
		return vs[0], nil
	}, nil
}

// formSource reads {form.name}: the first value of a field of an
// application/x-www-form-urlencoded body. The body is parsed with
// http.Request.ParseForm, which keeps the fields for the handler's c.FormValue. Other
// bodies are not read: a multipart upload would have to be received in full before
// the lock is even requested.
func formSource(name string) (keyfunc.Getter[echo.Context], error) {
	if name == "" {
		return nil, errors.New("a form field needs a name, as in {form.id}")
	}
	return func(c echo.Context) (string, error) {
		r := c.Request()
		ct, _, _ := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
		if ct != echo.MIMEApplicationForm || !hasFormBody(r.Method) {
			return "", fmt.Errorf("%w (form fields are read from %s bodies of POST, PUT and PATCH requests only)",
				keyfunc.ErrMissing, echo.MIMEApplicationForm)
		}
		if err := r.ParseForm(); err != nil {
			return "", fmt.Errorf("middleware: reading the form: %w", err)
		}
		vs := r.PostForm[name]
		if len(vs) == 0 {
			return "", keyfunc.ErrMissing
		}
		return vs[0], nil
	}, nil
}

// hasFormBody reports whether ParseForm reads the body of a request with method.
func hasFormBody(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}
