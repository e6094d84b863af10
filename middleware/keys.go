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
	"path":   keyfunc.Value(func(c echo.Context) string { return c.Request().URL.Path }),
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
// have: a route the middleware was not meant for, such as the catch-all that answers
// 404 for an Echo group.
type noParamError struct {
	route, name string
}

func (e *noParamError) Error() string {
	return fmt.Sprintf("middleware: route %q has no parameter %q", e.route, e.name)
}

// paramSource reads {param.name}. Values are percent-decoded, so that /orders/42 and
// /orders/4%32, which a handler may treat as one order, take one lock.
func paramSource(name string) (keyfunc.Getter[echo.Context], error) {
	if name == "" {
		return nil, errors.New("a route parameter needs a name, as in {param.id}")
	}
	return func(c echo.Context) (string, error) {
		names, values := c.ParamNames(), c.ParamValues()
		for i, n := range names {
			if n == name && i < len(values) {
				v := values[i]
				if strings.IndexByte(v, '%') >= 0 {
					if d, err := url.PathUnescape(v); err == nil {
						v = d
					}
				}
				return v, nil
			}
		}
		return "", &noParamError{route: c.Path(), name: name}
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
