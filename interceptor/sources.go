package interceptor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/keyfunc"
)

// call is what a key template renders from: one RPC.
type call struct {
	ctx    context.Context // carries the incoming metadata
	method string
	req    any // the request message; nil for streams
}

// sources are the template sources of a rule.
func sources(paths *[]*protoPath) keyfunc.Sources[*call] {
	return keyfunc.Sources[*call]{
		"req":    reqSource(paths),
		"md":     mdSource,
		"method": keyfunc.Value(func(c *call) string { return c.method }),
	}
}

// errNoRequest fails a {req...} placeholder on a stream: the interceptor runs before the
// handler receives any message.
var errNoRequest = &guard.ConfigError{Field: "Rule.Key",
	Reason: "a streaming RPC has no request message when the lock is taken; key its rule by {md...} or {method}"}

// mdSource binds {md.key} to the single value of an incoming metadata key.
func mdSource(path string) (keyfunc.Getter[*call], error) {
	if path == "" {
		return nil, errors.New("md needs a metadata key, as in {md.x-tenant}")
	}
	key := strings.ToLower(path)
	for i := 0; i < len(key); i++ {
		if !mdKeyByte(key[i]) {
			return nil, fmt.Errorf("%q is not a metadata key: byte %#02x at offset %d", path, key[i], i)
		}
	}
	return func(c *call) (string, error) {
		vs := metadata.ValueFromIncomingContext(c.ctx, key)
		switch len(vs) {
		case 0:
			return "", fmt.Errorf("%w: no metadata %q", keyfunc.ErrMissing, key)
		case 1:
			return vs[0], nil
		}
		// Choosing one of several values would let a caller pick which lock it takes.
		return "", fmt.Errorf("metadata %q has %d values, want one", key, len(vs))
	}, nil
}

// reqSource binds {req.path} to a field of the request message, resolved by proto field
// names once per message type. Each bound path is recorded in paths so that the rule can
// check it against message types known at construction.
func reqSource(paths *[]*protoPath) keyfunc.Source[*call] {
	return func(path string) (keyfunc.Getter[*call], error) {
		if path == "" {
			return nil, errors.New("req needs a field path, as in {req.account_id}")
		}
		p := &protoPath{text: path, segs: strings.Split(path, ".")}
		*paths = append(*paths, p)
		return p.get, nil
	}
}

// protoPath is one {req...} placeholder's path, with its resolution cached per message
// descriptor.
type protoPath struct {
	text  string
	segs  []string
	cache sync.Map // protoreflect.MessageDescriptor → *protoAccessor
}

// protoAccessor is a path resolved for one message type, or the reason it cannot be.
type protoAccessor struct {
	steps []protoStep
	leaf  protoreflect.FieldDescriptor // the field, or map value, at the end
	err   error
}

// protoStep reads one field, and one map entry when the field is a map.
type protoStep struct {
	fd  protoreflect.FieldDescriptor
	key protoreflect.MapKey // when fd.IsMap()
}

func (p *protoPath) get(c *call) (string, error) {
	m, err := message(c.req)
	if err != nil {
		return "", err
	}
	return p.accessor(m.Descriptor()).read(m)
}

// message returns the request as a protoreflect message.
func message(req any) (protoreflect.Message, error) {
	switch r := req.(type) {
	case nil:
		return nil, errNoRequest
	case proto.Message:
		return r.ProtoReflect(), nil
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(r).ProtoReflect(), nil
	}
	return nil, &guard.ConfigError{Field: "Rule.Key", Reason: fmt.Sprintf("{req...} needs a protobuf request message, got %T", req)}
}

// accessor returns the path resolved for md, resolving it on first use.
func (p *protoPath) accessor(md protoreflect.MessageDescriptor) *protoAccessor {
	if a, ok := p.cache.Load(md); ok {
		return a.(*protoAccessor)
	}
	a, _ := p.cache.LoadOrStore(md, p.resolve(md))
	return a.(*protoAccessor)
}

// resolve follows the path's segments through md's fields.
func (p *protoPath) resolve(md protoreflect.MessageDescriptor) *protoAccessor {
	a := &protoAccessor{}
	fail := func(format string, args ...any) *protoAccessor {
		a.err = &guard.ConfigError{Field: "Rule.Key", Reason: fmt.Sprintf("{req.%s}: %s", p.text, fmt.Sprintf(format, args...))}
		return a
	}
	cur := md
	for i := 0; i < len(p.segs); i++ {
		seg := p.segs[i]
		fd := cur.Fields().ByName(protoreflect.Name(seg))
		if fd == nil {
			return fail("message %s has no field %q (fields are named as in the .proto file)", cur.FullName(), seg)
		}
		step := protoStep{fd: fd}
		val := fd
		switch {
		case fd.IsMap():
			if i+1 == len(p.segs) {
				return fail("map field %q needs a key, as in %s.<key>", seg, seg)
			}
			i++
			k, err := mapKey(fd.MapKey(), p.segs[i])
			if err != nil {
				return fail("map field %q: %v", seg, err)
			}
			step.key = k
			val = fd.MapValue()
		case fd.IsList():
			return fail("repeated field %q cannot name a lock", seg)
		}
		a.steps = append(a.steps, step)
		if i+1 == len(p.segs) {
			if !leafKind(val) {
				return fail("field %q is a %s, which cannot name a lock; name one of its fields", seg, describe(val))
			}
			a.leaf = val
			return a
		}
		if val.Message() == nil {
			return fail("field %q is a %s, which has no fields", seg, describe(val))
		}
		cur = val.Message()
	}
	return a
}

