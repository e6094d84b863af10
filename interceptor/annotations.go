package interceptor

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/interceptor/lockpb"
	"github.com/guardkit/guardkit/keyfunc"
)

// optionName is the method option's name in .proto files and in errors.
const optionName = "(guardkit.v1.lock)"

// optionError is a mistake in a method's (guardkit.v1.lock) option. Its text names
// the method and the option's field; it unwraps to a *guard.ConfigError.
type optionError struct {
	method string // the full method name
	field  string // the option's field, as in "key"; "" for the option as a whole
	reason string
	err    error
}

func (e *optionError) Error() string {
	name := optionName
	if e.field != "" {
		name += "." + e.field
	}
	return fmt.Sprintf("interceptor: %s: option %s: %s", e.method, name, e.reason)
}

func (e *optionError) Unwrap() error { return e.err }

// compileAnnotations builds a rule for every method of files that carries the
// (guardkit.v1.lock) option, by full method name. The methods are compiled in the
// order of their names, so that the same mistake is reported first on every start.
func compileAnnotations(locker *guard.Locker, files *protoregistry.Files, failOpen bool) (map[string]*rule, error) {
	type annotated struct {
		md   protoreflect.MethodDescriptor
		lock *lockpb.Lock
	}
	var found []annotated
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Services().Len(); i++ {
			ms := fd.Services().Get(i).Methods()
			for j := 0; j < ms.Len(); j++ {
				if lock := lockOption(ms.Get(j)); lock != nil {
					found = append(found, annotated{md: ms.Get(j), lock: lock})
				}
			}
		}
		return true
	})
	slices.SortFunc(found, func(a, b annotated) int { return strings.Compare(string(a.md.FullName()), string(b.md.FullName())) })
	rules := make(map[string]*rule, len(found))
	for _, a := range found {
		r, err := compileAnnotation(locker, a.md, a.lock, failOpen)
		if err != nil {
			return nil, err
		}
		rules[r.method] = r
	}
	return rules, nil
}

// lockOption returns md's (guardkit.v1.lock) option, or nil when it has none.
func lockOption(md protoreflect.MethodDescriptor) *lockpb.Lock {
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil {
		return nil
	}
	if !proto.HasExtension(opts, lockpb.E_Lock) {
		// Options parsed where lockpb's extension was not known keep the option among
		// their unknown fields; parse them again now that it is.
		if len(opts.ProtoReflect().GetUnknown()) == 0 {
			return nil
		}
		b, err := proto.Marshal(opts)
		reparsed := new(descriptorpb.MethodOptions)
		if err != nil || proto.Unmarshal(b, reparsed) != nil || !proto.HasExtension(reparsed, lockpb.E_Lock) {
			return nil
		}
		opts = reparsed
	}
	lock, _ := proto.GetExtension(opts, lockpb.E_Lock).(*lockpb.Lock)
	return lock
}

// compileAnnotation checks md's option as compileRules checks a Rule and builds its
// rule on locker.
func compileAnnotation(locker *guard.Locker, md protoreflect.MethodDescriptor, lock *lockpb.Lock, failOpen bool) (*rule, error) {
	method := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
	fail := func(field, reason string, err error) error {
		return &optionError{method: method, field: field, reason: reason,
			err: &guard.ConfigError{Field: optionName + "." + field, Reason: reason, Err: err}}
	}
	r := &rule{method: method, failOpen: failOpen || lock.GetFailOpen()}
	text := lock.GetKey()
	if text == "" {
		return nil, fail("key", "required", nil)
	}
	var err error
	if r.key, err = keyfunc.Parse(text, templateSources(text, &r.paths)); err != nil {
		return nil, fail("key", strings.TrimPrefix(err.Error(), "keyfunc: "), err)
	}
	if j, err := r.parseMore(lock.GetMoreKeys()); err != nil {
		return nil, fail(fmt.Sprintf("more_keys[%d]", j), strings.TrimPrefix(err.Error(), "keyfunc: "), err)
	}
	for _, p := range r.paths {
		var perr error
		if md.IsStreamingClient() || md.IsStreamingServer() {
			perr = errNoRequest
		} else {
			perr = p.accessor(md.Input()).err
		}
		if perr != nil {
			var ce *guard.ConfigError
			errors.As(perr, &ce)
			return nil, fail("key", ce.Reason, perr)
		}
	}

	name := method
	if lock.GetName() != "" {
		name = lock.GetName()
	}
	opts := []guard.Option{guard.Name(name)}
	if lock.Ttl != nil {
		ttl, reason := duration(lock.Ttl)
		if reason == "" && ttl <= 0 {
			reason = fmt.Sprintf("must be > 0 when set, got %s", ttl)
		}
		if reason != "" {
			return nil, fail("ttl", reason, nil)
		}
		opts = append(opts, guard.TTL(ttl))
	}
	switch w := lock.Wait.(type) {
	case *lockpb.Lock_MaxWait:
		d, reason := duration(w.MaxWait)
		if reason == "" && d < 0 {
			reason = fmt.Sprintf("must be ≥ 0, got %s", d)
		}
		if reason != "" {
			return nil, fail("max_wait", reason, nil)
		}
		if d == 0 {
			opts = append(opts, guard.Retry(guard.NoRetry()))
		} else {
			opts = append(opts, guard.Retry(guard.MaxWait(d, nil)))
		}
	case *lockpb.Lock_FailFast:
		if w.FailFast {
			opts = append(opts, guard.Retry(guard.NoRetry()))
		}
	}
	kind, reason := kindOption(lock)
	if reason != "" {
		field := "kind"
		if lock.GetPermits() != 0 || lock.GetKind() == lockpb.Kind_KIND_SEMAPHORE {
			field = "permits"
		}
		return nil, fail(field, reason, nil)
	}
	opts = append(opts, kind...)
	if err := r.build(locker, opts); err != nil {
		// guard checks the settings against the Locker's own: a TTL too short for its
		// renewal period, drift margin or replica wait.
		field := ""
		var ce *guard.ConfigError
		if errors.As(err, &ce) {
			switch ce.Field {
			case "TTL", "Renewal", "SyncReplicas":
				field = "ttl"
			case "Retry":
				field = "max_wait"
			}
		}
		return nil, &optionError{method: method, field: field, reason: err.Error(), err: err}
	}
	return r, nil
}

