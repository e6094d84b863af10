package keyfunc

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Field returns a Getter that reads the value at path from a T and formats
// it as key text. The path is resolved against T once, here: an unknown or
// unexported field, an ambiguous promoted field, a map key of the wrong type
// or a value that cannot be key text is an error now, not at render time.
//
// path is a dot-separated list of segments; "" means the T itself. Each
// segment names, in the value reached so far:
//
//   - a struct field, found by its `key:"name"` tag, then by its Go name
//     (exact case), then by its `json:"name"` tag. The first kind of name
//     that matches wins; within one kind a field of the struct hides a
//     field promoted from an embedded struct, and two matches at the same
//     depth are ambiguous. A field tagged `key:"-"` is never matched.
//   - a map entry, for maps whose keys are strings or integers (the segment
//     is parsed as the key type).
//
// Pointers are followed; a nil pointer, map or interface on the way, or a
// missing map key, is ErrMissing at render time, naming the path up to it.
// An interface value is resolved by its dynamic type at render time; that
// work is done once per dynamic type and cached.
//
// The value at the end of the path is formatted as Format describes.
func Field[T any](path string) (Getter[T], error) {
	segs, err := splitPath(path)
	if err != nil {
		return nil, err
	}
	a, err := compile(reflect.TypeFor[T](), segs, "")
	if err != nil {
		return nil, err
	}
	if a.dyn == nil && a.leaf.basic() {
		// Kept apart from the general getter so that no call through an
		// interface or function value sees in, which lets it stay on the
		// stack: no allocation for string fields.
		return func(in T) (string, error) {
			v, err := a.walk(reflect.ValueOf(&in).Elem())
			if err != nil {
				return "", err
			}
			return formatBasic(v, a.leaf), nil
		}, nil
	}
	return func(in T) (string, error) {
		return a.get(reflect.ValueOf(&in).Elem())
	}, nil
}

// FieldSource returns a Source that binds each placeholder path with
// Field[T]; it is the "req" source of guard.
func FieldSource[T any]() Source[T] {
	return Field[T]
}

// Format formats v as key text, the way Field formats the value at the end
// of its path:
//
//   - time.Time: RFC 3339 with nanoseconds, in UTC, so one instant is one key;
//   - a type implementing encoding.TextMarshaler: MarshalText;
//   - otherwise a type implementing fmt.Stringer: String;
//     (methods with pointer receivers count, and win over the kinds below);
//   - strings and []byte as they are; signed and unsigned integers in
//     decimal; bools as true or false; floats with strconv.FormatFloat(f,
//     'g', -1, bits);
//   - pointers and interfaces are followed; nil is ErrMissing.
//
// Anything else (structs, slices, arrays, maps, channels, functions,
// complex numbers) is ErrUnsupported. Format returns "" for an empty value
// without error; Render is what rejects empty keys.
func Format(v any) (string, error) {
	if v == nil {
		return "", fmt.Errorf("%w: nil", ErrMissing)
	}
	return formats.get(reflect.ValueOf(v))
}

// formats caches Format's work per dynamic type.
var formats = &dynamic{}

var (
	timeType          = reflect.TypeFor[time.Time]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	stringerType      = reflect.TypeFor[fmt.Stringer]()
)

// leafKind says how the value at the end of a path becomes text.
type leafKind uint8

const (
	leafNone leafKind = iota
	leafString
	leafInt
	leafUint
	leafBool
	leafFloat32
	leafFloat64
	leafBytes
	// The kinds below call methods through interfaces (see basic).
	leafTime
	leafText         // the value implements encoding.TextMarshaler
	leafTextAddr     // its pointer implements encoding.TextMarshaler
	leafStringer     // the value implements fmt.Stringer
	leafStringerAddr // its pointer implements fmt.Stringer
)

// basic reports whether formatBasic handles k.
func (k leafKind) basic() bool { return leafNone < k && k < leafTime }

// leafFor picks the leafKind for t; leafNone for pointers and interfaces,
// which are followed first, and for types that cannot be key text.
func leafFor(t reflect.Type) leafKind {
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		return leafNone
	}
	pt := reflect.PointerTo(t)
	switch {
	case t == timeType:
		return leafTime
	case t.Implements(textMarshalerType):
		return leafText
	case pt.Implements(textMarshalerType):
		return leafTextAddr
	case t.Implements(stringerType):
		return leafStringer
	case pt.Implements(stringerType):
		return leafStringerAddr
	}
	switch t.Kind() {
	case reflect.String:
		return leafString
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return leafInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return leafUint
	case reflect.Bool:
		return leafBool
	case reflect.Float32:
		return leafFloat32
	case reflect.Float64:
		return leafFloat64
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return leafBytes
		}
	}
	return leafNone
}

