package server

import (
	"context"
	"errors"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/link"
)

// Links on the event loops (D18; docs/link.md): a connection that speaks
// the link's frames (package link) instead of HTTP, served by the same gnet
// loops as the HTTP connections. Each carries any number of requests at
// once, each on a stream of its own, in one of four roles: the cell's
// relay links, dialled by this member (carrying its calls to an owner) or
// accepted from another (relaylink.go); a gateway's link (gatewaylink.go);
// and a client's (clientlink.go). The requests a link carries are served on
// stand-ins (standin.go). Every field of a link is touched only on its
// loop.

// linkRole is which of the four a link is.
type linkRole uint8

const (
	linkDialled  linkRole = iota // this member dialled it: it carries our calls
	linkAccepted                 // a peer dialled it: we serve its calls
	linkGateway                  // a gateway upgraded a connection to it: we serve its calls (gatewaylink.go)
	linkClient                   // a client upgraded a connection to it: we serve its calls as its identity (clientlink.go)
)

// linkConn is one link on the event loops, whatever its role (the
// gateway's name for its link to a broker).
type linkConn struct {
	s    *Server
	role linkRole
	addr string           // the peer's advertised address (dialled links)
	ls   *loopState       // the loop it lives on (dialled: from the start; accepted: from OnOpen)
	c    gnet.Conn        // nil while a dialled link is being dialled
	in   link.FrameReader // its frames, out of gnet's buffer; a big one still arriving is read aside
	out  []byte           // frames of this round, written by flushLinks

	listed   bool  // in ls.dirty
	closed   bool  // failed or closed: nothing more is sent on it
	lastRead int64 // unix nanos of the last read
	// partialSince: unix nanos since which the inbound buffer has held the
	// start of a frame that is not whole yet (0: none), so that tend can
	// fail a link whose frame does not complete within the frame timeout.
	partialSince int64
	// lastCall: on a client link, unix nanos (the real clock, not the
	// tick's) of its last call: a request or token frame read, or a stream
	// found in flight by tendClientLinks. Pings do not move it (shed.go,
	// linkConn.idle).
	lastCall int64

	// Dialled links: the calls waiting for an answer, by stream id; if the
	// link fails, those whose frame was handed to the socket may have been
	// acted on by the owner (link.Streams).
	calls link.Streams[*conn]

	// The links whose calls this member serves (accepted, gateway and
	// client links): the requests answered later (a parked pop, a request
	// served off the loop or relayed on), by stream id, until their answer
	// has been written or their caller cancelled them.
	streams map[uint64]*conn

	// Client links: the identity of the upgrade (clientlink.go), and the
	// bounds on its unread answers and frames (linkbounds.go): since when
	// its unsent answers are over the soft limit (unix nanos, 0: not
	// over), whether it is listed for the watcher, the bytes of
	// Server.inflight its unread frames hold, and whether it was closed
	// for its unread answers.
	who       linkIdentity
	overSince int64
	// skip: bytes still to come of a request frame refused for its
	// length (refuseLongFrame), dropped as they arrive.
	skip       int64
	listedOver bool
	reserved   int64
	shedding   bool
	offLoop    int // its requests being served off the loop (maxLinkOffLoop)
}

// opened runs on the loop (OnOpen) when the link's connection is there.
func (l *linkConn) opened(c gnet.Conn, s *Server) {
	l.c = c
	l.lastRead = time.Now().UnixNano()
	if l.role != linkDialled {
		l.s = s
		l.ls = s.loopStateOf(c.EventLoop())
		l.streams = map[uint64]*conn{}
		l.countOpen(1)
		switch l.role {
		case linkAccepted:
			l.ls.tendAccepted(l, true)
		case linkClient:
			l.in.Hold = l.holdAside
			l.ls.tendClient(l, true)
		}
		return
	}
	if l.closed {
		// Forgotten while it was dialled: nobody is waiting for it.
		_ = c.Close()
		return
	}
	l.markDirty() // what was relayed while it was dialled
}

