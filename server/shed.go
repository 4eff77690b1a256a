package server

import (
	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/internal/acceptloop"
)

// Shedding idle connections when accepting fails for lack of descriptors
// (docs/server.md, accepting connections; internal/acceptloop's shed.go):
// the loops close their connections idle longest, so that a new client is
// served while an idle flood holds the rest.

// shedIdle closes up to n of the connections idle longest, each loop its
// share, and reports how many it closed (acceptloop.Loop.Shed).
func (s *Server) shedIdle(n int) int {
	var loops []gnet.EventLoop
	s.scratch.Range(func(loop gnet.EventLoop, _ *loopScratch) bool {
		loops = append(loops, loop)
		return true
	})
	return acceptloop.ShedOnLoops(loops, n, s.shedOnLoop)
}

// shedOnLoop runs on loop: it closes up to n of the loop's connections
// that are idle (conn.idle) and were last active earliest, oldest first.
// The scan reads the connections' own fields, which only their loop may.
// It counts what it closed itself: a loop that ran it after the acceptor
// stopped waiting closed connections all the same.
func (s *Server) shedOnLoop(loop gnet.EventLoop, n int) int {
	now := s.now.Load()
	oldest := acceptloop.Oldest[*conn]{Max: n}
	s.conns.Range(func(cs *conn, _ struct{}) bool {
		if cs.loop == loop && cs.idle(now) {
			oldest.Offer(cs, cs.lastActive.Load())
		}
		return true
	})
	closed := 0
	for _, cs := range oldest.Chosen() {
		if loop.Close(cs.c) == nil { // on the loop: the descriptor is closed now
			closed++
		}
	}
	s.tm.idleShed.Add(closed)
	return closed
}

// idle reports, on the connection's loop, whether it may be closed to free
// its descriptor: no request being answered (a parked pop, a store write, a
// relayed request, a streamed listing: each makes it busy), none partly
// read (the connection holds a parser exactly while part of one is
// buffered), nothing waiting to be written, not about to close anyway, and
// no traffic for acceptloop.MinIdle. A connection upgraded to a gateway
// link is no longer among the server's conns.
func (cs *conn) idle(now int64) bool {
	return cs.state.Load() == stIdle && !cs.closeAfter && cs.p == nil &&
		len(cs.out) == 0 && cs.c.OutboundBuffered() == 0 &&
		acceptloop.IdleLongEnough(cs.lastActive.Load(), now)
}
