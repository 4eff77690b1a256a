package server

import (
	"bytes"
	"context"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire"
)

// The owner's side of the relay (D17; docs/cell.md, "Relaying in the
// server"): the requests an accepted relay link carries (relaylink.go) are
// served through the same route handlers as a local one, on a stand-in conn
// of the link's loop (standin.go) whose answer goes back on the link
// instead of a socket.

// serveRelayed serves a request frame of an accepted link, on its loop.
// It reports false for a frame that is not a request (the link is
// closed).
func (s *Server) serveRelayed(l *linkConn, id uint64, p []byte) bool {
	var rq link.Request
	if link.DecodeRequest(p, &rq) != nil {
		return false
	}
	if d := s.cell.Delay; d > 0 {
		// The tests that set the delay wait for this line: the request is
		// held here, so what they do next happens while the owner holds it.
		s.cfg.Logger.Warn("fault injection: holding a relayed request", "delay", d)
		own := append([]byte(nil), p...) // p is gnet's buffer: gone after this frame
		time.AfterFunc(d, func() {
			_ = l.ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				var rq link.Request
				if !l.closed && link.DecodeRequest(own, &rq) == nil {
					s.serveRelayedNow(l, id, &rq)
				}
				return nil
			}))
		})
		return true
	}
	s.serveRelayedNow(l, id, &rq)
	return true
}

// serveRelayedNow serves rq through its route's handler, as if it had
// landed here with the identity the landing member established (D17: the
// owner trusts it, the relay having authenticated the member), on a
// stand-in conn of the link's loop. The answer joins the link's output at
// once, or, for a pop that parks, when it is completed
// (answerParkedOnLink).
func (s *Server) serveRelayedNow(l *linkConn, id uint64, rq *link.Request) {
	if s.serveLocal(rq, l.replyLater(id)) {
		return // a member-local reset or delete of another member's fan-out
	}
	s.cell.served.Inc()
	ls := l.ls
	cs := ls.standIn(s)
	cs.callLink, cs.callID = l, id
	cs.reqStart = time.Now()
	req := link.ToWire(&ls.relayReq, rq)
	r := relayedRoute(req)
	switch {
	case r == nil:
		cs.refuse(req, errNoRoute)
	case !identity.Level(rq.Access).Allows(r.need):
		cs.refuse(req, identity.ErrLevel)
	default:
		cs.reqRoute = r.id
		cs.tenant, cs.access = s.tenantName(rq.Tenant), identity.Level(rq.Access)
		cs.ts = s.tenantState(cs.tenant)
		r.serve(cs, req, nil)
	}
	l.endStandIn(cs, id)
}

// relayedRoute finds the servedByOwner route of a relayed request; nil for
// anything else (a landing member relays only those).
func relayedRoute(req *wire.Request) *ephemeralRoute {
	if !bytes.HasPrefix(req.Path, []byte(prefix)) {
		return nil
	}
	rest := req.Path[len(prefix):]
	for i := range fixedRoutes {
		r := &fixedRoutes[i]
		if r.cell == servedByOwner && string(rest) == r.path && req.Method == r.method {
			return r
		}
	}
	return nil
}
