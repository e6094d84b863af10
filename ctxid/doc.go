// Package ctxid gives every request a lock owner ID, carries it in a
// context.Context, and signs it for the wire so that nested guarded calls
// reenter the locks of their request instead of deadlocking on them, even in
// another service.
//
// # Usage
//
// An entry point makes sure the request has an owner; everything called with
// that context acquires locks on its behalf:
//
//	ctx, owner := ctxid.Ensure(ctx)
//
// Owners form a tree. The request's owner is the root; each lock acquisition
// that is not already inside a section holding that key is a new [Section] of
// the caller's owner, and the lease's context carries it. A lock held by a
// section is reentered by that section and the sections within it
// ([ID.Within]) and by no one else, so goroutines that share only the
// request's context take turns, while goroutines started with a section's
// context are part of it. Work that must not reenter even what its caller
// holds takes an unrelated owner:
//
//	workerCtx, _ := ctxid.Fork(ctx)
//
// Between services the owner travels as a signed token. The server side of a
// transport calls [Signer.Accept] with the inbound header or metadata value;
// the client side sends what [Signer.Outbound] returns:
//
//	signer, err := ctxid.NewSigner([]ctxid.Key{{ID: "k2", Secret: secret}})
//	...
//	ctx, owner, err := signer.Accept(r.Context(), r.Header.Get(ctxid.Header))
//	if err != nil {
//		log.Printf("ignoring inbound owner: %v", err) // request runs as owner
//	}
//	...
//	if tok, ok := signer.Outbound(ctx); ok {
//		req.Header.Set(ctxid.Header, tok)
//	}
//
// A transport that can carry several values under one name (HTTP headers,
// gRPC metadata) uses [Signer.Inbound] instead, the policy the guardkit
// middleware and interceptors share: one value that verifies is accepted;
// several, an empty one or one that does not verify are refused with a
// [*Refusal] that says why, and the call runs as a fresh owner.
//
// Keys rotate without downtime: [NewSigner] signs with its first key and
// verifies with all of them.
//
// # Security
//
// An owner ID is a capability: whoever acts as an owner reenters its locks and
// so passes mutual exclusion. That is why an owner from the wire is trusted
// only when its token verifies against a configured key; otherwise
// [Signer.Accept] makes a fresh owner. A client that could choose its owner ID
// could make two of its requests reenter each other. A nil *Signer trusts no
// inbound owner at all.
//
// A token is an HMAC-SHA256 over its version, key ID, owner (the section path
// of the call that sent it), issue time and hop count. It is a bearer
// credential until it expires (MaxAge, 5 minutes by default): anyone who
// captures one can act inside its section until then, reentering the locks
// that section and the sections it is in hold (not those of sibling sections
// of the same request), so send
// tokens only over encrypted connections and only to services that share the
// key, never to third parties. The hop limit (MaxHops) stops tokens from
// circulating forever in call loops; it does not prevent replay. Every
// service holding a key can mint tokens for any owner, so share keys only
// between services that trust each other, use 32 random bytes per secret, and
// keep them out of source code.
//
// Verification is strict and cheap to reject: input longer than
// [MaxTokenLen] is refused before parsing, only [A-Za-z0-9._/-] is accepted,
// every field must be canonical, the MAC is compared in constant time, and
// issue time and hops are judged only once the MAC matched. No input makes it
// panic. Owner IDs themselves are not secret and may be logged.
package ctxid