// read renders the value at the accessor's path in m.
func (a *protoAccessor) read(m protoreflect.Message) (string, error) {
	if a.err != nil {
		return "", a.err
	}
	var v protoreflect.Value
	for i, s := range a.steps {
		// A field that is not set — for a field without presence, one holding its zero
		// value — is missing: rendering a default would put every such request under
		// one lock.
		if !m.Has(s.fd) {
			return "", fmt.Errorf("%w: field %s not set", keyfunc.ErrMissing, s.fd.Name())
		}
		v = m.Get(s.fd)
		if s.fd.IsMap() {
			mv := v.Map()
			if !mv.Has(s.key) {
				return "", fmt.Errorf("%w: map field %s has no key %v", keyfunc.ErrMissing, s.fd.Name(), s.key.Interface())
			}
			v = mv.Get(s.key)
		}
		if i+1 < len(a.steps) {
			m = v.Message()
		}
	}
	return formatValue(a.leaf, v)
}

// mapKey parses a path segment as a key of a map field.
func mapKey(fd protoreflect.FieldDescriptor, s string) (protoreflect.MapKey, error) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(s).MapKey(), nil
	case protoreflect.BoolKind:
		b, err := strconv.ParseBool(s)
		return protoreflect.ValueOfBool(b).MapKey(), err
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n, err := strconv.ParseInt(s, 10, 32)
		return protoreflect.ValueOfInt32(int32(n)).MapKey(), err
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		n, err := strconv.ParseInt(s, 10, 64)
		return protoreflect.ValueOfInt64(n).MapKey(), err
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		n, err := strconv.ParseUint(s, 10, 32)
		return protoreflect.ValueOfUint32(uint32(n)).MapKey(), err
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		n, err := strconv.ParseUint(s, 10, 64)
		return protoreflect.ValueOfUint64(n).MapKey(), err
	}
	return protoreflect.MapKey{}, fmt.Errorf("unsupported key kind %s", fd.Kind())
}

// Well-known messages that stand for one value.
const (
	timestampName = "google.protobuf.Timestamp"
	durationName  = "google.protobuf.Duration"
)

// isWrapper reports whether md is one of the google.protobuf wrapper messages.
func isWrapper(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		return true
	}
	return false
}

// leafKind reports whether a field of fd's type can be the end of a path.
func leafKind(fd protoreflect.FieldDescriptor) bool {
	md := fd.Message()
	if md == nil {
		return true
	}
	return isWrapper(md) || md.FullName() == timestampName || md.FullName() == durationName
}

func describe(fd protoreflect.FieldDescriptor) string {
	if md := fd.Message(); md != nil {
		return "message " + string(md.FullName())
	}
	return fd.Kind().String()
}

// formatValue renders a leaf value the way keyfunc.Format renders the Go equivalent.
func formatValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) (string, error) {
	if md := fd.Message(); md != nil {
		m := v.Message()
		switch {
		case isWrapper(md):
			inner := md.Fields().ByName("value")
			return formatValue(inner, m.Get(inner))
		case md.FullName() == timestampName:
			sec, nanos := wktFields(m)
			return keyfunc.Format(time.Unix(sec, nanos))
		case md.FullName() == durationName:
			sec, nanos := wktFields(m)
			return keyfunc.Format(time.Duration(sec)*time.Second + time.Duration(nanos))
		}
		return "", fmt.Errorf("%w: message %s", keyfunc.ErrUnsupported, md.FullName())
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return v.String(), nil
	case protoreflect.BytesKind:
		return string(v.Bytes()), nil
	case protoreflect.BoolKind:
		return strconv.FormatBool(v.Bool()), nil
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name()), nil
		}
		return strconv.FormatInt(int64(v.Enum()), 10), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.FormatInt(v.Int(), 10), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.FormatUint(v.Uint(), 10), nil
	case protoreflect.FloatKind:
		return strconv.FormatFloat(v.Float(), 'g', -1, 32), nil
	case protoreflect.DoubleKind:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64), nil
	}
	return "", fmt.Errorf("%w: %s", keyfunc.ErrUnsupported, fd.Kind())
}

// wktFields reads the seconds and nanos of a Timestamp or Duration.
func wktFields(m protoreflect.Message) (int64, int64) {
	fs := m.Descriptor().Fields()
	return m.Get(fs.ByName("seconds")).Int(), m.Get(fs.ByName("nanos")).Int()
}
