// Package server puts the engine on the wire (docs/server.md): gnet event
// loops that serve the ephemeral family's routes under /api/v1/ephemeral/
// (the specification's eight, the cell's view and the upgrade to a client
// link), the system routes, /health, /metrics and /dashboard; long-poll
// parking; the refusals in the specification's shape; and the store calls
// that configure and delete make off the loops (P1).
//
// One connection is served in request order. A request that cannot be
// answered on the loop (a pop that parks, a declaration write) makes the
// connection busy: the bytes of later pipelined requests stay in gnet's
// inbound buffer until the answer has been written, and are served after
// it. The answer is written on the connection's own loop when the request
// that completed it was served there, by the completer itself once the
// loop has handed the connection over (stDirect, conn.writeDirect), and
// with AsyncWrite otherwise. So responses leave in request order and a
// parked pop holds no goroutine (P5, D13).
//
// # Connection kinds
//
// The loops serve two kinds of connection, and one kind of request that
// has no connection of its own:
//
//   - An HTTP connection (conn; conn.go) is a client's, on the public
//     port: HTTP/1.1 requests answered in order.
//   - A link (linkConn; links.go) carries any number of requests at once,
//     each on a stream of its own, in the link's frames (package link;
//     docs/link.md). It has one of four roles: a relay link this member
//     dialled to carry requests to the owner of their queue, or one
//     another member dialled to this one (relaylink.go; both on the relay
//     port); a gateway link, an HTTP connection of a gateway upgraded
//     (gatewaylink.go); a client link, an HTTP connection of any client
//     upgraded (clientlink.go).
//   - A stand-in (standin.go) is a conn with no socket, lent by a link's
//     loop, on which a request a link carried is served through the same
//     route handlers as an HTTP request; its answer goes back on the
//     link's stream.
//
// Each loop keeps the state its connections share (loopState; loop.go):
// the HTTP part (loophttp.go) and the links' part (looplinks.go).
//
// # Files
//
// The front: server.go (the Server, Start and Shutdown, gnet's events,
// the tick), config.go (Config and its defaults), listener.go (accepting
// connections), shed.go (shedding idle connections and links when
// descriptors run out), conn.go (an HTTP connection: parsing, ordering,
// busy spells, the direct write), body.go (a request's body: the check on
// its head, the bound on bytes in flight, large bodies), outbound.go
// (answers a client has not read), loop.go, loophttp.go and looplinks.go
// (a loop's state).
//
// Routes: routes.go (dispatch and the family's route table),
// routetable.go (the table as gateway/routes publishes it), admit.go (the
// gates before a handler), adminscope.go (who may use the admin routes),
// refuse.go (every refusal), codes.go (every code), mapping.go (wire
// values to the engine's and back), messages.go (push, ack), pop.go (pop
// and its parked sink), status.go (the listing and a queue's depth),
// liststream.go (a long listing written as it is made), wholequeue.go
// (configure, reset, delete), health.go (/health), system.go (the kill
// switch and grants routes), killswitch.go (the kill switch's state),
// tenant.go (what the server keeps per tenant), share.go (tenant
// allowances divided among a cell's members), dashboard.go (/dashboard,
// whose page is in dashboard/), metrics.go and metricfamilies.go
// (/metrics and every family it shows).
//
// The store: boot.go (declarations loaded at start), sync.go (following
// the store's changes).
//
// The cell: cell.go (joining a cell and the membership's hooks), relay.go
// (a request relayed to its owner, the landing side), connfields.go (a
// relayed answer's connection fields), relayowner.go (a relayed request
// served, the owner's side), fanout.go (reset and delete across members),
// cellstatus.go (the cell's status reads), cellview.go (the cell's view
// for clients, D19), cors.go (the two status reads a member's page may
// make of another member, and their preflight).
//
// Links: links.go (what every link shares: reading frames, failing),
// relaylink.go (the cell's relay links: dialling, calls, tending),
// gatewaylink.go (the gateway link, and an upgraded connection becoming a
// link), clientlink.go (the client link), linkbounds.go (a client link's
// bounds on unread answers and frames), standin.go (the stand-ins).
package server
