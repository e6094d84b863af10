package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
	"github.com/guardkit/guardkit/middleware"
)

// keyOf is a handler that answers with the key of the lease it runs under.
func keyOf(c echo.Context) error {
	le, ok := guard.LeaseFromContext(c.Request().Context())
	if !ok {
		return c.String(http.StatusOK, "<no lease>")
	}
	return c.String(http.StatusOK, le.Key())
}

func TestKeySources(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	authenticate := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { c.Set("user", "alice"); return next(c) }
	}
	e.GET("/things/:id", keyOf, authenticate, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker,
		Key:    "req|{method}|{route}|{path}|{param.id}|{query.q}|{header.x-tenant}|{user}",
		Extractors: map[string]middleware.Extractor{
			"user": func(c echo.Context) (string, error) { return c.Get("user").(string), nil },
		},
	}))

	req := httptest.NewRequest(http.MethodGet, "/things/5?q=abc&q=ignored", nil)
	req.Header.Add("X-Tenant", "acme")
	req.Header.Add("X-Tenant", "ignored")
	r := serve(e, req)
	// The route's ':' is not a separator of this template, so it stays as it is.
	if want := "req|GET|/things/:id|/things/5|5|abc|acme|alice"; r.status != http.StatusOK || r.body != want {
		t.Errorf("got %d %q, want key %q", r.status, r.body, want)
	}
}

// Route parameters are percent-decoded: two spellings of one order take one lock.
func TestParamDecoded(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	e.POST("/orders/:id/pay", keyOf, failFast(locker, "order:{param.id}"))
	for path, want := range map[string]string{
		"/orders/42/pay":    "order:42",
		"/orders/4%32/pay":  "order:42",
		"/orders/a%2Fb/pay": "order:a/b",
		"/orders/50%25/pay": "order:50%",
	} {
		if r := serve(e, httptest.NewRequest(http.MethodPost, path, nil)); r.body != want {
			t.Errorf("%s: got %d %q, want key %q", path, r.status, r.body, want)
		}
	}

	held, err := locker.Acquire(context.Background(), "order:42")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	if r := serve(e, httptest.NewRequest(http.MethodPost, "/orders/4%32/pay", nil)); r.status != http.StatusConflict {
		t.Errorf("order 4%%32 while 42 is held: status %d, want 409", r.status)
	}
}

// {form.x} reads urlencoded bodies and leaves the fields to the handler; other bodies
// are not read.
func TestFormSource(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	e.POST("/pay", func(c echo.Context) error {
		le, _ := guard.LeaseFromContext(c.Request().Context())
		return c.String(http.StatusOK, le.Key()+" "+c.FormValue("note"))
	}, failFast(locker, "order:{form.id}"))

	form := url.Values{"id": {"77"}, "note": {"rush"}}.Encode()
	post := func() *http.Request {
		req := httptest.NewRequest(http.MethodPost, "/pay?id=from-query", strings.NewReader(form))
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm+"; charset=utf-8")
		return req
	}
	if r := serve(e, post()); r.status != http.StatusOK || r.body != "order:77 rush" {
		t.Errorf("got %d %q", r.status, r.body)
	}

	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	_ = w.WriteField("id", "77")
	_ = w.Close()
	req := httptest.NewRequest(http.MethodPost, "/pay", &mp)
	req.Header.Set(echo.HeaderContentType, w.FormDataContentType())
	if r := serve(e, req); r.status != http.StatusBadRequest {
		t.Errorf("multipart: got %d %q, want 400", r.status, r.body)
	}

	held, err := locker.Acquire(context.Background(), "order:77")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	if r := serve(e, post()); r.status != http.StatusConflict {
		t.Errorf("while order 77 is held: got %d, want 409", r.status)
	}
}

