// Package wallet is the HTTP service of the echo example and of make demo: accounts
// whose balances live in Redis, with Echo handlers to read a balance, deposit and
// withdraw.
//
// The handlers update a balance the way much real code does, with a read, a check, a
// call that takes a few milliseconds (a fraud check, a payment provider) and a write.
// Two requests on one account that interleave lose an update; the handlers are correct
// only when the routes that change a balance run one request per account at a time,
// which is what the echo example's middleware.Lock on "account:{param.id}" provides.
// The demo runs the same handlers with and without it.
package wallet
