package guard

import "context"

// KeyFor returns the key function that Wrap builds from opts, so that benchmarks can
// measure key rendering on its own.
func KeyFor[Req any](opts ...Option) (func(context.Context, Req) (string, error), error) {
	d, err := newDecorator(opts, "Wrap", true)
	if err != nil {
		return nil, err
	}
	return keyOf[Req](d.wrap.key)
}
