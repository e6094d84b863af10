package httpguard

import (
	"net/http"

	"github.com/guardkit/guardkit/ctxid"
)

// Transport is an http.RoundTripper that sends the lock owner of each request's context
// to the server, signed, in the ctxid.Header ("Guardkit-Owner") header, so that a
// guarded route there (this package's Lock or the Echo middleware, with a Signer that
// shares the key) reenters the locks the caller's request holds instead of waiting for
// them: service A, holding order:42, calls B, which locks order:42 too, and B runs
// inside A's hold; B calling A back reenters as well.
//
// A request whose context has no owner (or whose owner has used up the Signer's
// MaxHops) is sent without the header, and any Guardkit-Owner header it carried — one
// copied from an inbound request, say — is removed: only the context speaks for the
// owner. The request given to RoundTrip is never modified; a copy carries the header.
//
// A token is a bearer credential for the owner until it expires (see ctxid,
// "Security"): give the Transport to the clients of services that share the key, or
// set Allow, rather than to clients that also call third parties.
type Transport struct {
	// Signer signs the tokens. A nil Signer sends none.
	Signer *ctxid.Signer

	// Base makes the requests.
	// Optional. Default value nil: http.DefaultTransport.
	Base http.RoundTripper

	// Allow reports whether a request may carry the owner token, such as a check of
	// req.URL.Host against the services that share the key. A request it refuses is
	// sent without the header.
	// Optional. Default value nil: every request whose context has an owner.
	Allow func(req *http.Request) bool
}

// NewTransport returns a Transport that signs with signer and sends through base
// (http.DefaultTransport when nil). A client that carries owners is one line:
//
//	client := &http.Client{Transport: httpguard.NewTransport(signer, nil)}
//
// and so is every client of the process that uses the default transport:
//
//	http.DefaultTransport = httpguard.NewTransport(signer, http.DefaultTransport)
func NewTransport(signer *ctxid.Signer, base http.RoundTripper) *Transport {
	return &Transport{Signer: signer, Base: base}
}

// RoundTrip sends req through Base with the owner token of req's context in the
// Guardkit-Owner header, and no other value there.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	tok, send := "", false
	if t.Allow == nil || t.Allow(req) {
		tok, send = t.Signer.Outbound(req.Context())
	}
	if !send && len(req.Header[ctxid.Header]) == 0 {
		return base.RoundTrip(req)
	}
	out := *req // RoundTrip must not modify the request: send a copy with its own header
	out.Header = req.Header.Clone()
	if out.Header == nil {
		out.Header = make(http.Header, 1)
	}
	if send {
		out.Header[ctxid.Header] = []string{tok}
	} else {
		delete(out.Header, ctxid.Header)
	}
	return base.RoundTrip(&out)
}
