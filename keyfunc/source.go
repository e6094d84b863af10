package keyfunc

import "errors"

// Lookup returns a Source for named string values such as route
// parameters, query parameters, headers or gRPC metadata: the placeholder
// {name.key} reads get(in, key), with the whole path, dots included, as the
// key. A bare {name} is rejected at parse time. When get reports false the
// placeholder fails with ErrMissing; an empty value fails with ErrEmpty.
func Lookup[In any](get func(in In, key string) (string, bool)) Source[In] {
	return func(key string) (Getter[In], error) {
		if key == "" {
			return nil, errors.New("keyfunc: this source needs a key, as in {source.key}")
		}
		return func(in In) (string, error) {
			v, ok := get(in, key)
			if !ok {
				return "", ErrMissing
			}
			return v, nil
		}, nil
	}
}

// Value returns a Source for a single value of the render input, such as
// the gRPC method name: the placeholder is a bare {name}, and a path is
// rejected at parse time. An empty value fails with ErrEmpty.
func Value[In any](get func(in In) string) Source[In] {
	return func(path string) (Getter[In], error) {
		if path != "" {
			return nil, errors.New("keyfunc: this source takes no path; write it as {source}")
		}
		return func(in In) (string, error) { return get(in), nil }, nil
	}
}
