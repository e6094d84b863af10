package guard

import "context"

// The decorators over several keys as one lock: the Keys and RawKeys options, and how
// Wrap, Do and Locker.Run take them.

// Keys names several locks that a decorated call takes as one, with key templates (see
// Key): a transfer locks both of its accounts,
//
//	svc.Transfer = guard.Wrap(svc.Transfer, guard.Keys("account:{req.From}", "account:{req.To}"))
//
// The call takes them all or none, in canonical order whatever order they are listed
// in, under one lease (see Locker.AcquireAll); keys that render the same count once, and
// a template list that renders to one key is that one lock. The function's context
// carries the lease: Lease.Tokens has a fencing token per key.
// Applies to Wrap, WrapE, Do and Locker.Run; the last of Key, Keys, RawKey, RawKeys and
// KeyFunc given wins. An empty list fails like a missing key.
func Keys(templates ...string) Option {
	texts := append([]string(nil), templates...)
	return Option{name: "Keys", scope: scopeWrap, apply: func(s *settings) { s.wrap.key = keySpec{kind: keyTemplates, texts: texts} }}
}

// RawKeys is Keys with keys exactly as given (see RawKey), for keys computed in code:
//
//	err := guard.Do(ctx, move, guard.RawKeys("bin:"+from, "bin:"+to))
//
// Applies to Wrap, WrapE, Do and Locker.Run; the last of Key, Keys, RawKey, RawKeys and
// KeyFunc given wins.
func RawKeys(keys ...string) Option {
	texts := append([]string(nil), keys...)
	return Option{name: "RawKeys", scope: scopeWrap, apply: func(s *settings) { s.wrap.key = keySpec{kind: keyRaws, texts: texts} }}
}

// fixedKeys returns the key of Do or Run, which have no request to render it from, or,
// for Keys and RawKeys, their first key and the keys.
func fixedKeys(w wrapSettings, where string) (string, []string, error) {
	if k := w.key; k.kind == keyTemplates || k.kind == keyRaws {
		if len(k.texts) == 0 {
			return "", nil, errNoKey
		}
		keys := make([]string, len(k.texts))
		for i, text := range k.texts {
			one := w
			one.key = keySpec{kind: keyTemplate, text: text}
			if k.kind == keyRaws {
				one.key.kind = keyRaw
			}
			key, err := fixedKey(one, where)
			if err != nil {
				return "", nil, err
			}
			keys[i] = key
		}
		return keys[0], keys, nil
	}
	key, err := fixedKey(w, where)
	return key, nil, err
}

// wrapSet is WrapE for a decorator whose key option names several keys (Keys, RawKeys).
func wrapSet[Req, Resp any](fn func(context.Context, Req) (Resp, error), d *decorator, skip func(context.Context, Req) bool) (func(context.Context, Req) (Resp, error), error) {
	k := d.wrap.key
	if len(k.texts) == 0 {
		return nil, errNoKey
	}
	fns := make([]func(context.Context, Req) (string, error), len(k.texts))
	for i, text := range k.texts {
		one := keySpec{kind: keyTemplate, text: text}
		if k.kind == keyRaws {
			one.kind = keyRaw
		}
		f, err := keyOf[Req](one)
		if err != nil {
			return nil, err
		}
		fns[i] = f
	}
	return func(ctx context.Context, req Req) (Resp, error) {
		if skip != nil && skip(ctx, req) {
			return fn(ctx, req)
		}
		var resp Resp
		keys := make([]string, len(fns))
		for i, f := range fns {
			key, err := f(ctx, req)
			if err != nil {
				return resp, err
			}
			keys[i] = key
		}
		b, err := d.binding()
		if err != nil {
			return resp, err
		}
		_, err = b.r.run(ctx, b.s, keys[0], keys, func(ctx context.Context) (err error) {
			resp, err = fn(ctx, req)
			return err
		})
		return resp, err
	}, nil
}
