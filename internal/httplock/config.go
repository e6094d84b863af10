package httplock

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/keyfunc"
)

// Config is the part of a Lock middleware's LockConfig that both middlewares read the
// same way; its fields are the LockConfig fields of the same names.
type Config struct {
	Locker   *guard.Locker
	Key      string
	MoreKeys []string
	TTL      time.Duration
	MaxWait  time.Duration
	Options  []guard.Option
	FailOpen bool
}

// Invalid names the configuration field that is wrong and says why. Each middleware
// turns it into its own ConfigError.
type Invalid struct {
	// Field is the LockConfig field, such as "Key" or "TTL".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, when there is one: the key template's
	// *keyfunc.SyntaxError or *keyfunc.BindError, or guard's *guard.ConfigError.
	Err error
}

// Prepare checks c, in this order: Locker and Key are required, TTL is not negative,
// the extractors' names are free (see [WithExtractors]), the key templates (Key, then
// MoreKeys) parse against builtin and the extractors, and guard accepts the options on
// the Locker (Redis is not called). It returns the key template, those of MoreKeys and
// every request's guard options, or what is wrong.
func Prepare[T any](c Config, builtin keyfunc.Sources[T], extractors map[string]func(T) (string, error)) (*keyfunc.Template[T], []*keyfunc.Template[T], *Options, *Invalid) {
	tpl, opts, bad := prepare(c, builtin, extractors)
	if bad != nil {
		return nil, nil, nil, bad
	}
	var more []*keyfunc.Template[T]
	if len(c.MoreKeys) > 0 {
		sources, _ := WithExtractors(builtin, extractors) // checked by prepare
		for i, text := range c.MoreKeys {
			t, err := keyfunc.Parse(text, sources)
			if err != nil {
				return nil, nil, nil, &Invalid{Field: fmt.Sprintf("MoreKeys[%d]", i), Reason: strings.TrimPrefix(err.Error(), "keyfunc: "), Err: err}
			}
			more = append(more, t)
		}
	}
	return tpl, more, opts, nil
}

// prepare is Prepare for Key alone.
func prepare[T any](c Config, builtin keyfunc.Sources[T], extractors map[string]func(T) (string, error)) (*keyfunc.Template[T], *Options, *Invalid) {
	if c.Locker == nil {
		return nil, nil, &Invalid{Field: "Locker", Reason: "required"}
	}
	if c.Key == "" {
		return nil, nil, &Invalid{Field: "Key", Reason: "required"}
	}
	if c.TTL < 0 {
		return nil, nil, &Invalid{Field: "TTL", Reason: fmt.Sprintf("must be ≥ 0 (0 means the Locker's TTL), got %s", c.TTL)}
	}
	sources, bad := WithExtractors(builtin, extractors)
	if bad != nil {
		return nil, nil, bad
	}
	tpl, err := keyfunc.Parse(c.Key, sources)
	if err != nil {
		return nil, nil, &Invalid{Field: "Key", Reason: strings.TrimPrefix(err.Error(), "keyfunc: "), Err: err}
	}
	opts, bad := c.guardOptions()
	if bad != nil {
		return nil, nil, bad
	}
	return tpl, &Options{opts: opts}, nil
}

// guardOptions returns the guard options of every request but its key, checked against
// the Locker: guard's Locker.Run owns acquisition, renewal, release (on panic too) and the
// detection of lost leases.
func (c Config) guardOptions() ([]guard.Option, *Invalid) {
	var own []guard.Option
	if c.TTL > 0 {
		own = append(own, guard.TTL(c.TTL))
	}
	// MaxWait 0 adds no Retry, so that guard's rule applies: the Locker's Retry from
	// New, else at most 5s.
	switch {
	case c.MaxWait > 0:
		own = append(own, guard.Retry(guard.MaxWait(c.MaxWait, nil)))
	case c.MaxWait < 0:
		own = append(own, guard.Retry(guard.MaxWait(-1, nil)))
	}
	fixed := []guard.Option{guard.Use(c.Locker)}
	if c.FailOpen { // run the handler unlocked at once rather than wait out an outage
		fixed = append(fixed, guard.WaitOutages(false))
	}
	opts := slices.Concat(own, c.Options, fixed)
	err := check(c.Locker, opts)
	if err == nil {
		return opts, nil
	}
	// Name the field that made guard refuse: TTL (against the Locker's renewal
	// settings) when it fails on its own, Options otherwise.
	field := "Options"
	if len(c.Options) == 0 {
		field = "TTL"
	} else if ownErr := check(c.Locker, slices.Concat(own, fixed)); ownErr != nil {
		field, err = "TTL", ownErr
	}
	reason := strings.TrimPrefix(err.Error(), "guard: ")
	var gce *guard.ConfigError
	if errors.As(err, &gce) {
		reason = "guard refused " + gce.Field + ": " + gce.Reason
	}
	return nil, &Invalid{Field: field, Reason: reason, Err: err}
}

