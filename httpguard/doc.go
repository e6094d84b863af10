// Package httpguard locks net/http routes: each request runs its handler under a Redis
// lease (package guard) on a key built from the request, as a func(http.Handler)
// http.Handler middleware that fits the standard ServeMux, chi, gorilla/mux and any
// router that takes one. Its Transport carries the request's lock owner to the services
// the handler calls, so that a call chain that comes back on a key it holds reenters
// the lock instead of deadlocking.
//
// It is package middleware (the Echo middleware) for net/http: the same LockConfig
// fields, checked when the middleware is built; the same waiting rule, responses, owner
// policy and texts.
//
// # Usage
//
// With the standard ServeMux (Go 1.22 patterns), wrap the route's handler:
//
//	locker, err := guard.New(redisClient)
//	...
//	lockOrder := httpguard.Lock(locker, "order:{path.id}")
//	mux := http.NewServeMux()
//	mux.Handle("POST /orders/{id}/pay", lockOrder(http.HandlerFunc(pay)))
//	mux.Handle("POST /orders/{id}/cancel", lockOrder(http.HandlerFunc(cancel)))
//
// Wrap the route's handler, not the mux: the mux sets the path values (r.PathValue) and
// the pattern (r.Pattern) on the request it hands the route, so a middleware around the
// whole mux has none to read, and its requests are answered 500 with the mistake logged.
//
// With chi, give the middleware chi's reader of URL parameters (httpguard does not
// import chi):
//
//	lock := httpguard.LockWithConfig(httpguard.LockConfig{
//		Locker:    locker,
//		Key:       "order:{path.id}",
//		PathValue: chi.URLParam,
//		Route:     func(r *http.Request) string { return chi.RouteContext(r.Context()).RoutePattern() },
//	})
//	r.With(lock).Post("/orders/{id}/pay", pay)
//
// chi.URLParam returns a value as chi routed it: escaped when the request's path has
// escapes Go keeps in URL.RawPath (/orders/a%2Fb gives "a%2Fb"). The key is that same
// text, which is what the handler reads; a handler that unescapes its parameters should
// get a PathValue that does too.
//
// With gorilla/mux:
//
//	lock := httpguard.LockWithConfig(httpguard.LockConfig{
//		Locker:    locker,
//		Key:       "order:{path.id}",
//		PathValue: func(r *http.Request, name string) string { return mux.Vars(r)[name] },
//	})
//	r.Handle("/orders/{id}/pay", lock(pay)).Methods(http.MethodPost)
//
// Lock and LockWithConfig panic on a bad config; LockConfig.ToMiddleware returns a
// *ConfigError naming the field instead.
//
// # Keys
//
// LockConfig.Key is a key template (package keyfunc), parsed once. Its sources:
//
//	{path.id}          path value, exactly as the handler reads it (r.PathValue(id),
//	                   already percent-decoded once by the mux; LockConfig.PathValue)
//	{query.q}          first value of a URL query parameter, decoded once
//	{header.X-Tenant}  first value of a request header, as sent
//	{route}            the matched pattern (r.Pattern, "POST /orders/{id}/pay";
//	                   LockConfig.Route)
//	{method}           the request method
//	{name}             LockConfig.Extractors["name"](r), for anything else
//
// The key follows what the handler reads: /orders/42 and /orders/4%32 are one order
// and one lock, /acct/%7B and /acct/%257B are accounts "{" and "%7B", two locks. The
// rendered text is the whole lock key, so every route whose template renders
// "order:42" — in this service, in its Echo or gRPC neighbours — shares that lock.
//
// # Waiting
//
// A request that finds its lock busy waits for it, woken by the holder's release: the
// Retry you configure wins (a guard.Retry in Options, else MaxWait, else the Locker's
// Retry from guard.New), and without any the request waits at most 5s. MaxWait < 0
// waits until the request's context ends; the request's context ends every wait.
//
// # Responses
//
// The middleware writes plain-text responses with http.Error:
//
//   - lock still busy when the wait ends: DenyHandler; by default 409 Conflict with
//     Retry-After, guard's retry hint in whole seconds, rounded up, at least 1 (a client
//     that waits that long before retrying does not retry into the same hold), and,
//     when the request's Guardkit-Owner header was not accepted, HeaderOwnerRejected
//     with the reason;
//   - key cannot be built from the request (missing header, query or path value, key
//     too long): ErrorHandler; 400 Bad Request, or an extractor's *Error;
//   - the key names a path value the matched route does not have, or the middleware
//     wraps the router instead of the route: 500 Internal Server Error, logged once
//     per route through LockConfig.Logger;
//   - Redis unreachable: 503 Service Unavailable, or the handler runs without the lock
//     with FailOpen;
//   - a refused upgrade (guard.ErrUpgrade), a deadlock's victim (guard.ErrDeadlock,
//     without Retry-After): 409 Conflict;
//   - lease lost while the handler ran: 503 if the handler had not started its
//     response; otherwise what it wrote stands and the loss is logged.
//
// Texts say what happened in plain words ("locked by another request", "lock service
// unavailable", ...) and never carry the key (keys often hold user or account IDs), an
// owner, a token or Redis's address. Respond answers a handler's own guarded call the
// same way.
//
// # Owners across services
//
// Every request is a new lock owner (package ctxid), unless its context has one
// already or it carries one Guardkit-Owner header whose token the LockConfig.Signer
// verifies: then it runs as the calling service's owner and reenters the locks that
// caller holds. The handler's r.Context() carries the owner and the lease
// (guard.LeaseFromContext gives the fencing token): guarded calls made with it reenter
// the route's lock, and outgoing requests made with it through a Transport carry the
// owner, signed:
//
//	client := &http.Client{Transport: httpguard.NewTransport(signer, nil)}
//	...
//	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, serviceB+"/orders/42/ship", nil)
//	resp, err := client.Do(req)
//
// Both sides need the same signing key. A token that does not verify is never
// trusted: the request runs as a fresh owner, its span gets a "guard.owner_rejected"
// event, and OwnerRejection says why. The Echo middleware (package middleware) and
// the gRPC and connect interceptors read the same header, so a chain may cross them.
//
// # Concurrency
//
// A middleware and a Transport are safe for concurrent use. Requests for one key run
// one at a time across every process sharing the Redis.
package httpguard
