package interceptor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/keyfunc"
)

// rule is a Rule compiled for one Locker.
type rule struct {
	method   string // as given: a full method name or a pattern
	prefix   string // for patterns, the text before "*"
	key      *keyfunc.Template[*call]
	more     []*keyfunc.Template[*call] // further keys taken with key as one lock (MoreKeys)
	paths    []*protoPath               // the {req...} placeholders of key and more
	failOpen bool                       // the rule's, or the interceptor's (WithFailOpen)
	locker   *guard.Locker
	opts     []guard.Option // the guard options of the rule's calls but their key
}

// build sets r's lock on locker with opts, which name the lock and set its kind, TTL and
// waiting, and checks them against locker; the Locker is set last, so that opts cannot
// override it. A fail-open rule does not wait out a Redis outage: it runs the handler
// unlocked at once.
func (r *rule) build(locker *guard.Locker, opts []guard.Option) error {
	if r.failOpen {
		opts = append(opts, guard.WaitOutages(false))
	}
	r.locker, r.opts = locker, append(opts, guard.Use(locker))
	// Locker.Run checks its options before it looks at its context, which here is done
	// already: no Redis call.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.run(ctx, "check", nil, func(context.Context) error { return nil }); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// run calls fn under r's lock on key, with more (rendered from MoreKeys) as one lock,
// and reports whether fn ran.
func (r *rule) run(ctx context.Context, key string, more []string, fn func(context.Context) error) (ran bool, err error) {
	if len(more) > 0 {
		return r.locker.Run(ctx, fn, append(r.opts[:len(r.opts):len(r.opts)], guard.RawKeys(append([]string{key}, more...)...))...)
	}
	return r.locker.Run(ctx, fn, append(r.opts[:len(r.opts):len(r.opts)], guard.RawKey(key))...)
}

// parseMore parses the further key templates of a rule or an option into r, reporting
// the index and the error of the first that does not parse.
func (r *rule) parseMore(texts []string) (int, error) {
	for i, text := range texts {
		t, err := keyfunc.Parse(text, templateSources(text, &r.paths))
		if err != nil {
			return i, err
		}
		r.more = append(r.more, t)
	}
	return -1, nil
}

// render renders r's keys for c: the key, and those of MoreKeys (nil when none). On an
// error it returns the template that failed.
func (r *rule) render(c *call) (string, []string, *keyfunc.Template[*call], error) {
	key, err := r.key.Render(c)
	if err != nil {
		return "", nil, r.key, err
	}
	if len(r.more) == 0 {
		return key, nil, nil, nil
	}
	more := make([]string, len(r.more))
	for i, t := range r.more {
		if more[i], err = t.Render(c); err != nil {
			return "", nil, t, err
		}
	}
	return key, more, nil, nil
}

// ruleSet finds the rule of a method: a full method name first, then the longest pattern.
type ruleSet struct {
	exact    map[string]*rule
	patterns []*rule // longest prefix first
}

func (rs *ruleSet) match(method string) *rule {
	if r := rs.exact[method]; r != nil {
		return r
	}
	for _, r := range rs.patterns {
		if strings.HasPrefix(method, r.prefix) {
			return r
		}
	}
	return nil
}

// compileRules checks rules and sets their locks on locker. The {req...} paths of rules
// for methods that files describes are checked against their request types.
func compileRules(locker *guard.Locker, rules []Rule, files *protoregistry.Files, failOpen bool) (*ruleSet, error) {
	rs := &ruleSet{exact: make(map[string]*rule)}
	seen := make(map[string]bool)
	for i, rl := range rules {
		fail := func(field, reason string, err error) error {
			return fmt.Errorf("interceptor: rule %d (%q): %w", i, rl.Method, &guard.ConfigError{Field: "Rule." + field, Reason: reason, Err: err})
		}
		r := &rule{method: rl.Method, failOpen: failOpen || rl.FailOpen}
		pattern, problem := checkMethod(rl.Method)
		if problem != "" {
			return nil, fail("Method", problem, nil)
		}
		if seen[rl.Method] {
			return nil, fail("Method", "another rule has the same Method", nil)
		}
		seen[rl.Method] = true
		if rl.Key == "" {
			return nil, fail("Key", "required", nil)
		}
		var err error
		if r.key, err = keyfunc.Parse(rl.Key, templateSources(rl.Key, &r.paths)); err != nil {
			return nil, fail("Key", strings.TrimPrefix(err.Error(), "keyfunc: "), err)
		}
		if j, err := r.parseMore(rl.MoreKeys); err != nil {
			return nil, fail(fmt.Sprintf("MoreKeys[%d]", j), strings.TrimPrefix(err.Error(), "keyfunc: "), err)
		}
		// The lock is named after the rule's method (or pattern) in telemetry, unless the
		// rule's options name it otherwise.
		if err := r.build(locker, append([]guard.Option{guard.Name(rl.Method)}, rl.Options...)); err != nil {
			return nil, fmt.Errorf("interceptor: rule %d (%q): %w", i, rl.Method, err)
		}
		if pattern {
			r.prefix = strings.TrimSuffix(rl.Method, "*")
			rs.patterns = append(rs.patterns, r)
		} else {
			rs.exact[rl.Method] = r
		}
	}
	slices.SortStableFunc(rs.patterns, func(a, b *rule) int { return len(b.prefix) - len(a.prefix) })
	if err := rs.checkRegistered(files); err != nil {
		return nil, err
	}
	return rs, nil
}

// checkMethod reports whether m is a pattern, or what is wrong with it.
func checkMethod(m string) (pattern bool, problem string) {
	switch {
	case m == "":
		return false, "required"
	case m == "*":
		return true, ""
	case !strings.HasPrefix(m, "/"):
		return false, `must start with "/", as in "/pkg.Service/Method" or "/pkg.Service/*"`
	case strings.Count(m, "*") > 1 || strings.Contains(m[:len(m)-1], "*"):
		return false, `"*" may only end a pattern`
	case strings.HasSuffix(m, "*"):
		return true, ""
	}
	svc, name, ok := strings.Cut(m[1:], "/")
	if !ok || svc == "" || name == "" || strings.Contains(name, "/") {
		return false, `a full method name has the form "/pkg.Service/Method"`
	}
	return false, ""
}

// checkRegistered checks the {req...} paths of rules against the request types of the
// methods they govern, for every method whose descriptor files knows: a method named by
// a rule, or a method of a service named by a "/pkg.Service/*" rule. Other methods are
// checked on their first call.
func (rs *ruleSet) checkRegistered(files *protoregistry.Files) error {
	var methods []protoreflect.MethodDescriptor
	for name := range rs.exact {
		svc, m, _ := strings.Cut(name[1:], "/")
		if d, err := files.FindDescriptorByName(protoreflect.FullName(svc + "." + m)); err == nil {
			if md, ok := d.(protoreflect.MethodDescriptor); ok {
				methods = append(methods, md)
			}
		}
	}
	for _, r := range rs.patterns {
		svc, rest, ok := strings.Cut(strings.TrimPrefix(r.prefix, "/"), "/")
		if !ok || rest != "" || !strings.HasPrefix(r.prefix, "/") {
			continue
		}
		if d, err := files.FindDescriptorByName(protoreflect.FullName(svc)); err == nil {
			if sd, ok := d.(protoreflect.ServiceDescriptor); ok {
				for i := 0; i < sd.Methods().Len(); i++ {
					methods = append(methods, sd.Methods().Get(i))
				}
			}
		}
	}
	for _, md := range methods {
		full := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
		r := rs.match(full)
		if r == nil || len(r.paths) == 0 {
			continue
		}
		var err error
		if md.IsStreamingClient() || md.IsStreamingServer() {
			err = errNoRequest
		}
		for _, p := range r.paths {
			if err == nil {
				err = p.accessor(md.Input()).err
			}
		}
		if err != nil {
			return fmt.Errorf("interceptor: rule %q, method %s: %w", r.method, full, err)
		}
	}
	return nil
}