// markDirty lists the link to be written once the loop has served every
// connection that was ready: the first link listed schedules flushLinks
// as a task of the loop, which gnet runs after the events of the current
// poll (and of the next, taken at once). So the requests that connections
// of a loop relay to one peer in one poll leave in one write, and so do a
// link's answers, where writing at the end of each connection's round had
// cost one write (and one read and wake-up on the other side) each: −25 %
// broker CPU per relayed round trip, measured (docs/cell-relay.md). It
// costs one eventfd write per flush.
func (l *linkConn) markDirty() {
	if !l.listed {
		l.listed = true
		ls := l.ls
		if !ls.flushPending && !ls.gatewayRead {
			ls.flushPending = true
			_ = ls.loop.Execute(context.Background(), ls.flushTask)
		}
		ls.dirty = append(ls.dirty, l)
	}
}

// onTraffic reads every whole frame that arrived and acts on it.
func (l *linkConn) onTraffic() gnet.Action {
	// The clock is read here rather than from the server's tick (Server.now,
	// up to a second old), which the ping timeout (a member timeout, 1 s in
	// the tests) could not tell from silence.
	l.lastRead = time.Now().UnixNano()
	return l.serveFrames()
}

// serveFrames acts on every whole frame buffered, in order, until a client
// link stops for its unread answers (linkbounds.go).
func (l *linkConn) serveFrames() gnet.Action {
	c := l.c
	if l.role == linkGateway || l.role == linkClient {
		// A gateway's clients are all on its links, so what the requests
		// of one read answer, on this link and on the loop's other links
		// (a push completing a pop parked on another), is nearly all there
		// is to write: the links are written at the end of the read, which
		// spares the flush task's wake-up and a turn of the loop, a round
		// trip's longest waits at low load (docs/gateway.md). A client's
		// link is served the same way.
		l.ls.gatewayRead = true
		defer l.ls.endGatewayRead()
	}
	whole := false // a frame was read: what is left begins a new one
	for {
		if l.skip > 0 && !l.skipFrame() {
			break // the rest of a refused frame is still to come
		}
		if l.overSince != 0 && !l.outboundDrained() {
			break // frames wait, unread, until the client reads its answers
		}
		typ, id, p, ok, err := l.in.Next(c, l.frameLimit())
		if err == link.ErrNotHeld {
			l.refuseUnheld(id)
			return gnet.Close
		}
		if err != nil {
			if l.refuseLongFrame() {
				continue // its bytes are skipped as they come
			}
			return gnet.Close // a protocol error: the link fails
		}
		if !ok {
			break
		}
		if !l.frame(typ, id, p) {
			return gnet.Close
		}
		l.in.Done(c)
		whole = true
		if l.role == linkClient && !l.boundOut() {
			return gnet.Close
		}
	}
	if l.role == linkClient && !l.holdUnread() {
		return gnet.Close
	}
	// A frame begun (buffered, read aside, or a refused one whose bytes
	// are still arriving) is bounded by the frame timeout (tend); it began
	// at this read if a frame was read whole before it.
	switch {
	case l.skip == 0 && !l.in.Begun(c):
		l.partialSince = 0
	case whole || l.partialSince == 0:
		l.partialSince = l.lastRead
	}
	return gnet.None
}

