// Package middleware locks Echo v4 routes: each request runs its handler under a Redis
// lease (package guard) on a key built from the request, in Echo's own middleware idiom.
//
// # Usage
//
// Lock a route on the resource it changes:
//
//	locker, err := guard.New(redisClient)
//	...
//	lockOrder := middleware.Lock(locker, "order:{param.id}")
//	e.POST("/orders/:id/pay", pay, lockOrder)
//	e.POST("/orders/:id/cancel", cancel, lockOrder)
//
// and read the resource in the handler with Param, the value the key used:
//
//	func pay(c echo.Context) error {
//		id := middleware.Param(c, "id") // "a/b" for /orders/a%2Fb/pay, where c.Param reads "a%2Fb"
//		...
//	}
//
// or a whole group, or with a LockConfig:
//
//	g := e.Group("/orders/:id", lockOrder)
//
//	e.POST("/accounts/:id/transfer", transfer, middleware.LockWithConfig(middleware.LockConfig{
//		Locker:  locker,
//		Key:     "account:{param.id}",
//		MaxWait: 2 * time.Second,  // wait up to 2s instead of the default 5s
//		Signer:  signer,           // honour signed owners of calling services
//	}))
//
// Lock and LockWithConfig panic on a bad config, as Echo's middleware do;
// LockConfig.ToMiddleware returns the error instead. Either way the mistake — a
// malformed template, an unknown source, a TTL the Locker cannot renew in time — is
// reported when the middleware is built, naming the LockConfig field.
//
// # Lock kinds
//
// A route's lock is exclusive unless LockConfig.Options give it another kind: many GETs
// of an account can read it together while its POSTs write, and an export route can
// admit three requests at once:
//
//	e.GET("/accounts/:id", statement, middleware.LockWithConfig(middleware.LockConfig{
//		Locker: locker, Key: "account:{param.id}", Options: []guard.Option{guard.Read()}}))
//	e.POST("/accounts/:id", post, middleware.LockWithConfig(middleware.LockConfig{
//		Locker: locker, Key: "account:{param.id}", Options: []guard.Option{guard.Write()}}))
//	e.POST("/exports/:tenant", export, middleware.LockWithConfig(middleware.LockConfig{
//		Locker: locker, Key: "exports:{param.tenant}", Options: []guard.Option{guard.Permits(3)}}))
//
// guard.Fair serves a route's requests in arrival order. See guard's "Lock kinds".
//
// # Waiting
//
// A request that finds its lock busy waits for it, woken by the holder's release rather
// than by polling, and DenyHandler answers it when it gives up. How long it waits
// follows the one rule of every guardkit entry point: the Retry you configure wins — a
// guard.Retry in LockConfig.Options, else LockConfig.MaxWait, else the Retry given to
// the Locker's guard.New — and without any, the request waits at most 5s. MaxWait > 0
// waits that long, MaxWait < 0 until the request's context ends; the request's context
// ends every wait. To answer a busy lock at once:
//
//	middleware.LockWithConfig(middleware.LockConfig{
//		Locker:  locker,
//		Key:     "order:{param.id}",
//		Options: []guard.Option{guard.Retry(guard.NoRetry())},
//	})
//
// # Keys
//
// LockConfig.Key is a key template (package keyfunc) parsed once. Its sources:
//
//	{param.id}         route parameter, percent-decoded exactly once (Param)
//	{query.q}          first value of a URL query parameter, decoded once
//	{header.X-Tenant}  first value of a request header, as sent
//	{form.id}          field of an application/x-www-form-urlencoded body, decoded once
//	{path}             the request's path, each segment decoded once
//	{route}            the matched route pattern, as "/orders/:id"
//	{method}           the request method
//	{name}             LockConfig.Extractors["name"](c), for anything else
//
// A value is decoded exactly once: /orders/42 and /orders/4%32 are one order and one
// lock, /orders/a%2Fb is order "a/b". Read the handler's resource with Param(c, "id"):
// it is the value the key used. Echo's c.Param is not: Echo leaves it raw when Go kept
// a raw path (URL.RawPath, set for a%2Fb or 4%32) and decoded otherwise. The key follows
// c.Param too: for every request the handler runs for, percent-decoding c.Param gives
// Param, so two requests whose handlers read the same c.Param, or the same Param, take
// one lock. The only requests for which that cannot hold are refused with 400 before
// the handler runs: those whose value, decoded once, still holds a %XX escape while
// Echo hands it over decoded. /orders/a%252Fb/pay (order "a%2Fb") is one: its c.Param
// reads "a%2Fb", as /orders/a%2Fb/pay's (order "a/b") does. So is any request whose
// c.Param an earlier middleware changed so that it no longer decodes to the value (to
// key on a normalized value, use an Extractor).
//
// Route parameters are read from the path Echo's router matched (echo.GetPath) at their
// place in the matched route. A path rewritten before routing (Echo's Pre middleware,
// such as Rewrite) is read as rewritten; a route that no longer fits the path, because
// something changed the path after routing, builds no key (400).
//
// {path} and the wildcard {param.*} span several segments, where decoding everything
// would make /a%2Fb and /a/b one key. So each segment is decoded once and a '%' or '/'
// inside a segment is written back as %25 or %2F: /a%2Fb gives "/a%2Fb", /a/b gives
// "/a/b", /orders/4%32 gives "/orders/42", and two paths give one key only when their
// decoded segments are the same. Query parameters and form fields are decoded once by
// net/url ("+" is a space there, as in every form); headers are not encoded on the
// wire and are used as sent.
//
// The rendered text is the whole lock key, with no prefix per route or middleware: every
// route whose template renders "order:42" shares that one lock, which is what lets pay,
// cancel and refund of an order exclude one another. Give unrelated resources
// different literal prefixes ("order:", "account:"). Values are escaped as keyfunc
// describes, so two different requests never render the same key by accident.
//
// {form.x} makes the middleware read an urlencoded body before the lock is requested
// (http.Request.ParseForm: at most 10 MB, less under Echo's BodyLimit); the handler
// still finds the fields with c.FormValue, but not in c.Request().Body. Multipart
// bodies are not read; put the key in the route, the query or a header instead.
//
// # Owners and reentrancy
//
// A lock is held by an owner (package ctxid): by default every request is a new owner.
// The handler runs with c.Request().Context() carrying the owner and the lease, so a
// guarded call made with it — a function decorated with guard.Wrap, guard.Do,
// Locker.Acquire — on the same key reenters the request's lock instead of waiting for
// it, and guard.LeaseFromContext gives the lease and its fencing token. Goroutines the
// handler starts with that context share the owner.
//
// A service calling another can make the callee reenter its locks: it sends
// signer.Outbound(ctx) in the ctxid.Header ("Guardkit-Owner") header, and the callee's
// LockConfig.Signer verifies it with the same key. On the wire:
//
//   - one header, one token: several Guardkit-Owner headers are all ignored, whatever
//     they hold, rather than trusting the first;
//   - at most ctxid.MaxTokenLen (256) bytes of [A-Za-z0-9._-]; longer text is not
//     parsed;
//   - the token carries its issue time in whole seconds and is accepted for the
//     Signer's MaxAge (5 minutes by default), so it can expire up to a second early;
//     tokens issued more than MaxSkew in the future are refused;
//   - each service hop counts one (Outbound adds it); a token with more hops than
//     MaxHops (8 by default) is refused, and Outbound sends none past it.
//
// A token that does not verify is never trusted: the request is a new owner, because a
// client that could pick its owner could make two of its requests reenter each other.
// The refusal is not silent, since a Signer forgotten on one service or keys that
// differ between services would otherwise only show as waiting and 409s: the request's
// current span gets a "guard.owner_rejected" event with the reason ("guard.reason":
// no_signer, several_values, too_long, malformed, invalid_owner, unknown_key,
// bad_signature, too_many_hops, not_yet_valid or expired, the names the gRPC
// interceptors use), OwnerRejection returns it with the *ctxid.VerifyError, and if the
// lock is busy the default DenyHandler's 409 carries the reason in the
// Guardkit-Owner-Rejected header (HeaderOwnerRejected) and, with a plain explanation
// ("no_signer: this service is not configured to accept owner tokens"), in its
// message. A request without the header is not reported: most callers are not
// services. An owner already in the request's context (put there by an earlier Lock
// middleware or by your own code) is kept and the header is not read; never put one
// owner into a context that all requests share, such as http.Server.BaseContext.
//
// # Responses
//
// The middleware returns errors to Echo rather than writing responses, so Echo's
// HTTPErrorHandler renders them (by default as {"message": "..."} JSON) and logging
// middleware sees them:
//
//   - lock still busy when the wait ends (see Waiting): DenyHandler; by default 409 Conflict with
//     Retry-After set to guard's retry hint (see "Retry hints" in package guard) in
//     whole seconds, rounded up, at least 1, and, when
//     the request's Guardkit-Owner header was not accepted, Guardkit-Owner-Rejected set
//     to the reason;
//   - key cannot be built from the request: ErrorHandler; by default 400 Bad Request
//     naming the template's placeholder ("cannot build the lock key from the request:
//     {header.X-Tenant} is missing or empty", "{param.id} is percent-encoded twice"),
//     never its value (or the *echo.HTTPError an extractor returned);
//   - the matched route lacks the parameter the key names ("order:{param.nope}" on
//     /orders/:id), a mistake Echo cannot show the middleware when it is built:
//     ErrorHandler; by default 500 Internal Server Error, and the route and the
//     parameter are logged once through Echo's logger (c.Logger()); on a not-found
//     route, such as the catch-all an Echo group adds for its middleware, 404 Not
//     Found;
//   - Redis unreachable: ErrorHandler; by default 503 Service Unavailable, or, with
//     FailOpen, the handler runs without the lock;
//   - the request's section holds the key's read lock and the route writes it
//     (guard.ErrUpgrade): ErrorHandler; by default 409 Conflict, at once;
//   - the request's wait was one of a deadlock's cycle and was chosen to fail
//     (guard.ErrDeadlock): ErrorHandler; by default 409 Conflict without Retry-After.
//
// The default handlers return an *echo.HTTPError whose Internal is guard's error, so
// errors.Is and errors.As reach guard.ErrLocked, guard.ErrUnavailable and the rest.
// Its message says what happened in plain words ("locked by another request", "lock
// service unavailable", "lock lost while handling the request", "cannot build the
// lock key from the request") and never carries the key (keys often hold user or
// account IDs), an owner, a token or Redis's address: those are in Internal, for logs
// and for a custom handler that shows them to internal clients. Status maps the error
// of a handler's own guarded call the same way.
//
// # Lost leases
//
// A lease is renewed in the background as long as the handler runs, so long handlers
// and streaming responses keep their lock. When it is lost anyway (the lock expired
// while Redis was unreachable, or was deleted), the handler's request context is
// cancelled at once with a guard.ErrLeaseLost cause: a handler that passes its context
// to its work stops. When it returns, ErrorHandler receives an error matching
// guard.ErrLeaseLost, with the handler's own error in the chain, and its result is
// returned to Echo. What the client sees depends on whether the handler had started
// its response: if not, the error response (503 by default); if it had, whatever the
// handler wrote — a status and headers cannot be taken back, and a streamed body ends
// where the handler stopped — while the loss still reaches Echo's HTTPErrorHandler
// (which writes nothing to a committed response) and outer middleware such as loggers.
//
// # Panics
//
// A panicking handler's lock is released before the panic leaves the middleware, so
// Echo's Recover middleware, placed outside it, sees the panic with the lock already
// free.
//
// # Concurrency
//
// A middleware value is safe for concurrent use by any number of routes and requests.
// Requests for one key run one at a time across every process sharing the Redis;
// requests for different keys do not wait for each other.
package middleware
