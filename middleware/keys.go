package middleware

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/guardkit/guardkit/internal/httplock"
	"github.com/guardkit/guardkit/keyfunc"
)

// builtinSources are the key template sources every Lock middleware has.
var builtinSources = keyfunc.Sources[echo.Context]{
	"param":  paramSource,
	"query":  keyfunc.Lookup(queryValue),
	"header": httplock.HeaderSource(func(c echo.Context) http.Header { return c.Request().Header }),
	"form":   formSource,
	"path":   pathSource,
	"route":  keyfunc.Value(func(c echo.Context) string { return c.Path() }),
	"method": keyfunc.Value(func(c echo.Context) string { return c.Request().Method }),
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

// paramSource reads {param.name}: the value Param returns, which handlers read their
// resource with. When that value, percent-decoded, would change — it still holds a %XX
// escape — and Echo's c.Param gives it decoded, as for /orders/a%252Fb/pay (order
// "a%2Fb"), the request builds no key (400): c.Param reads "a%2Fb" there as it does for
// /orders/a%2Fb/pay (order "a/b"), so a handler that reads c.Param could not tell the
// two orders apart while their locks differ. Every request the key accepts has
// decoded(c.Param) == Param, so two requests whose handlers read the same c.Param, or
// the same Param, take one lock.
func paramSource(name string) (keyfunc.Getter[echo.Context], error) {
	if name == "" {
		return nil, errors.New("a route parameter needs a name, as in {param.id}")
	}
	return func(c echo.Context) (string, error) {
		v, wildcard, err := paramValue(c, name)
		if err != nil {
			return "", err
		}
		if readBack(c.Param(name), wildcard) != v {
			return "", &twiceEncodedError{name: name, value: v, param: c.Param(name)}
		}
		return v, nil
	}, nil
}

// Param returns the value of the route parameter name as the Lock middleware puts it in
// the key for {param.name}: its text in the path Echo's router matched, percent-decoded
// exactly once. Read a handler's resource with it rather than with c.Param, and the
// handler acts on exactly what its route locked.
//
// Echo's c.Param gives the text as Echo matched it: raw when Go kept the request's raw
// path (URL.RawPath, set for a%2Fb or 4%32), decoded otherwise, so one order reads
// "a%2Fb" or "a/b", "4%32" or "42", depending on how the client spelled it. Param
// reads "a/b" and "42" for both. For the wildcard "*" it returns the rest of the path
// with each segment decoded once and a '%' or '/' inside a segment written back as %25
// or %2F, so that a%2Fb/c and a/b/c stay apart.
//
// On a route the Lock middleware locks with {param.name}, c.Param and Param agree for
// every request its handler sees: percent-decoding c.Param gives Param. A request for
// which they would not (its value, decoded, still holds a %XX escape, as in a%252Fb,
// and Echo gives it decoded) is answered 400 before the handler runs.
//
// Param returns "" when the matched route has no parameter name, as c.Param does. When
// the request's path was changed after routing and no longer fits the route, it
// returns c.Param decoded once.
func Param(c echo.Context, name string) string {
	v, wildcard, err := paramValue(c, name)
	if err != nil {
		var np *noParamError
		if errors.As(err, &np) {
			return ""
		}
		return readBack(c.Param(name), wildcard)
	}
	return v
}

// paramValue is Param's value, and whether name is the wildcard. It reads the parameter
// from the path Echo's router matched (echo.GetPath: URL.RawPath when Go kept it, else
// URL.Path), at the parameter's place in the matched route, not from c.Param, which
// other middleware may have decoded already; a raw path's text is decoded once, a
// decoded path's is not decoded again.
func paramValue(c echo.Context, name string) (v string, wildcard bool, err error) {
	route := c.Path()
	seg, prefix, wildcard, ok := routeParam(route, name)
	if !ok {
		return "", false, &noParamError{route: route, name: name, notFound: notFoundRoute(c)}
	}
	r := c.Request()
	routed, raw := echo.GetPath(r), r.URL.RawPath != ""
	start, ok := segmentStart(routed, seg)
	if !ok || !strings.HasPrefix(routed[start:], prefix) {
		return "", wildcard, misfit(route, routed)
	}
	text := routed[start+len(prefix):]
	if wildcard {
		if !raw {
			return escapeSegments(text), true, nil
		}
		v, ok := decodePath(text)
		if !ok {
			return "", true, misfit(route, routed)
		}
		return v, true, nil
	}
	if end := strings.IndexByte(text, '/'); end >= 0 {
		text = text[:end]
	}
	if !raw {
		return text, false, nil
	}
	v, err = url.PathUnescape(text)
	if err != nil {
		return "", false, misfit(route, routed)
	}
	return v, false, nil
}

// readBack is what a handler that decodes c.Param's value p once reads: p
// percent-decoded, or p itself when it does not decode; for the wildcard, each segment
// so, with a '%' or '/' inside a segment written back as %25 or %2F, as Param writes it.
func readBack(p string, wildcard bool) string {
	if !wildcard {
		if d, err := url.PathUnescape(p); err == nil {
			return d
		}
		return p
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if d, err := url.PathUnescape(s); err == nil {
			s = d
		}
		segs[i] = segmentText.Replace(s)
	}
	return strings.Join(segs, "/")
}

// segmentText writes a decoded segment as decodePath does.
var segmentText = strings.NewReplacer("%", "%25", "/", "%2F")

// escapeSegments writes every '%' of a decoded path as %25: a decoded path's segments
// have no '/' inside, so this is decodePath's text for it.
func escapeSegments(decoded string) string {
	return strings.ReplaceAll(decoded, "%", "%25")
}

// twiceEncodedError reports a route parameter whose value, percent-decoded once, still
// holds a %XX escape while Echo's c.Param gives it decoded: c.Param then reads the same
// for another value (a%252Fb and a%2Fb both read "a%2Fb"), and no key can follow both.
type twiceEncodedError struct {
	name, value, param string
}

func (e *twiceEncodedError) Error() string {
	return fmt.Sprintf("middleware: route parameter %q is %q once decoded, but c.Param reads %q, which decodes to %q: a handler reading c.Param could not tell the two values apart (sent percent-encoded twice?)",
		e.name, e.value, e.param, readBack(e.param, e.name == "*"))
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

// decodePath turns escaped, a request's escaped path or a part of it, into key text:
// every '/'-separated segment is percent-decoded once, and a '%' or '/' inside a
// segment is written as %25 or %2F. The result tells a%2Fb from a/b and %2525 from %25,
// and gives 4%32 and 42 the same text.
func decodePath(escaped string) (string, bool) {
	if strings.IndexByte(escaped, '%') < 0 { // nothing to decode, nothing to encode
		return escaped, true
	}
	segs := strings.Split(escaped, "/")
	for i, seg := range segs {
		d, err := url.PathUnescape(seg)
		if err != nil {
			return "", false
		}
		segs[i] = segmentText.Replace(d)
	}
	return strings.Join(segs, "/"), true
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
		v, ok := decodePath(p)
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
