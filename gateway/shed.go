package gateway

import (
	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/internal/acceptloop"
)

// Shedding idle clients when accepting fails for lack of descriptors
// (docs/gateway.md, "Accepting clients"; internal/acceptloop's shed.go): each
// loop closes its clients idle longest, so that a new client is served
// while an idle flood holds the rest. Client links are shed as the broker
// sheds them (docs/server.md, accepting connections).

// shedIdle closes up to n of the client connections idle longest, each loop
// its share, and reports how many it closed (acceptloop.Loop.Shed).
func (g *Gateway) shedIdle(n int) int {
	var loops []gnet.EventLoop
	g.loops.Range(func(loop gnet.EventLoop, _ *loopState) bool {
		loops = append(loops, loop)
		return true
	})
	return acceptloop.ShedOnLoops(loops, n, func(loop gnet.EventLoop, n int) int {
		ls, ok := g.loops.Load(loop)
		if !ok {
			return 0
		}
		return ls.shedIdle(n, g.now.Load())
	})
}

// shedIdle runs on the loop: it closes up to n of its idle clients, client
// connections and client links alike (clientConn.idle, clientLink.idle),
// those last active earliest first, and counts them
// (here, so that a loop that ran it after the acceptor stopped waiting is
// counted too).
func (ls *loopState) shedIdle(n int, now int64) int {
	oldest := acceptloop.Oldest[gnet.Conn]{Max: n}
	for cc := range ls.clients {
		if cc.idle(now) {
			oldest.Offer(cc.c, cc.lastActive)
		}
	}
	for l := range ls.clientLinks {
		if l.idle(now) {
			oldest.Offer(l.c, l.lastCall)
		}
	}
	closed := acceptloop.CloseOn(ls.loop, oldest.Chosen())
	ls.g.m.idleShed.Add(closed)
	return closed
}

// idle reports, on the client's loop, whether it may be closed to free its
// descriptor: nothing in flight to a broker or being answered by the
// gateway (a waiting pop, an admin route), no request partly read (a
// parser held, a head or body being timed, body bytes reserved), no
// request waiting behind answers (held, stalled), nothing waiting to be
// written, not about to close anyway, and no traffic for
// acceptloop.MinIdle.
func (cc *clientConn) idle(now int64) bool {
	return cc.inFlight == 0 && !cc.busy && !cc.closeAfter && cc.p == nil &&
		cc.headSince == 0 && cc.bodySince == 0 && cc.reserved == 0 && !cc.held && !cc.stalled &&
		len(cc.out) == 0 && cc.c.OutboundBuffered() == 0 &&
		acceptloop.IdleLongEnough(cc.lastActive, now)
}

// idle reports, on its loop, whether a client link may be closed to free
// its descriptor: no exchange unsettled (a waiting pop, a request whose
// answer is awaited, a cancelled one's too), no frame partly read or
// waiting behind its unread answers, nothing waiting to be written, and no
// call (a request or token frame) for acceptloop.MinIdle. A ping is not a
// call: a link that only pings is idle (docs/server.md, accepting
// connections).
func (l *clientLink) idle(now int64) bool {
	return l.quiet() && acceptloop.IdleLongEnough(l.lastCall, now)
}

// quiet reports whether a client link holds nothing that closing it would
// cut: idle but for the time since its last call.
func (l *clientLink) quiet() bool {
	return !l.closed && l.pending == 0 && len(l.streams) == 0 && len(l.out) == 0 &&
		l.frameSince == 0 && l.reserved == 0 && !l.stalled &&
		l.c.InboundBuffered() == 0 && l.c.OutboundBuffered() == 0
}