// A key that cannot be built is answered 400 (or what an extractor said), 404 when the
// matched route lacks the parameter, and the handler does not run.
func TestKeyErrors(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv, guard.MaxKeyLen(64))
	var errs errorLog
	e := newEcho(&errs)
	handler := func(c echo.Context) error { return c.String(http.StatusOK, "ran") }
	e.GET("/tenant", handler, middleware.Lock(locker, "tenant:{header.X-Tenant}"))
	e.GET("/search", handler, middleware.Lock(locker, "search:{query.q}"))
	e.GET("/user", handler, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker,
		Key:    "user:{user}",
		Extractors: map[string]middleware.Extractor{"user": func(c echo.Context) (string, error) {
			if c.QueryParam("anonymous") != "" {
				return "", echo.NewHTTPError(http.StatusUnauthorized, "sign in first")
			}
			return "", errors.New("session store down")
		}},
	}))
	e.GET("/pay", handler, middleware.Lock(locker, "order:{form.id}"))
	g := e.Group("/orders/:id", middleware.Lock(locker, "order:{param.id}"))
	g.GET("/status", handler)
	e.Group("/api", middleware.Lock(locker, "order:{param.id}")).GET("/orders/:id", handler)

	for _, tc := range []struct {
		name, path string
		header     http.Header
		status     int
		message    string
	}{
		{"missing header", "/tenant", nil, 400, "cannot build the lock key from the request: {header.X-Tenant} is missing or empty"},
		{"empty header", "/tenant", http.Header{"X-Tenant": {""}}, 400, "cannot build the lock key from the request: {header.X-Tenant} is missing or empty"},
		{"key too long", "/tenant", http.Header{"X-Tenant": {strings.Repeat("t", 100)}}, 400, "cannot build the lock key from the request"},
		{"missing query", "/search?other=1", nil, 400, "cannot build the lock key from the request: {query.q} is missing or empty"},
		{"extractor's HTTP error", "/user?anonymous=1", nil, 401, "sign in first"},
		{"extractor's error", "/user", nil, 400, "cannot build the lock key from the request: {user} cannot be read"},
		{"form without a form body", "/pay", nil, 400, "cannot build the lock key from the request: {form.id} is missing (form fields are read from application/x-www-form-urlencoded bodies of POST, PUT and PATCH requests)"},
		{"parameter encoded twice", "/orders/a%252Fb/status", nil, 400, "cannot build the lock key from the request: {param.id} is percent-encoded twice (once decoded, it still holds a %XX escape)"},
		{"group's not-found route", "/api/nowhere", nil, 404, "Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			r := serve(e, req)
			if r.status != tc.status || r.message() != tc.message {
				t.Errorf("got %d %q, want %d %q", r.status, r.body, tc.status, tc.message)
			}
		})
	}
	for _, err := range errs.all() {
		if !errors.Is(err, guard.ErrInvalidKey) {
			t.Errorf("error %v does not match guard.ErrInvalidKey", err)
		}
	}
	// The group's own routes have the parameter, so its not-found routes do too.
	if r := serve(e, httptest.NewRequest(http.MethodGet, "/orders/9/nowhere", nil)); r.status != http.StatusNotFound {
		t.Errorf("group route not found: %d", r.status)
	}
}

// wireIDs are spellings of a value on the wire, with the value a server must read from
// each: percent-decoded exactly once.
var wireIDs = []struct{ wire, decoded string }{
	{"%257B", "%7B"},
	{"%2525", "%25"},
	{"%7B", "{"},
	{"%25", "%"},
	{"a%2Fb", "a/b"},
	{"%E4%BD%A0", "你"},
	{"x%20y", "x y"},
	{"%7Bx%7D%3A1", "{x}:1"},
}

// keyCase is one request of an exclusive-key table: while its handler holds the lock,
// want must be busy and every other key of the table free.
type keyCase struct {
	name string
	req  func(base string) *http.Request
	want string
}

// checkExclusiveKeys sends each case's request to a server whose handlers report the
// key they hold (heldKey) and wait; while a handler waits, it checks that the case's
// key is busy and that every look-alike — the other cases' keys and extra — is free.
func checkExclusiveKeys(t *testing.T, locker *guard.Locker, e *echo.Echo, held <-chan string, release chan<- struct{}, cases []keyCase, extra ...string) {
	t.Helper()
	base := serveHTTPTest(t, e)
	client := newClient(t)
	lookalikes := append([]string(nil), extra...)
	for _, tc := range cases {
		lookalikes = append(lookalikes, tc.want)
	}
	slices.Sort(lookalikes)
	lookalikes = slices.Compact(lookalikes)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			replied := make(chan reply, 1)
			go func() {
				req := tc.req(base)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					replied <- reply{}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				replied <- reply{status: resp.StatusCode, body: string(b)}
			}()
			select {
			case key := <-held:
				if key != tc.want {
					t.Errorf("request holds %q, want %q", key, tc.want)
				}
				for _, k := range lookalikes {
					if free := isFree(t, locker, k); free == (k == tc.want) {
						t.Errorf("while the request holds %q: key %q free = %v", tc.want, k, free)
					}
				}
				release <- struct{}{}
			case r := <-replied:
				t.Fatalf("the handler did not run: %d %q", r.status, r.body)
			}
			if r := <-replied; r.status != http.StatusOK {
				t.Errorf("status %d, body %q", r.status, r.body)
			}
		})
	}
}

