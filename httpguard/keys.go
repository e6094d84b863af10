package httpguard

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/guardkit/guardkit/internal/httplock"
	"github.com/guardkit/guardkit/keyfunc"
)

// keySources returns the built-in sources, some of which read the lock's PathValue and
// Route.
func (m *lock) keySources() keyfunc.Sources[*http.Request] {
	return keyfunc.Sources[*http.Request]{
		"path":   m.pathSource,
		"query":  keyfunc.Lookup(queryValue),
		"header": httplock.HeaderSource(func(r *http.Request) http.Header { return r.Header }),
		"route":  keyfunc.Value(func(r *http.Request) string { return m.route(r) }),
		"method": keyfunc.Value(func(r *http.Request) string { return r.Method }),
	}
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
