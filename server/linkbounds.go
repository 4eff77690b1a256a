package server

import (
	"bytes"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire"
)

// Bounds on a client link's unread answers and unread frames (docs/link.md,
// "Bounds").
//
// A link carries any number of requests, so a client that sends frames and
// never reads the answers could have the broker hold answers without end,
// as a client pipelining HTTP requests could. A client link is held to the
// limits of an HTTP connection (docs/server.md, "Unread answers"), counted
// in the same metrics:
//
//   - After every frame served, when the link's answers not yet sent pass
//     QUEEN_OUTBOUND_SOFT_BYTES they are handed to gnet at once, and if gnet
//     still holds more than that the link stops being read: its later frames
//     stay unread in gnet's inbound buffer and the loop moves on. The
//     watcher that looks at stopped connections (throttleCheck) looks at it
//     too, serves its frames again once its client has read below the soft
//     limit, and closes it once it has stayed over for QUEEN_OUTBOUND_SOFT_S.
//   - A write that leaves more than QUEEN_OUTBOUND_HARD_BYTES unsent while
//     answers were already waiting closes the link: the answers of a read,
//     the loop's flush (pops that pushes of this loop completed), a parked
//     pop completed elsewhere. A single large answer to a client that reads
//     is not this. Both closes count in queen_ephemeral_outbound_closed_total.
//   - What a link holds unread in gnet's inbound buffer beyond queuedFree (a
//     frame still arriving, or frames queued while the link is stopped) holds
//     as much of QUEEN_MAX_INFLIGHT_BYTES, as a body being read does; a link
//     the bound cannot hold is closed (queen_ephemeral_inflight_refusals_total),
//     and so is a stopped link with more than an HTTP connection may queue
//     (MaxPipelined).
//   - At most maxLinkOffLoop of a link's requests are served off the loop at
//     once (a configure, a delete, a reset in a cell, a listing of many
//     queues): past that, a request of those routes is refused "busy" (not
//     served; the SDKs back off and send it again), and the link's other
//     requests are served as ever, so a slow store holds up no push or pop
//     behind a configure. An HTTP connection serves one request at a time;
//     a link that had every listing it was sent made at once, each one
//     whole, had 1,000 listings of 2,000 queues take the broker past 1 GiB
//     in seconds (reliability.TestUnreadLinkAnswers).
//
// Closing a link loses nothing accepted: a frame not read was not served,
// and the answers it leaves unsent end their streams as "may have been
// served" for the client (docs/link.md), as a closed HTTP connection's do.

// boundOut runs after each frame of a client link is served: unsent answers
// over the soft limit are written now, and the link stops being read when
// gnet still holds more than the soft limit. It reports false when the link
// is to close.
func (l *linkConn) boundOut() bool {
	soft := l.s.cfg.OutboundSoft
	if len(l.out)+l.c.OutboundBuffered() <= soft {
		return true
	}
	if !l.writeOut() {
		return false
	}
	if l.c.OutboundBuffered() > soft {
		l.stopReading()
	}
	return true
}

// writeOut hands the link's answers so far to gnet ahead of the loop's
// flush. It reports false when the link is to close: the write failed, or
// answers were already waiting unread and now pass the hard limit.
func (l *linkConn) writeOut() bool {
	if len(l.out) == 0 {
		return true
	}
	before := l.c.OutboundBuffered()
	if _, err := l.c.Write(l.out); err != nil {
		return false
	}
	if cap(l.out) > 1<<20 {
		l.out = nil
	} else {
		l.out = l.out[:0]
	}
	return l.underHard(before)
}

// underHard reports whether a write that found before bytes unsent left
// the link within the hard limit; one that did not is counted as shed.
func (l *linkConn) underHard(before int) bool {
	if before > 0 && l.c.OutboundBuffered() > l.s.cfg.OutboundHard {
		l.shed()
		return false
	}
	return true
}

// shed counts the link as closed for its unread answers, once: gnet closes
// it after this round, and answers written meanwhile find it over again.
func (l *linkConn) shed() {
	if !l.shedding {
		l.shedding = true
		l.s.tm.outboundShed.Inc()
	}
}

// underHardAfter is underHard after an AsyncWrite of n bytes: whatever gnet
// holds beyond those n was waiting before them.
func (l *linkConn) underHardAfter(n int) bool {
	if l.closed {
		return true
	}
	held := l.c.OutboundBuffered()
	if held > n && held > l.s.cfg.OutboundHard {
		l.shed()
		return false
	}
	return true
}

// stopReading stops serving the link's frames until its client reads, and
// lists it for the watcher (checkThrottledLinks), counted with the stopped
// connections.
func (l *linkConn) stopReading() {
	if l.overSince != 0 {
		return
	}
	l.overSince = l.lastRead
	if l.listedOver {
		return
	}
	l.listedOver = true
	ls, s := l.ls, l.s
	ls.throttledLinks = append(ls.throttledLinks, l)
	ls.nThrottled.Add(1)
	s.nThrottled.Add(1)
	s.watchThrottled()
}

// outboundDrained reports whether a link stopped for its unsent answers may
// be read again, and if so forgets that it was over.
func (l *linkConn) outboundDrained() bool {
	if l.c.OutboundBuffered() > l.s.cfg.OutboundSoft {
		return false
	}
	l.overSince = 0
	return true
}