// heldKey returns a handler that sends the key of its lease on held and waits for
// release.
func heldKey() (echo.HandlerFunc, <-chan string, chan<- struct{}) {
	held, release := make(chan string), make(chan struct{})
	return func(c echo.Context) error {
		le, ok := guard.LeaseFromContext(c.Request().Context())
		if !ok {
			return c.String(http.StatusInternalServerError, "no lease")
		}
		held <- le.Key()
		<-release
		return c.String(http.StatusOK, le.Key())
	}, held, release
}

func get(rawURL string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		panic(err)
	}
	return req
}

// twice reports whether a decoded value still holds a percent-escape, as "%7B" does.
func twice(decoded string) bool {
	d, err := url.PathUnescape(decoded)
	return err == nil && d != decoded
}

// A route parameter is decoded exactly once: each spelling locks its own decoded value
// and no look-alike, whether Echo matched the raw path (URL.RawPath set, as for a%2Fb)
// or the decoded one, and whether or not the app decodes parameters itself. A value that
// still holds a %XX escape once decoded (%257B is "%7B") is refused with 400 where the
// handler's c.Param, decoded, would read it as another value ("{"), and locked as "%7B"
// where it would not: on a path Go keeps raw (here because of a%2Fb in the last
// segment), when the app leaves c.Param as Echo set it.
func TestParamDecodedOnce(t *testing.T) {
	for _, app := range []struct {
		name    string
		pre     echo.MiddlewareFunc // runs after routing, before the Lock middleware
		decodes bool
	}{
		{"as Echo routes", nil, false},
		// A common Echo v4 idiom: decode every parameter value before the handlers.
		{"app decodes parameters", func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				vs := c.ParamValues()
				for i, v := range vs {
					if d, err := url.PathUnescape(v); err == nil {
						vs[i] = d
					}
				}
				c.SetParamValues(vs...)
				return next(c)
			}
		}, true},
	} {
		t.Run(app.name, func(t *testing.T) {
			srv := redistest.Start(t)
			locker, _ := newLocker(t, srv)
			handler, held, release := heldKey()
			e := newEcho(nil)
			if app.pre != nil {
				e.Use(app.pre)
			}
			e.GET("/acct/:id/op", handler, failFast(locker, "acct:{param.id}"))
			e.GET("/acct/:id/in/:where", handler, failFast(locker, "acct:{param.id}"))
			var cases []keyCase
			var extra []string
			for _, id := range wireIDs {
				extra = append(extra, "acct:"+id.wire)
				if d, err := url.PathUnescape(id.decoded); err == nil {
					extra = append(extra, "acct:"+d)
				}
				if twice(id.decoded) {
					t.Run(id.wire+" refused", func(t *testing.T) {
						r := serve(e, httptest.NewRequest(http.MethodGet, "/acct/"+id.wire+"/op", nil))
						if want := "cannot build the lock key from the request: {param.id} is percent-encoded twice (once decoded, it still holds a %XX escape)"; r.status != http.StatusBadRequest || r.message() != want {
							t.Errorf("got %d %q, want 400 %q", r.status, r.body, want)
						}
						if !app.decodes {
							return // locked on the raw path: a case of checkExclusiveKeys
						}
						r = serve(e, httptest.NewRequest(http.MethodGet, "/acct/"+id.wire+"/in/a%2Fb", nil))
						if r.status != http.StatusBadRequest {
							t.Errorf("on a raw path, with c.Param decoded by the app: got %d %q, want 400", r.status, r.body)
						}
					})
					if app.decodes {
						continue
					}
					cases = append(cases, keyCase{id.wire + " on a raw path", func(base string) *http.Request {
						return get(base + "/acct/" + id.wire + "/in/a%2Fb")
					}, "acct:" + id.decoded})
					continue
				}
				cases = append(cases, keyCase{id.wire, func(base string) *http.Request {
					return get(base + "/acct/" + id.wire + "/op")
				}, "acct:" + id.decoded})
			}
			checkExclusiveKeys(t, locker, e, held, release, cases, extra...)
		})
	}
}

