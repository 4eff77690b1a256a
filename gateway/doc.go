// Package gateway is the multi-tenant gateway: a reverse proxy that stands
// in front of a broker or a cell for cloud tenants (docs/gateway.md).
//
// For every request it authenticates the end client (package identity, the
// broker's own code), classifies the route (package gateway/routes: a route
// it does not know is 404 route_blocked), opens the plan's gate (the
// ephemeral feature, off unless the plan sets it: 403 feature_gated),
// applies the plan's message allowance, rate and parked-consumer slots,
// and forwards the request to a broker with the tenancy headers the broker
// trusts in gateway mode (X-Queen-Tenant, X-Queen-Access,
// X-Queen-Gateway-Secret). The broker's answer comes back byte for byte;
// the gateway reads only its frame, its status and, for a pop, the count of
// messages it delivered, which it meters.
//
// It runs on gnet event loops like the broker: client connections and the
// connections to the brokers are served by the same loops. A push, pop or
// ack goes to its broker on the loop's link to it, one connection carrying
// the requests of every client of the loop, so a waiting pop costs a
// stream on that link, never a connection of its own nor a goroutine; the
// other routes, and every request when the link is off or refused, go on
// HTTP connections to the broker. A client may turn its own connection
// into a link too (docs/link.md), as it may at a broker.
//
// A request is judged on its head (identity, route, level, plan; the admin
// scope) before its body is read, its body is read once and held within a
// bound shared by every client with the answers clients have not read, and
// a head or a body that takes too long closes its connection: the broker's
// own front door (docs/gateway.md, "The front door").
//
// Files: gateway.go (the Gateway, its loops and gnet's events), client.go
// (a client connection: parsing, the gates, ordering), body.go (a request's
// head and body: the gate on the head, reading the body, the in-flight
// bound, timeouts), outbound.go (answers a client has not read), shed.go
// (shedding idle clients when descriptors run out), clientlink.go (a
// client's link), upstream.go (the HTTP connections to the brokers),
// link.go (the link to a broker), owners.go (routing push, pop and ack
// to their queue's owner in front of a cell), cellwatch.go (the cell's
// view the gateway routes by), forward.go (the request as forwarded),
// response.go (framing the brokers' answers), cellview.go (the cell's view
// read, answered by the gateway), tenants.go (plans and tenants in
// memory), meter.go (allowance, rate, slots and usage), metrics.go (GET
// /metrics), admin.go (the admin routes), adminscope.go (who may use
// them), refusals.go (the gateway's own answers). The catalog of plans and
// tenants is package gateway/catalog, the route classification
// gateway/routes.
package gateway
