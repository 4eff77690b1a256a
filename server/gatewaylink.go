package server

import (
	"time"

	"github.com/queenmq/ephemeral/link"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// The gateway link (docs/gateway.md, "The link to a broker").
//
// A gateway in front of a broker in gateway mode may turn one of its
// connections into a link: GET /api/v1/system/gateway-link with the gateway
// secret and "Upgrade: queen-link/1" (or the previous release's unversioned
// "queen-link", for one release) is answered 101, and from then on the
// connection speaks the cell relay's frames (cell/relay) instead of HTTP.
// Each request frame carries the tenant and access level the gateway
// established and a push, pop or ack; its answer frame carries the broker's
// whole HTTP answer. Answers come back in any order, so pops that wait
// share the link with everything else: one connection per loop carries the
// requests of every client of a gateway loop, and one read and one write
// at each end serve many of them (the HTTP path gives each client with a
// waiting pop a connection of its own).
//
// A link request passes the gates a gateway-mode HTTP request passes after
// its identity: the access level, the kill switch and the grant (D7), then
// its handler, which checks its shape and the tenant's rate. The link was
// authenticated once, by the secret on the upgrade, as each HTTP request of
// a gateway is by the secret it carries. A cancel frame lets a parked pop
// go as a closed connection's is (D13), and so does the link's closing.
//
// On a cell member a frame lands like a client's request: a queue another
// member owns is relayed to it on this loop's link to the owner (relay.go,
// elsewhere), and the owner's answer, or the relay's refusal, goes back on
// the frame's stream (conn.frameLink). A relayed answer lost after the
// request was sent is a refuse frame RefuseLost: the gateway closes its
// client's connection, as this member closes a client's own.

const gatewayLinkPath = "/api/v1/system/gateway-link"

var (
	errNoGatewayLink = &wire.Error{Status: 404, Code: codeNoRoute, Msg: "this broker offers no gateway link: it is not in gateway mode"}
	errLinkSecret    = &wire.Error{Status: 401, Code: codeUnauthorized, Msg: "the gateway secret is missing or wrong"}
	errLinkUpgrade   = &wire.Error{Status: 400, Code: codeSystemBadRequest, Msg: "a gateway link is asked for with Upgrade: " + linkProtocolV1}
)

// gatewayLink answers the upgrade to a gateway link; the connection
// becomes the link once the answer is written (becomeLink).
func (cs *conn) gatewayLink(req *wire.Request) {
	s := cs.s
	switch {
	case !cs.method(req, wire.MethodGet):
	case s.auth.Mode() != identity.ModeGateway:
		cs.refuse(req, errNoGatewayLink)
	case !s.auth.GatewaySecret(req):
		cs.refuse(req, errLinkSecret)
	default:
		token, ok := pickLinkVersion(req, true)
		if !ok {
			cs.refuse(req, errLinkUpgrade)
			return
		}
		cs.out = append(cs.out, switchingTo[token]...)
		cs.toLink = &linkConn{s: s, role: linkGateway}
	}
}

// becomeLink turns the connection into the link its upgrade asked for (a
// gateway link, or a client link: clientlink.go) once the upgrade has been
// served: the answers so far are written, and what the peer sent after the
// upgrade is read as frames.
func (cs *conn) becomeLink() gnet.Action {
	s, c := cs.s, cs.c
	cs.resumeDeferred() // pops that requests pipelined before the upgrade completed
	if len(cs.out) > 0 {
		if _, err := c.Write(cs.out); err != nil {
			return gnet.Close
		}
		cs.out = cs.out[:0]
	}
	if cs.p != nil {
		cs.ls.parsers.Put(cs.p)
		cs.p = nil
	}
	s.conns.Delete(cs)
	s.openConns.Add(-1)
	s.e.Release(s.cfg.ConnCharge)
	l := cs.toLink
	cs.toLink = nil
	c.SetContext(l)
	l.opened(c, s)
	if c.InboundBuffered() > 0 {
		return l.onTraffic()
	}
	return gnet.None
}

// serveGatewayFrame serves a request frame of a gateway link, on its loop,
// as a gateway-mode request that landed here (see above). It reports false
// for a frame that does not decode (the link is closed).
func (s *Server) serveGatewayFrame(l *linkConn, id uint64, p []byte) bool {
	var rq link.Request
	if link.DecodeRequest(p, &rq) != nil {
		return false
	}
	ls := l.ls
	cs := ls.standIn(s)
	cs.callLink, cs.callID = l, id
	cs.frameLink, cs.frameID = l, id
	cs.reqStart = time.Now()
	req := link.ToWire(&ls.relayReq, &rq)
	r := relayedRoute(req)
	if r == nil {
		cs.refuse(req, errNoRoute)
	} else if werr := identity.CheckTenant(rq.Tenant); werr != nil {
		cs.refuse(req, werr)
	} else {
		cs.reqRoute = r.id
		if cs.admitAs(req, r.need, s.tenantName(rq.Tenant), identity.Level(rq.Access)) {
			r.serve(cs, req, nil)
		}
	}
	l.endStandIn(cs, id)
	return true
}
