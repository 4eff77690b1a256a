package server

import (
	"context"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire"
)

// Stand-ins: a request that came on a link (an accepted relay link's, a
// gateway link's or a client link's frame) is served on a conn with no
// socket, lent by the link's loop, through the route handlers an HTTP
// connection's request takes. Its answer goes back on the link as an
// answer frame on the request's stream, at once or, for a pop that parks,
// once it is completed.

// standIn lends a conn that stands for a request a link carried on this
// loop: no socket (c is nil: a handler that touches it fails loudly in the
// tests), isStandIn set, the loop's state and the loop itself, so that a
// push it serves completes this loop's parked pops in the same round.
func (ls *loopState) standIn(s *Server) *conn {
	if n := len(ls.standIns); n > 0 {
		cs := ls.standIns[n-1]
		ls.standIns = ls.standIns[:n-1]
		return cs
	}
	ls.standInsMade++
	cs := &conn{s: s, loop: ls.loop, ls: ls, standInFields: standInFields{isStandIn: true}}
	cs.sink = popSink{cs: cs, e: s.e}
	return cs
}

// maxIdleStandIns bounds the stand-in conns a loop keeps.
const maxIdleStandIns = 256

// putStandIn takes back a stand-in whose answer has been appended (or, for
// a pop that parked, written or let go): its buffers serve the next
// relayed request of this loop, so a steady stream of relayed waiting pops
// does not allocate a conn and grow its buffers for each.
func (ls *loopState) putStandIn(cs *conn) {
	if len(ls.standIns) >= maxIdleStandIns || cap(cs.out) > 1<<20 || cap(cs.sink.body) > 1<<20 || cap(cs.sink.resp) > 1<<20 {
		return
	}
	cs.out = cs.out[:0]
	cs.sink.parked = engine.Parked{}
	cs.tenant, cs.access, cs.ts = "", 0, nil
	cs.callLink, cs.callID = nil, 0
	cs.frameLink, cs.frameID = nil, 0
	cs.reqRoute = 0
	cs.closeAfter = false
	cs.state.Store(stIdle)
	ls.standIns = append(ls.standIns, cs)
}

// endStandIn ends the serving of stream id's request on stand-in cs: its
// answer joins the link's output, or, for a pop that parked, it waits in
// the link's streams (answered through answerParkedOnLink; a cancel frame
// lets it go).
func (l *linkConn) endStandIn(cs *conn, id uint64) {
	if cs.state.Load() == stBusy {
		l.streams[id] = cs
		l.noteOffLoop(cs)
	} else {
		l.s.m.observe(cs.reqRoute, cs.reqStart)
		l.answer(id, cs.out)
	}
	// Connections of this loop whose parked pops this request completed.
	cs.resumeDeferred()
	if cs.state.Load() != stBusy {
		l.ls.putStandIn(cs)
	}
}

// answer appends the answer of stream id to the link's output.
func (l *linkConn) answer(id uint64, raw []byte) {
	if l.closed {
		return
	}
	if len(raw) > link.MaxFrame {
		l.refuse(id, link.RefuseTooLarge)
		return
	}
	l.out = link.AppendHeader(l.out, link.FrameAnswer, id, len(raw))
	l.out = append(l.out, raw...)
	l.markDirty()
}

// refuse appends a refuse frame with reason for stream id to the link's
// output.
func (l *linkConn) refuse(id uint64, reason byte) {
	if l.closed {
		return
	}
	l.out = link.AppendHeader(l.out, link.FrameRefuse, id, 1)
	l.out = append(l.out, reason)
	l.markDirty()
}

// replyLater returns a reply for stream id that may be called from any
// goroutine: it answers on the link's loop (serveLocal's delete replies
// from a goroutine of its own). For the fan-out's rare requests only.
func (l *linkConn) replyLater(id uint64) func(link.Response) {
	return func(r link.Response) {
		_ = l.ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			l.answer(id, r.Raw)
			return nil
		}))
	}
}

// answerParkedOnLink answers a stand-in's pop that parked on this member,
// from whoever completed it (popSink.Complete): on the link's loop the
// answer joins the link's output, written at the end of that round; from
// anywhere else it is written by the link's AsyncWrite.
func (cs *conn) answerParkedOnLink(by engine.Origin) {
	k := &cs.sink
	l, id := cs.callLink, cs.callID
	cs.s.m.observe(cs.reqRoute, cs.reqStart)
	if pc, ok := by.(*conn); ok && pc.loop == l.ls.loop {
		if l.streams[id] == cs {
			delete(l.streams, id)
			k.resp = wire.AppendResponse(k.resp[:0], k.head, k.body)
			l.answer(id, k.resp) // copied into the link's output
			l.ls.putStandIn(cs)
		}
		return
	}
	// Until the stand-in is taken back (below, on the link's loop), nothing
	// else uses its buffer, so the buffer can be the frame.
	frame := wire.AppendResponse(append(k.resp[:0], make([]byte, link.HeaderLen)...), k.head, k.body)
	link.PutHeader(frame, link.FrameAnswer, id, len(frame)-link.HeaderLen)
	// gnet calls back on the link's loop once the frame is written or
	// copied to the link's output buffer, or the link is gone: either way
	// after endStandIn, and the stand-in's last use.
	n := len(frame)
	_ = l.c.AsyncWrite(frame, func(_ gnet.Conn, err error) error {
		if l.streams[id] == cs {
			delete(l.streams, id)
		}
		l.ls.putStandIn(cs)
		if err == nil && l.role == linkClient && !l.underHardAfter(n) {
			_ = l.c.Close() // unread answers past the hard limit (linkbounds.go)
		}
		return nil
	})
}

// letGo ends the request of a stand-in whose caller went away (a cancel
// frame, or its link closed): a pop parked here is let go as a closed
// connection's is (D13); a link's frame relayed to its owner is
// cancelled there. The stand-in is taken back unless a completion is
// still to come.
func (cs *conn) letGo() {
	if cs.letGoView() {
		cs.ls.putStandIn(cs) // a parked view read: nothing will answer it
		return
	}
	if l := cs.callLink; cs.frameLink != nil && l != nil && l != cs.frameLink {
		l.cancel(cs) // no answer will find it
		cs.ls.putStandIn(cs)
		return
	}
	if cs.s.e.Cancel(cs.sink.parked) {
		cs.ls.putStandIn(cs) // let go: Complete will not run
	}
}