// check returns what guard finds wrong with opts on l, without a Redis call: Locker.Run
// checks its options before it looks at its context, which here is done already.
func check(l *guard.Locker, opts []guard.Option) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.Run(ctx, func(context.Context) error { return nil }, WithKey(opts, "check")...)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// WithKey returns opts with the lock's key added, leaving opts, which requests share,
// as it is.
func WithKey(opts []guard.Option, key string) []guard.Option {
	return append(opts[:len(opts):len(opts)], guard.RawKey(key))
}

// WithKeys returns opts with the lock's keys added, key and more taken as one lock
// (guard.RawKeys), or key alone when more is empty, leaving opts as it is.
func WithKeys(opts []guard.Option, key string, more []string) []guard.Option {
	if len(more) == 0 {
		return WithKey(opts, key)
	}
	return append(opts[:len(opts):len(opts)], guard.RawKeys(append([]string{key}, more...)...))
}

// RenderMore renders the templates of MoreKeys for v: nil when there are none.
func RenderMore[T any](more []*keyfunc.Template[T], v T) ([]string, *keyfunc.Template[T], error) {
	if len(more) == 0 {
		return nil, nil, nil
	}
	keys := make([]string, len(more))
	for i, t := range more {
		k, err := t.Render(v)
		if err != nil {
			return nil, t, err
		}
		keys[i] = k
	}
	return keys, nil, nil
}

// Options are every request's guard options but its key, shared by the routes of one
// Lock middleware.
type Options struct {
	opts   []guard.Option
	routes sync.Map // route → opts naming the lock after route
}

// For returns the guard options of a request to route whose lock is key, with more
// (MoreKeys) taken with it as one lock. Its lock's
// telemetry is named after route (guard.Name) unless the configuration's Options name it
// otherwise; the options of each route are made once.
func (o *Options) For(route, key string, more []string) []guard.Option {
	if route == "" {
		return WithKeys(o.opts, key, more)
	}
	if r, ok := o.routes.Load(route); ok {
		return WithKeys(r.([]guard.Option), key, more)
	}
	r, _ := o.routes.LoadOrStore(route, append([]guard.Option{guard.Name(route)}, o.opts...))
	return WithKeys(r.([]guard.Option), key, more)
}

// sourceName is the syntax of a source name in a key template.
var sourceName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// WithExtractors returns builtin plus one bare-placeholder source per extractor:
// extractors["user"] is read by {user}. Names must match [a-z][a-z0-9_]* and must not be
// a name of builtin, and no extractor may be nil; the first problem in name order is
// reported, for the field Extractors. Without extractors it returns builtin itself.
func WithExtractors[T any](builtin keyfunc.Sources[T], extractors map[string]func(T) (string, error)) (keyfunc.Sources[T], *Invalid) {
	if len(extractors) == 0 {
		return builtin, nil
	}
	sources := make(keyfunc.Sources[T], len(builtin)+len(extractors))
	for name, src := range builtin {
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
			return nil, &Invalid{Field: "Extractors", Reason: fmt.Sprintf("name %q must match [a-z][a-z0-9_]*", name)}
		case builtin[name] != nil:
			return nil, &Invalid{Field: "Extractors", Reason: fmt.Sprintf("name %q is a built-in source", name)}
		case ex == nil:
			return nil, &Invalid{Field: "Extractors", Reason: fmt.Sprintf("%q is nil", name)}
		}
		sources[name] = func(path string) (keyfunc.Getter[T], error) {
			if path != "" {
				return nil, errors.New("an extractor takes no path; write it as {name}")
			}
			return keyfunc.Getter[T](ex), nil
		}
	}
	return sources, nil
}

// HeaderSource is the source of {header.Name}: the first value of the request header
// that header returns, whose name is canonicalized once, when the template is parsed,
// rather than on every request.
func HeaderSource[T any](header func(T) http.Header) keyfunc.Source[T] {
	return func(name string) (keyfunc.Getter[T], error) {
		if name == "" {
			return nil, errors.New("a header needs a name, as in {header.X-Tenant}")
		}
		canonical := textproto.CanonicalMIMEHeaderKey(name)
		return func(in T) (string, error) {
			vs := header(in)[canonical]
			if len(vs) == 0 {
				return "", keyfunc.ErrMissing
			}
			return vs[0], nil
		}, nil
	}
}
