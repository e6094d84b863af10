// Package shop is the service of the service and tracing examples: a checkout whose
// methods have the plain Go shape func(ctx, req) (resp, error) and are guarded with
// guard.Wrap, one lock per order and one per product, with nested guarded calls on both
// another key and the same one.
//
// Stock and order states live in Redis and are updated with a read, a computation and a
// write: exactly the kind of code that oversells or charges twice when two calls
// interleave, and that the locks make correct.
package shop
