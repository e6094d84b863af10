package keyfunc

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/guardkit/guardkit/internal/suggest"
)

// noFieldError reports a path segment that names no field of a struct, with the
// closest field name when one is close enough to be a likely typo.
type noFieldError struct {
	seg     string
	in      reflect.Type
	closest string // "" when none is close
}

func (e *noFieldError) Error() string {
	msg := e.plain()
	if e.closest != "" {
		msg += fmt.Sprintf("; did you mean %q?", e.closest)
	}
	return msg
}

// plain is the message without the suggestion.
func (e *noFieldError) plain() string {
	return fmt.Sprintf("keyfunc: no field %q in %s", e.seg, e.in)
}

// newNoFieldError builds the error for seg in struct t, finding the closest name among
// t's exported fields (Go names, key and json tags, promoted fields included).
func newNoFieldError(t reflect.Type, seg string) error {
	var names []string
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous && f.Type.Kind() == reflect.Struct {
			continue
		}
		for _, name := range []string{keyTagName(f), goName(f), jsonTagName(f)} {
			if name != "" && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return &noFieldError{seg: seg, in: t, closest: suggest.Closest(seg, names)}
}

// suggestion is the placeholder, without braces, that a placeholder that failed to parse
// or bind most likely meant, or "". For a known source it corrects a misspelt field of the
// path ({req.Sku} → {req.SKU}); for an unknown source name, it tries the closest known
// name ({parm.id} → {param.id}), then the whole text as a path of each source ({SKU} →
// {req.SKU}, {order_id} → {req.order_id}) under each source that checks its paths (not
// one, such as a header's, that takes any name), and suggests a reading only when
// exactly one binds.
func suggestion[In any](sources Sources[In], source, path string) string {
	var found []string
	// try reads p under source name; a misspelt field is corrected, or, when the
	// reading is a guess already (exact is false), only a field's case.
	try := func(name, p string, exact bool) {
		get, err := sources[name](p)
		var nf *noFieldError
		switch {
		case err == nil && get != nil:
			found = append(found, strings.TrimSuffix(name+"."+p, "."))
		case errors.As(err, &nf) && nf.closest != "" && (exact || strings.EqualFold(nf.closest, nf.seg)):
			found = append(found, name+"."+replaceSeg(p, nf.seg, nf.closest))
		}
	}
	if sources[source] != nil {
		if path != "" {
			try(source, path, true)
		}
	} else {
		names := make([]string, 0, len(sources))
		for name, src := range sources {
			if src != nil {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		if alt := suggest.Closest(source, names); alt != "" {
			try(alt, path, false)
		}
		if len(found) == 0 {
			whole := source
			if path != "" {
				whole += "." + path
			}
			for _, name := range names {
				if get, err := sources[name](probe); err != nil || get == nil {
					try(name, whole, false) // a source that takes any name would be a guess
				}
			}
		}
	}
	if len(found) != 1 || found[0] == strings.TrimSuffix(source+"."+path, ".") {
		return ""
	}
	return found[0]
}

// probe is a path no source that checks its paths binds.
const probe = "keyfunc_probe_of_a_name_no_source_has"

// replaceSeg replaces the first segment of path equal to seg with alt.
func replaceSeg(path, seg, alt string) string {
	segs := strings.Split(path, ".")
	for i, s := range segs {
		if s == seg {
			segs[i] = alt
			break
		}
	}
	return strings.Join(segs, ".")
}