// Query parameters and form fields are decoded exactly once, headers never; {path} and
// the wildcard {param.*} decode every segment once and keep a '%' or '/' inside a
// segment encoded, so that a%2Fb and a/b, or %2525 and %25, stay apart. Each spelling
// locks its own key and no look-alike.
func TestSourcesDecodedOnce(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	handler, held, release := heldKey()
	e := newEcho(nil)
	e.GET("/q", handler, failFast(locker, "q:{query.x}"))
	e.GET("/h", handler, failFast(locker, "h:{header.X-Id}"))
	e.POST("/f", handler, failFast(locker, "f:{form.x}"))
	e.GET("/p/*", handler, failFast(locker, "path:{path}"))
	e.GET("/w/x*", handler, failFast(locker, "w:{param.*}"))

	var query, header, form []keyCase
	var extra []string
	for _, id := range wireIDs {
		query = append(query, keyCase{id.wire, func(base string) *http.Request {
			return get(base + "/q?x=" + id.wire)
		}, "q:" + id.decoded})
		header = append(header, keyCase{id.wire, func(base string) *http.Request {
			req := get(base + "/h")
			req.Header.Set("X-Id", id.wire)
			return req
		}, "h:" + id.wire})
		form = append(form, keyCase{id.wire, func(base string) *http.Request {
			req, err := http.NewRequest(http.MethodPost, base+"/f", strings.NewReader("x="+id.wire))
			if err != nil {
				panic(err)
			}
			req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm)
			return req
		}, "f:" + id.decoded})
		for _, p := range []string{"q:", "h:", "f:"} {
			extra = append(extra, p+id.wire, p+id.decoded)
		}
	}
	t.Run("query", func(t *testing.T) { checkExclusiveKeys(t, locker, e, held, release, query, extra...) })
	t.Run("header", func(t *testing.T) { checkExclusiveKeys(t, locker, e, held, release, header, extra...) })
	t.Run("form", func(t *testing.T) { checkExclusiveKeys(t, locker, e, held, release, form, extra...) })

	paths := []struct{ wire, key string }{
		{"%257B", "%257B"},
		{"%2525", "%2525"},
		{"%7B", "{"},
		{"%25", "%25"},
		{"a%2Fb", "a%2Fb"},
		{"a/b", "a/b"},
		{"%E4%BD%A0", "你"},
		{"x%20y", "x y"},
		{"%7Bx%7D%3A1", "{x}:1"},
		{"%257B/a%2Fb/%25", "%257B/a%2Fb/%25"},
		{"%7B/a/b/%25", "{/a/b/%25"},
	}
	var path, wildcard []keyCase
	extra = extra[:0]
	for _, p := range paths {
		path = append(path, keyCase{p.wire, func(base string) *http.Request {
			return get(base + "/p/" + p.wire)
		}, "path:/p/" + p.key})
		if p.wire == "%257B" || p.wire == "%2525" {
			// Go keeps no raw path for these, so c.Param("*") gives "%7B" or "%25",
			// as it does for a raw path's %7B or %25: refused, as TestParamDecodedOnce
			// shows for a named parameter.
			t.Run("wildcard "+p.wire+" refused", func(t *testing.T) {
				if r := serve(e, httptest.NewRequest(http.MethodGet, "/w/x"+p.wire, nil)); r.status != http.StatusBadRequest {
					t.Errorf("got %d %q, want 400", r.status, r.body)
				}
			})
		} else {
			wildcard = append(wildcard, keyCase{p.wire, func(base string) *http.Request {
				return get(base + "/w/x" + p.wire)
			}, "w:" + p.key})
		}
		if d, err := url.PathUnescape(p.wire); err == nil {
			extra = append(extra, "path:/p/"+d, "w:"+d)
		}
		extra = append(extra, "path:/p/"+p.wire, "w:"+p.wire)
	}
	t.Run("path", func(t *testing.T) { checkExclusiveKeys(t, locker, e, held, release, path, extra...) })
	t.Run("wildcard", func(t *testing.T) { checkExclusiveKeys(t, locker, e, held, release, wildcard, extra...) })
}

