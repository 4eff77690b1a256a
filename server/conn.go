package server

import (
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/wire"
)

// conn is one connection's state. Every field but the atomics is touched
// only on the connection's event loop.
type conn struct {
	s    *Server
	c    gnet.Conn
	loop gnet.EventLoop
	p    *wire.Parser // lent by the loop while part of a request is buffered

	out        []byte // answers of this round, written at its end
	closeAfter bool   // close once the answers so far have left
	isClosed   bool
	parked     bool    // sink belongs to the engine until its Complete
	sink       popSink // every pop's; one suffices, since input waits while a pop is parked
	deferred   []*conn // same-loop connections whose parked pop this round completed
	onWritten  gnet.AsyncCallback

	// The identity of the request being served (set by admit).
	tenant string
	ts     *tenantState

	// The request being served, for its latency: a busy spell's request is
	// observed when answered (answerAsync, popSink.Complete).
	reqStart time.Time
	reqRoute routeID

	ls *loopScratch // the decoders and buffers of this connection's loop

	// Read by the tick goroutine.
	lastActive atomic.Int64
	headSince  atomic.Int64 // when the pending request's head began, 0 = none
	busy       atomic.Bool  // an answer is being made off the loop; input waits
}

func newConn(s *Server, c gnet.Conn) *conn {
	cs := &conn{s: s, c: c, loop: c.EventLoop()}
	cs.ls = s.scratchOf(cs.loop)
	cs.sink = popSink{cs: cs, e: s.e}
	cs.onWritten = cs.resumeAfterAsync
	cs.lastActive.Store(s.now.Load())
	return cs
}

func (cs *conn) onTraffic() gnet.Action {
	cs.lastActive.Store(cs.s.now.Load())
	if cs.busy.Load() {
		if cs.c.InboundBuffered() > cs.s.cfg.MaxPipelined {
			return gnet.Close // requests queue behind a busy one without bound
		}
		return gnet.None
	}
	return cs.serveBuffered()
}

// serveBuffered serves every complete request buffered, in order, until one
// makes the connection busy, then writes the answers.
func (cs *conn) serveBuffered() gnet.Action {
	for !cs.busy.Load() && !cs.closeAfter {
		buf, _ := cs.c.Peek(-1)
		if len(buf) == 0 {
			cs.headSince.Store(0)
			break
		}
		if cs.p == nil {
			cs.p = cs.ls.parser(cs.s.cfg.MaxBodyBytes)
		}
		req, n, err := cs.p.Parse(buf)
		if err != nil {
			cs.out = cs.s.appendError(cs.out, wire.Head{Close: true}, refusal(err))
			cs.closeAfter = true
			break
		}
		if req == nil {
			if cs.p.TakeContinue() {
				cs.out = wire.AppendContinue(cs.out)
			}
			if cs.headSince.Load() == 0 && cs.p.ReadingHead() {
				cs.headSince.Store(cs.s.now.Load())
			}
			break
		}
		cs.headSince.Store(0)
		keepAlive := req.KeepAlive
		cs.route(req)
		cs.c.Discard(n)
		if !keepAlive {
			cs.closeAfter = true
		}
	}
	if cs.p != nil && cs.p.Idle() {
		cs.ls.giveBack(cs.p)
		cs.p = nil
	}
	cs.resumeDeferred()
	return cs.flush()
}

// resumeDeferred resumes the connections of this loop whose parked pops this
// round's pushes and acks completed (popSink.Complete put their answers in
// their output already).
func (cs *conn) resumeDeferred() {
	for len(cs.deferred) > 0 {
		tc := cs.deferred[len(cs.deferred)-1]
		cs.deferred[len(cs.deferred)-1] = nil
		cs.deferred = cs.deferred[:len(cs.deferred)-1]
		if !tc.isClosed && tc.resume() == gnet.Close {
			tc.c.Close()
		}
	}
}

func (cs *conn) flush() gnet.Action {
	if len(cs.out) > 0 {
		if _, err := cs.c.Write(cs.out); err != nil {
			return gnet.Close
		}
		if cap(cs.out) > 1<<20 {
			cs.out = nil // do not pin a huge answer's buffer on an idle connection
		} else {
			cs.out = cs.out[:0]
		}
	}
	if cs.c.OutboundBuffered() > cs.s.cfg.MaxOutbound {
		return gnet.Close // the client does not read its answers
	}
	if cs.closeAfter && !cs.busy.Load() {
		return gnet.Close
	}
	return gnet.None
}

// goBusy marks the connection as waiting for an answer made off the loop.
func (cs *conn) goBusy() {
	cs.busy.Store(true)
}

// answerAsync writes an answer made off the loop (any goroutine); the
// connection resumes serving on its loop once it is written.
func (cs *conn) answerAsync(resp []byte) {
	cs.s.m.observe(cs.reqRoute, cs.reqStart)
	if err := cs.c.AsyncWrite(resp, cs.onWritten); err != nil {
		return // the connection is gone
	}
}

// resumeAfterAsync runs on the loop after an async answer was written.
func (cs *conn) resumeAfterAsync(c gnet.Conn, err error) error {
	if err != nil || cs.isClosed {
		cs.busy.Store(false)
		return nil
	}
	if cs.resume() == gnet.Close {
		return c.Close()
	}
	return nil
}

// resume ends a busy spell on the loop: the answer has left (or sits in
// cs.out), so the connection serves the requests that queued behind it.
func (cs *conn) resume() gnet.Action {
	cs.busy.Store(false)
	if cs.parked {
		// Complete has run and its answer is written: the engine is done
		// with the sink, so it can serve the next pop.
		cs.parked = false
		if cap(cs.sink.resp) > 1<<20 {
			cs.sink.resp, cs.sink.body = nil, nil
		}
	}
	cs.lastActive.Store(cs.s.now.Load())
	return cs.serveBuffered()
}

// closed runs on the loop when the connection closes: a parked pop is
// removed at once and is never handed messages (D13).
func (cs *conn) closed() {
	cs.isClosed = true
	if cs.parked {
		cs.s.e.Cancel(cs.sink.parked)
	}
	if cs.p != nil {
		if cs.p.Reset(); cs.p.Idle() {
			cs.ls.giveBack(cs.p)
		}
		cs.p = nil
	}
}

// answer appends a whole answer for req.
func (cs *conn) answer(req *wire.Request, status int, body []byte) {
	cs.out = wire.AppendResponse(cs.out, req.Head(status), body)
}

// refuse appends an error answer for req.
func (cs *conn) refuse(req *wire.Request, err error) {
	cs.out = cs.s.appendError(cs.out, req.Head(0), refusal(err))
}
