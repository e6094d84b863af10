// Package httplock holds what the two HTTP lock middlewares, package middleware (Echo)
// and package httpguard (net/http), do alike: checking a configuration and naming the
// bad field, accepting or refusing a caller's owner header, and the words, statuses and
// Retry-After values their default handlers answer with.
//
// It knows neither framework. Key sources take the request as a type parameter; owner
// acceptance takes a context and header values. Reading a request, calling the next
// handler, writing the response and logging stay in each middleware, and so do all
// their exported names: an [Invalid] becomes that package's ConfigError, and [Status]
// and the Text constants become its response.
//
// The texts are what clients read, byte for byte; httpguard's tests compare its answers
// with the Echo middleware's. The package has no tests of its own: the two
// middlewares' tests cover it through their public API.
package httplock
