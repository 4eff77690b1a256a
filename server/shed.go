package server

import (
	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/internal/acceptloop"
)

// Shedding idle connections when accepting fails for lack of descriptors
// (docs/server.md, accepting connections; internal/acceptloop's shed.go):
// the loops close their connections idle longest, HTTP connections and
// client links alike, so that a new client is served while an idle flood
// holds the rest.

// shedIdle closes up to n of the connections idle longest, each loop its
// share, and reports how many it closed (acceptloop.Loop.Shed).
func (s *Server) shedIdle(n int) int {
	var loops []gnet.EventLoop
	s.loops.Range(func(loop gnet.EventLoop, _ *loopState) bool {
		loops = append(loops, loop)
		return true
	})
	return acceptloop.ShedOnLoops(loops, n, s.shedOnLoop)
}

// shedOnLoop runs on loop: it closes up to n of the loop's connections
// and client links that are idle (conn.idle, linkConn.idle) and were last
// active earliest, oldest first. The scan reads the connections' own
// fields, which only their loop may. It counts what it closed itself: a
// loop that ran it after the acceptor stopped waiting closed connections
// all the same.
func (s *Server) shedOnLoop(loop gnet.EventLoop, n int) int {
	now := s.now.Load()
	oldest := acceptloop.Oldest[gnet.Conn]{Max: n}
	s.conns.Range(func(cs *conn, _ struct{}) bool {
		if cs.loop == loop && cs.idle(now) {
			oldest.Offer(cs.c, cs.lastActive.Load())
		}
		return true
	})
	for l := range s.loopStateOf(loop).clientLinks {
		if l.idle(now) {
			oldest.Offer(l.c, l.lastCall)
		}
	}
	closed := acceptloop.CloseOn(loop, oldest.Chosen())
	s.tm.idleShed.Add(closed)
	return closed
}

// idle reports, on the connection's loop, whether it may be closed to free
// its descriptor: no request being answered (a parked pop, a store write, a
// relayed request, a streamed listing: each makes it busy), none partly
// read (the connection holds a parser exactly while part of one is
// buffered), nothing waiting to be written, not about to close anyway, and
// no traffic for acceptloop.MinIdle. A connection upgraded to a link is no
// longer among the server's conns: a client link is judged by
// linkConn.idle, a gateway link is never shed.
func (cs *conn) idle(now int64) bool {
	return cs.state.Load() == stIdle && !cs.closeAfter && cs.p == nil &&
		len(cs.out) == 0 && cs.c.OutboundBuffered() == 0 &&
		acceptloop.IdleLongEnough(cs.lastActive.Load(), now)
}

// idle reports, on its loop, whether a client link may be closed to free
// its descriptor, as an idle HTTP connection is: no stream in flight (a
// parked pop, a store call, a request relayed to another member: each
// holds its stream until answered), nothing partly read (a frame begun, or
// the rest of a refused one to skip), nothing waiting to be written, not
// stopped for its unread answers, and no call for acceptloop.MinIdle. A
// ping is not a call: an SDK pings an idle link every 30 s to keep it, and
// a link that carries nothing else is as idle as a keep-alive connection
// that carries nothing (docs/server.md, accepting connections). Closing it
// loses nothing: it has no stream, and its client dials again when it next
// has a call.
func (l *linkConn) idle(now int64) bool {
	return l.quiet() && acceptloop.IdleLongEnough(l.lastCall, now)
}

// quiet reports whether a client link holds nothing that closing it would
// cut: idle but for the time since its last call.
func (l *linkConn) quiet() bool {
	return !l.closed && len(l.streams) == 0 && l.offLoop == 0 && l.skip == 0 &&
		l.overSince == 0 && l.partialSince == 0 && len(l.out) == 0 &&
		l.c.InboundBuffered() == 0 && l.c.OutboundBuffered() == 0
}