// kindOption returns the guard options of the lock's kind and permits (none for an
// exclusive lock, guard's default), or says why they do not go together.
func kindOption(lock *lockpb.Lock) ([]guard.Option, string) {
	k, n := lock.GetKind(), lock.GetPermits()
	if k != lockpb.Kind_KIND_SEMAPHORE && n != 0 {
		return nil, fmt.Sprintf("is for KIND_SEMAPHORE only, got %d with %s", n, k)
	}
	switch k {
	case lockpb.Kind_KIND_EXCLUSIVE:
		return nil, ""
	case lockpb.Kind_KIND_READ:
		return []guard.Option{guard.Read()}, ""
	case lockpb.Kind_KIND_WRITE:
		return []guard.Option{guard.Write()}, ""
	case lockpb.Kind_KIND_FAIR:
		return []guard.Option{guard.Fair()}, ""
	case lockpb.Kind_KIND_SEMAPHORE:
		if n < 1 || n > math.MaxInt32 {
			return nil, fmt.Sprintf("must be ≥ 1 with KIND_SEMAPHORE, got %d", n)
		}
		return []guard.Option{guard.Permits(int(n))}, ""
	}
	return nil, fmt.Sprintf("unknown kind %d", k)
}

// duration converts d, or says why it cannot be a time.Duration.
func duration(d *durationpb.Duration) (time.Duration, string) {
	if err := d.CheckValid(); err != nil {
		return 0, strings.TrimPrefix(err.Error(), "proto: ")
	}
	if limit := int64(math.MaxInt64 / time.Second); d.GetSeconds() > limit || d.GetSeconds() < -limit {
		return 0, fmt.Sprintf("%ds is beyond the range of a time.Duration", d.GetSeconds())
	}
	return d.AsDuration(), ""
}

// templateSources are the sources of the key template text of a Rule or an option:
// req, md and method, and a bare field for each other placeholder's name, so that
// {from_account} means {req.from_account} and {to.id} means {req.to.id}.
func templateSources(text string, paths *[]*protoPath) keyfunc.Sources[*call] {
	srcs := sources(paths)
	for _, name := range placeholderSources(text) {
		if srcs[name] == nil {
			srcs[name] = bareField(name, paths)
		}
	}
	return srcs
}

// bareField is the source of a placeholder {name...} whose source is not one of
// req, md and method: {from_account} means {req.from_account} and {to.id} means
// {req.to.id}.
func bareField(name string, paths *[]*protoPath) keyfunc.Source[*call] {
	req := reqSource(paths)
	return func(path string) (keyfunc.Getter[*call], error) {
		if path != "" {
			return req(name + "." + path)
		}
		return req(name)
	}
}

// placeholderSources returns the source names of text's placeholders: the text
// after each "{" that is not "{{", up to the first byte that cannot be in a source
// name. A malformed text is left for keyfunc.Parse to report.
func placeholderSources(text string) []string {
	var names []string
	for i := 0; i < len(text); i++ {
		if text[i] != '{' {
			continue
		}
		if i+1 < len(text) && text[i+1] == '{' {
			i++
			continue
		}
		j := i + 1
		for j < len(text) && ('a' <= text[j] && text[j] <= 'z' || '0' <= text[j] && text[j] <= '9' || text[j] == '_') {
			j++
		}
		if j > i+1 {
			names = append(names, text[i+1:j])
		}
		i = j - 1
	}
	return names
}
