package gateway

import (
	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/internal/acceptloop"
)

// Shedding idle clients when accepting fails for lack of descriptors
// (docs/gateway.md, "Accepting clients"; internal/acceptloop's shed.go): each
// loop closes its clients idle longest, so that a new client is served
// while an idle flood holds the rest.

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

// shedIdle runs on the loop: it closes up to n of its idle clients
// (clientConn.idle), those last active earliest first, and counts them
// (here, so that a loop that ran it after the acceptor stopped waiting is
// counted too).
func (ls *loopState) shedIdle(n int, now int64) int {
	oldest := acceptloop.Oldest[*clientConn]{Max: n}
	for cc := range ls.clients {
		if cc.idle(now) {
			oldest.Offer(cc, cc.lastActive)
		}
	}
	closed := 0
	for _, cc := range oldest.Chosen() {
		if ls.loop.Close(cc.c) == nil { // on the loop: the descriptor is closed now
			closed++
		}
	}
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
