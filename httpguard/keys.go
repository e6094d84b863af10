package httpguard

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/guardkit/guardkit/keyfunc"
)

// builtin names the built-in key sources, which extractors may not take.
var builtin = []string{"path", "query", "header", "route", "method"}

// sourceName is the syntax of a source name in a key template.
var sourceName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// keySources returns the built-in sources plus one bare-placeholder source per
// extractor.
func (m *lock) keySources(extractors map[string]Extractor) (keyfunc.Sources[*http.Request], error) {
	sources := keyfunc.Sources[*http.Request]{
		"path":   m.pathSource,
		"query":  keyfunc.Lookup(queryValue),
		"header": headerSource,
		"route":  keyfunc.Value(func(r *http.Request) string { return m.route(r) }),
		"method": keyfunc.Value(func(r *http.Request) string { return r.Method }),
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
		case slices.Contains(builtin, name):
			return nil, &ConfigError{Field: "Extractors", Reason: fmt.Sprintf("name %q is a built-in source", name)}
		case ex == nil:
			return nil, &ConfigError{Field: "Extractors", Reason: fmt.Sprintf("%q is nil", name)}
		}
		sources[name] = func(path string) (keyfunc.Getter[*http.Request], error) {
			if path != "" {
				return nil, errors.New("an extractor takes no path; write it as {name}")
			}
			return keyfunc.Getter[*http.Request](ex), nil
		}
	}
	return sources, nil
}

// pathSource reads {path.name}: exactly what the handler reads, PathValue(r, name) —
// for the standard ServeMux r.PathValue, already percent-decoded once by the mux. An
// empty value is told apart: a route whose pattern lacks the wildcard is a mistake in
// the code (500, logged), an empty value of a wildcard the route has ({rest...}
// matching nothing) a key the request cannot give (400).
func (m *lock) pathSource(name string) (keyfunc.Getter[*http.Request], error) {
	if name == "" {
		return nil, errors.New("a path value needs a name, as in {path.id}")
	}
	return func(r *http.Request) (string, error) {
		if v := m.pathValue(r, name); v != "" {
			return v, nil
		}
		route := m.route(r)
		switch {
		case route != "" && declares(route, name):
			return "", keyfunc.ErrMissing
		case route != "" || m.muxPaths:
			// ServeMux sets r.Pattern on every request it routes: none means the
			// middleware runs before routing.
			return "", &noParamError{route: route, name: name}
		}
		return "", keyfunc.ErrMissing // a router that names no route: cannot tell
	}, nil
}

// declares reports whether a route pattern has the wildcard name, in the syntax of the
// standard ServeMux ({id}, {rest...}), chi or gorilla/mux ({id}, {id:[0-9]+}).
func declares(route, name string) bool {
	for i := strings.IndexByte(route, '{'); i >= 0; {
		rest := route[i+1:]
		if after, ok := strings.CutPrefix(rest, name); ok &&
			(strings.HasPrefix(after, "}") || strings.HasPrefix(after, "...}") || strings.HasPrefix(after, ":")) {
			return true
		}
		j := strings.IndexByte(rest, '{')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// queryValue reads {query.name}: the first value of the URL query parameter, decoded
// once, as r.URL.Query().Get(name) gives it to the handler.
func queryValue(r *http.Request, name string) (string, bool) {
	vs := queryValues(r.URL.RawQuery)[name]
	if len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// queryValues parses a raw query as url.Values does for r.URL.Query.
func queryValues(raw string) url.Values {
	v, _ := url.ParseQuery(raw)
	return v
}

// headerSource reads {header.Name}: the first value of the request header, whose name
// is canonicalized once here rather than on every request.
func headerSource(name string) (keyfunc.Getter[*http.Request], error) {
	if name == "" {
		return nil, errors.New("a header needs a name, as in {header.X-Tenant}")
	}
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, error) {
		vs := r.Header[canonical]
		if len(vs) == 0 {
			return "", keyfunc.ErrMissing
		}
		return vs[0], nil
	}, nil
}