// A parameter is found at its place in the route, after literal text in its segment
// and after escaped colons; a path rewritten before routing is read as rewritten, and
// one changed after routing, which the route no longer fits, builds no key.
func TestParamPlaces(t *testing.T) {
	srv := redistest.Start(t)
	locker, _ := newLocker(t, srv)
	e := newEcho(nil)
	e.Pre(echomw.Rewrite(map[string]string{"/old/*": "/acct/$1/op"}))
	e.GET("/acct/:id/op", keyOf, middleware.Lock(locker, "acct:{param.id}"))
	e.GET(`/files/v:ver/\:raw/:name`, keyOf, middleware.Lock(locker, "file:{param.name}@{param.ver}"))
	e.GET("/moved/:id", keyOf, func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Request().URL.Path, c.Request().URL.RawPath = "/elsewhere", ""
			return next(c)
		}
	}, middleware.Lock(locker, "acct:{param.id}"))

	for _, tc := range []struct {
		path   string
		status int
		key    string
	}{
		{"/old/%7B", http.StatusOK, "acct:{"},
		{"/old/%257B", http.StatusBadRequest, ""}, // read as rewritten: c.Param gives "%7B"
		{"/old/a%2Fb", http.StatusOK, "acct:a/b"},
		{"/files/v%32/:raw/a%2Fb", http.StatusOK, "file:a/b@2"},
		{"/files/v%25/:raw/%40", http.StatusOK, "file:%40@%25"}, // the template escapes % and @
		{"/moved/1", http.StatusBadRequest, ""},
	} {
		r := serve(e, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if r.status != tc.status || (tc.key != "" && r.body != tc.key) {
			t.Errorf("%s: got %d %q, want %d %q", tc.path, r.status, r.body, tc.status, tc.key)
		}
	}
}

// A rendered key that is empty or longer than the Locker's MaxKeyLen is one mistake
// with one error: the ErrorHandler gets guard.ErrInvalidKey (never ErrInvalidConfig)
// and the client 400.
func TestInvalidKeyIsBadRequest(t *testing.T) {
	srv := redistest.Start(t)
	const maxKeyLen = 64
	locker, _ := newLocker(t, srv, guard.MaxKeyLen(maxKeyLen))
	var handled errorLog
	e := newEcho(nil)
	e.GET("/tenant", keyOf, middleware.LockWithConfig(middleware.LockConfig{
		Locker: locker,
		Key:    "{header.X-Tenant}",
		ErrorHandler: func(c echo.Context, err error) error {
			handled.add(err)
			return middleware.DefaultLockConfig.ErrorHandler(c, err)
		},
	}))
	for _, tc := range []struct {
		name, tenant string
	}{
		{"empty", ""},
		{"one byte too long", strings.Repeat("t", maxKeyLen+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(handled.all())
			req := httptest.NewRequest(http.MethodGet, "/tenant", nil)
			req.Header.Set("X-Tenant", tc.tenant)
			if r := serve(e, req); r.status != http.StatusBadRequest {
				t.Errorf("got %d %q, want 400", r.status, r.body)
			}
			errs := handled.all()[before:]
			if len(errs) != 1 {
				t.Fatalf("ErrorHandler called %d times, want once", len(errs))
			}
			if err := errs[0]; !errors.Is(err, guard.ErrInvalidKey) || errors.Is(err, guard.ErrInvalidConfig) {
				t.Errorf("ErrorHandler got %v: matches ErrInvalidKey %v, ErrInvalidConfig %v, want true, false",
					err, errors.Is(err, guard.ErrInvalidKey), errors.Is(err, guard.ErrInvalidConfig))
			}
		})
	}
	if r := serve(e, func() *http.Request {
		req := httptest.NewRequest(http.MethodGet, "/tenant", nil)
		req.Header.Set("X-Tenant", strings.Repeat("t", maxKeyLen))
		return req
	}()); r.status != http.StatusOK {
		t.Errorf("a key of MaxKeyLen bytes: got %d %q, want 200", r.status, r.body)
	}
}