// formatBasic formats v for a basic k.
func formatBasic(v reflect.Value, k leafKind) string {
	switch k {
	case leafString:
		return v.String()
	case leafInt:
		return strconv.FormatInt(v.Int(), 10)
	case leafUint:
		return strconv.FormatUint(v.Uint(), 10)
	case leafBool:
		return strconv.FormatBool(v.Bool())
	case leafFloat32:
		return strconv.FormatFloat(v.Float(), 'g', -1, 32)
	case leafFloat64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case leafBytes:
		return string(v.Bytes())
	}
	return "" // compile never pairs a value with a kind outside the list
}

func formatLeaf(v reflect.Value, k leafKind) (string, error) {
	if k.basic() {
		return formatBasic(v, k), nil
	}
	switch k {
	case leafTime:
		return v.Interface().(time.Time).UTC().Format(time.RFC3339Nano), nil
	case leafText, leafTextAddr:
		b, err := methodTarget(v, k == leafTextAddr).(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return "", fmt.Errorf("keyfunc: %s.MarshalText: %w", v.Type(), err)
		}
		return string(b), nil
	case leafStringer, leafStringerAddr:
		return methodTarget(v, k == leafStringerAddr).(fmt.Stringer).String(), nil
	}
	return "", fmt.Errorf("%w %s", ErrUnsupported, v.Type())
}

// methodTarget returns v, or a pointer to it (or to a copy, when v is not
// addressable) for methods with pointer receivers.
func methodTarget(v reflect.Value, addr bool) any {
	if !addr {
		return v.Interface()
	}
	if v.CanAddr() {
		return v.Addr().Interface()
	}
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	return p.Interface()
}

// accessor is a path compiled against one type: steps from the root to the
// value, then either a leaf format or, at an interface, a dynamic lookup.
type accessor struct {
	steps []step
	leaf  leafKind
	dyn   *dynamic
}

type stepOp uint8

const (
	opField stepOp = iota // v.Field(index)
	opDeref               // follow a pointer
	opElem                // enter an interface
	opMap                 // look up key
)

type step struct {
	op    stepOp
	index int
	key   reflect.Value
	at    string // path of the value the step reads, for errors
	name  string // map key as written, for errors
}

// compile resolves segs against t. at is the path already walked before
// t, for error messages.
func compile(t reflect.Type, segs []string, at string) (*accessor, error) {
	a := &accessor{}
	for {
		switch t.Kind() {
		case reflect.Pointer:
			a.steps = append(a.steps, step{op: opDeref, at: at})
			t = t.Elem()
			continue
		case reflect.Interface:
			a.steps = append(a.steps, step{op: opElem, at: at})
			a.dyn = &dynamic{rest: segs, at: at}
			return a, nil
		}
		if len(segs) == 0 {
			a.leaf = leafFor(t)
			if a.leaf == leafNone {
				hint := ""
				if t.Kind() == reflect.Struct || t.Kind() == reflect.Map {
					hint = "; name a field or key inside it"
				}
				return nil, fmt.Errorf("%w %s: not key text (want a string, number, bool, []byte, time.Time, encoding.TextMarshaler or fmt.Stringer%s)", ErrUnsupported, t, hint)
			}
			return a, nil
		}
		seg := segs[0]
		next := join(at, seg)
		switch t.Kind() {
		case reflect.Struct:
			index, err := lookupField(t, seg)
			if err != nil {
				return nil, err
			}
			for i, fi := range index {
				if t.Kind() == reflect.Pointer { // an embedded *T on the way
					a.steps = append(a.steps, step{op: opDeref, at: at})
					t = t.Elem()
				}
				f := t.Field(fi)
				if i < len(index)-1 {
					at = join(at, f.Name)
				}
				a.steps = append(a.steps, step{op: opField, index: fi})
				t = f.Type
			}
		case reflect.Map:
			key, err := mapKey(t, seg)
			if err != nil {
				return nil, err
			}
			a.steps = append(a.steps, step{op: opMap, key: key, at: at, name: seg})
			t = t.Elem()
		default:
			return nil, fmt.Errorf("%w %s: cannot look up %q in it (only struct fields and map keys)", ErrUnsupported, t, seg)
		}
		at, segs = next, segs[1:]
	}
}

// walk follows the steps from v.
func (a *accessor) walk(v reflect.Value) (reflect.Value, error) {
	for i := range a.steps {
		s := &a.steps[i]
		switch s.op {
		case opField:
			v = v.Field(s.index)
		case opDeref, opElem:
			if v.IsNil() {
				return v, missingNil(s.at)
			}
			v = v.Elem()
		case opMap:
			if v.IsNil() {
				return v, missingNil(s.at)
			}
			e := v.MapIndex(s.key)
			if !e.IsValid() {
				if s.at == "" {
					return v, fmt.Errorf("%w: no key %q", ErrMissing, s.name)
				}
				return v, fmt.Errorf("%w: no key %q in %s", ErrMissing, s.name, s.at)
			}
			v = e
		}
	}
	return v, nil
}

