// Package identity says who a request is: its tenant and access level (D14,
// docs/decisions.md; how: docs/server.md, "Identity"). One mode per
// broker: none (every request is tenant "default" with full access), jwt
// (a bearer token verified on the caller's goroutine, its identity then
// cached) or gateway (tenancy headers trusted only with a shared secret).
//
// It is a package of its own, out of server, so that everything that admits
// an end client (the broker's event loops, the multi-tenant gateway)
// authenticates it with this one code, and a token the broker accepts is a
// token the gateway accepts. It knows requests only as wire.Request and
// answers refusals as wire.Error, so it serves any caller of the wire
// parser, not just server.
//
// Identify runs on gnet's event loops (P1): it never blocks on the network
// (a JWK Set is fetched in the background, never for a token), mode none
// allocates nothing, and neither does a JWT already verified once.
package identity