// frame acts on one frame; p is valid only during the call. It reports
// false for a frame that breaks the protocol (the link is closed).
func (l *linkConn) frame(typ byte, id uint64, p []byte) bool {
	if l.role != linkDialled {
		switch typ {
		case link.FrameRequest:
			switch l.role {
			case linkGateway:
				return l.s.serveGatewayFrame(l, id, p)
			case linkClient:
				return l.s.serveClientFrame(l, id, p)
			}
			return l.s.serveRelayed(l, id, p)
		case link.FrameToken:
			return l.role == linkClient && l.s.refreshToken(l, id, p)
		case link.FrameCancel:
			if cs := l.streams[id]; cs != nil {
				delete(l.streams, id)
				cs.letGo()
			}
		case link.FramePing:
			l.out = link.AppendHeader(l.out, link.FramePong, 0, 0)
			l.markDirty()
		default:
			return false
		}
		return true
	}
	switch typ {
	case link.FrameAnswer:
		if cs := l.take(id); cs != nil {
			cs.relayAnswered(p)
		}
	case link.FrameRefuse:
		if cs := l.take(id); cs != nil {
			if link.RefusalServed(p) {
				cs.relayLost() // served, or maybe: its answer could not come back
			} else {
				cs.relayRefused() // busy or closing: the owner did not serve it
			}
		}
	case link.FramePong:
	default:
		return false
	}
	return true
}

// fail ends the link on its loop: its calls are answered 503
// ephemeral_forward_failed when their frame never left, or have their
// client's connection closed when the owner may have acted on them; its
// parked streams are cancelled. A later call dials afresh.
func (l *linkConn) fail(err error) {
	if l.closed {
		return
	}
	l.closed = true
	if l.role == linkDialled {
		if l.ls.links[l.addr] == l {
			delete(l.ls.links, l.addr)
			l.ls.nLinks.Store(int32(len(l.ls.links)))
		}
		l.calls.Fail(
			func(cs *conn) { cs.callLink = nil; cs.relayLost() },    // written: the owner may have acted
			func(cs *conn) { cs.callLink = nil; cs.relayRefused() }, // never left: nothing was done
		)
		if l.c != nil && err != nil && !errors.Is(err, errLinkClosedByPeer) {
			l.s.cfg.Logger.Debug("cell: relay link failed", "peer", l.addr, "err", err)
		}
	}
	for id, cs := range l.streams {
		delete(l.streams, id)
		cs.letGo()
	}
	if l.ls != nil {
		switch l.role {
		case linkAccepted:
			l.ls.tendAccepted(l, false)
		case linkClient:
			l.ls.tendClient(l, false)
		}
	}
	l.countOpen(-1)
	l.release()
	l.returnHeld()
	l.out = nil
	l.in = link.FrameReader{} // a frame read aside is let go with the link
	if l.c != nil {
		_ = l.c.Close()
	}
}

// countOpen moves the gauge of open links of the link's kind: the cell's
// relay links, or the gateway links.
func (l *linkConn) countOpen(n int64) {
	switch l.role {
	case linkGateway:
		l.s.gatewayLinks.Add(n)
	case linkClient:
		l.s.clientLinks.Add(n)
	default:
		l.s.cell.linkCount.Add(n)
	}
}

// errLinkClosedByPeer: the link's connection closed (gnet's OnClose).
var errLinkClosedByPeer = errors.New("the relay connection closed")

// failHolding fails the link and, when it held a large partial frame (in
// gnet's buffer or read aside), has the memory given back to the system
// soon: gnet pools a closed connection's inbound buffer, and a frame read
// aside is garbage no collection comes for while an idle broker allocates
// nothing, so either would be kept for minutes.
func (l *linkConn) failHolding(err error) {
	held := l.c.InboundBuffered() + l.in.Aside()
	l.fail(err)
	if held >= returnHeldAt {
		l.s.returnHeldMemory()
	}
}

// returnHeldAt: a failed link holding this much is worth a collection.
const returnHeldAt = 4 << 20

// returnHeldMemory collects twice (a pooled buffer survives the first
// collection in sync.Pool's victim cache) and gives the freed memory back
// to the system, a second after the first link that asked, on a goroutine
// of its own: links failing together (one per loop, tended in the same
// second) are covered by one return.
func (s *Server) returnHeldMemory() {
	if s.returning.CompareAndSwap(false, true) {
		time.AfterFunc(time.Second, func() {
			runtime.GC()
			debug.FreeOSMemory()
			s.returning.Store(false)
		})
	}
}