func missingNil(at string) error {
	if at == "" {
		return fmt.Errorf("%w: nil", ErrMissing)
	}
	return fmt.Errorf("%w: %s is nil", ErrMissing, at)
}

func (a *accessor) get(v reflect.Value) (string, error) {
	v, err := a.walk(v)
	if err != nil {
		return "", err
	}
	if a.dyn != nil {
		return a.dyn.get(v)
	}
	return formatLeaf(v, a.leaf)
}

// dynamic resolves the rest of a path by the dynamic type of an interface
// value, once per type.
type dynamic struct {
	rest  []string
	at    string
	cache sync.Map // reflect.Type → *resolved
}

type resolved struct {
	a   *accessor
	err error
}

func (d *dynamic) get(v reflect.Value) (string, error) {
	t := v.Type()
	r, ok := d.cache.Load(t)
	if !ok {
		a, err := compile(t, d.rest, d.at)
		if err != nil {
			err = dynamicError(err)
		}
		r, _ = d.cache.LoadOrStore(t, &resolved{a: a, err: err})
	}
	res := r.(*resolved)
	if res.err != nil {
		return "", res.err
	}
	return res.a.get(v)
}

// dynamicError turns a compile error for a dynamic type into a render error:
// a type that cannot be key text stays ErrUnsupported; a field or key the
// dynamic type lacks is a missing value.
func dynamicError(err error) error {
	if errors.Is(err, ErrUnsupported) {
		return err
	}
	return fmt.Errorf("%w: %s", ErrMissing, causeText(err))
}

// lookupField returns the index path of the field seg names in struct t;
// see Field for the rules.
func lookupField(t reflect.Type, seg string) ([]int, error) {
	for _, name := range []func(reflect.StructField) string{keyTagName, goName, jsonTagName} {
		index, err := lookupBy(t, seg, name)
		if err != nil || index != nil {
			return index, err
		}
	}
	return nil, newNoFieldError(t, seg)
}

// lookupBy searches t and its embedded structs breadth first, so a
// shallower match hides a deeper one as in Go's own field promotion.
func lookupBy(t reflect.Type, seg string, name func(reflect.StructField) string) ([]int, error) {
	type node struct {
		t     reflect.Type
		index []int
	}
	level := []node{{t: t}}
	visited := map[reflect.Type]bool{}
	for len(level) > 0 {
		var hits [][]int
		var hit reflect.StructField
		var next []node
		for _, n := range level {
			visited[n.t] = true
		}
		for _, n := range level {
			for i := range n.t.NumField() {
				f := n.t.Field(i)
				index := append(slices.Clip(n.index), i)
				if name(f) == seg {
					hits = append(hits, index)
					hit = f
				}
				if !f.Anonymous {
					continue
				}
				et := f.Type
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				// Types seen at a shallower depth are skipped, which also
				// stops embedding cycles.
				if et.Kind() == reflect.Struct && !visited[et] {
					next = append(next, node{t: et, index: index})
				}
			}
		}
		switch {
		case len(hits) > 1:
			return nil, fmt.Errorf("keyfunc: field %q is ambiguous in %s (%d fields at the same depth)", seg, t, len(hits))
		case len(hits) == 1:
			if !hit.IsExported() {
				return nil, fmt.Errorf("keyfunc: field %s of %s is unexported", hit.Name, t)
			}
			return hits[0], nil
		}
		level = next
	}
	return nil, nil
}

func keyTagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("key"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func goName(f reflect.StructField) string {
	if hiddenByTag(f) {
		return ""
	}
	return f.Name
}

func jsonTagName(f reflect.StructField) string {
	if hiddenByTag(f) {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func hiddenByTag(f reflect.StructField) bool {
	name, _, _ := strings.Cut(f.Tag.Get("key"), ",")
	return name == "-"
}

// mapKey converts seg to a key of map type t.
func mapKey(t reflect.Type, seg string) (reflect.Value, error) {
	kt := t.Key()
	k := reflect.New(kt).Elem()
	switch kt.Kind() {
	case reflect.String:
		k.SetString(seg)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(seg, 10, kt.Bits())
		if err != nil {
			return k, fmt.Errorf("keyfunc: map key %q is not a valid %s", seg, kt)
		}
		k.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(seg, 10, kt.Bits())
		if err != nil {
			return k, fmt.Errorf("keyfunc: map key %q is not a valid %s", seg, kt)
		}
		k.SetUint(n)
	default:
		return k, fmt.Errorf("%w %s: map keys must be strings or integers", ErrUnsupported, t)
	}
	return k, nil
}

func splitPath(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	segs := strings.Split(path, ".")
	if slices.Contains(segs, "") {
		return nil, fmt.Errorf("keyfunc: empty segment in field path %q", path)
	}
	return segs, nil
}

func join(at, seg string) string {
	if at == "" {
		return seg
	}
	return at + "." + seg
}