// stillStopped looks, on its loop, at a listed link: it closes one that
// stayed over the soft limit for too long, and reports whether it is still
// stopped.
func (l *linkConn) stillStopped() bool {
	if l.closed || l.overSince == 0 || l.outboundDrained() {
		return false
	}
	if l.s.now.Load()-l.overSince > int64(l.s.cfg.OutboundSoftTime) {
		l.shed()
		_ = l.c.Close()
		return false
	}
	return true
}

// checkThrottledLinks runs on the loop with checkThrottled: every client
// link stopped for its unread answers is looked at once; one whose client
// has read is served again (it lists and counts itself anew if it stops
// again).
func (ls *loopState) checkThrottledLinks() {
	list := ls.throttledLinks
	ls.throttledLinks, ls.spareLinks = ls.spareLinks[:0], nil
	for i, l := range list {
		list[i] = nil
		if l.stillStopped() {
			ls.throttledLinks = append(ls.throttledLinks, l)
			continue
		}
		l.listedOver = false
		ls.nThrottled.Add(-1)
		ls.s.nThrottled.Add(-1)
		if !l.closed && l.serveFrames() == gnet.Close {
			_ = l.c.Close()
		}
	}
	ls.spareLinks = list[:0]
}

// holdUnread runs at the end of a client link's read: what it leaves unread
// in gnet's inbound buffer, with a frame read aside (holdAside), beyond
// queuedFree holds as much of the bound on request bytes in flight. It
// reports false, and the link is closed, when the bound cannot hold it, or
// when a stopped link queued more than an HTTP connection may.
func (l *linkConn) holdUnread() bool {
	s := l.s
	n := int64(l.c.InboundBuffered() + l.in.Aside())
	if l.overSince != 0 && n > int64(s.cfg.MaxPipelined) {
		return false
	}
	if n <= queuedFree {
		l.release()
		return true
	}
	if n < l.reserved {
		s.inflight.Add(n - l.reserved)
		l.reserved = n
		return true
	}
	if s.reserve(&l.reserved, n) {
		return true
	}
	s.tm.bodyRefused.Inc()
	return false
}

// holdAside is a client link's FrameReader.Hold: a frame of n bytes still
// arriving is read aside (link.BigFrame) only once n is held of the bound
// on request bytes in flight, as an HTTP body's length is on its head (its
// bytes so far are all that the link has buffered); refused, the frame is
// (refuseUnheld).
func (l *linkConn) holdAside(n int) bool { return l.s.reserve(&l.reserved, int64(n)) }

// refuseUnheld answers a frame whose length the bound on request bytes in
// flight cannot hold as HTTP answers such a body, 503 on its stream, and
// counts it; the link is then closed, since the frame's bytes are not read.
func (l *linkConn) refuseUnheld(id uint64) {
	s := l.s
	s.tm.bodyRefused.Inc()
	l.answer(id, s.appendError(nil, wire.Head{}, errInflight))
}

// release gives back what the link's unread frames held of the bound on
// request bytes in flight.
func (l *linkConn) release() {
	if l.reserved != 0 {
		l.s.inflight.Add(-l.reserved)
		l.reserved = 0
	}
}

// maxLinkOffLoop bounds the requests of one client link served off the
// loop at once (see above). A few let an SDK's concurrent configures share
// one link; each may hold a whole answer (a listing of many queues).
const maxLinkOffLoop = 4

// noteOffLoop runs when the request of stream's stand-in cs was not
// answered on the loop: one served off the loop (not a parked pop, nor one
// relayed to another member, nor a parked view read, bounded apart:
// cellview.go) counts against maxLinkOffLoop until offLoopDone.
func (l *linkConn) noteOffLoop(cs *conn) {
	if l.role == linkClient && !cs.parked() && cs.callLink == l && cs.reqRoute != routeCellView {
		l.offLoop++
	}
}

// offLoopDone runs on the loop when a request served off the loop was
// answered.
func (l *linkConn) offLoopDone() {
	if l.role == linkClient {
		l.offLoop--
	}
}

// offLoopBusy reports whether rq, a request frame of a client link, is to
// be refused "busy": the link is at maxLinkOffLoop and rq is of a route
// that may be served off the loop. A listing is refused whatever its
// length (it is known only once made), a reset in a cell as well as
// outside it.
func (l *linkConn) offLoopBusy(rq *link.Request) bool {
	if l.offLoop < maxLinkOffLoop {
		return false
	}
	path := rq.Target
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	switch string(rq.Method) {
	case "POST":
		return string(path) == prefix+"configure" || string(path) == prefix+"reset"
	case "DELETE":
		return bytes.HasPrefix(path, []byte(prefix+"queue/"))
	case "GET":
		return string(path) == prefix+"queues"
	}
	return false
}

// returnHeld runs as a client link fails: one closed for its unread
// answers, or holding many bytes in gnet's buffers, has the memory its
// answers took given back to the system soon (returnHeldMemory), as a relay
// link holding a large frame does. Without it a broker that shed a link
// holding listings kept 106 MiB for minutes after (reliability.TestUnreadLinkAnswers).
func (l *linkConn) returnHeld() {
	if l.role != linkClient || l.c == nil {
		return
	}
	if l.shedding || l.c.OutboundBuffered()+l.c.InboundBuffered() >= returnHeldAt {
		l.s.returnHeldMemory()
	}
}
