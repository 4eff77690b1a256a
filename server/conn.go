package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// Connection states (conn.state): the one word that the loop and a
// goroutine completing the connection's parked pop both read.
const (
	stIdle        int32 = iota // served on its loop
	stBusy                     // an answer is being made off the loop; its AsyncWrite resumes the connection
	stDirect                   // a parked pop whose answer its completer may write to the socket itself (writeDirect)
	stDirectInput              // stDirect, and requests arrived meanwhile: the completer wakes the loop for them
)

// conn is one connection's state. Every field but the atomics is touched
// only on the connection's event loop, except while the connection is in
// stDirect: then the goroutine that completes its parked pop owns the pop's
// fields (sink, reqRoute, reqStart) until it publishes stIdle.
type conn struct {
	s    *Server
	c    gnet.Conn
	loop gnet.EventLoop
	p    *wire.Parser // lent by the loop while part of a request is buffered

	out        []byte     // answers of this round, written at its end
	closeAfter bool       // close once the answers so far have left
	isClosed   bool       // set under wmu: a direct writer checks it
	wmu        sync.Mutex // held across a direct write and by closed, so a socket is never closed under a write
	sink       popSink    // every pop's; one suffices, since input waits while a pop is parked
	deferred   []*conn    // same-loop connections whose parked pop this round completed
	onWritten  gnet.AsyncCallback

	// The identity of the request being served (set by admit).
	tenant string
	access identity.Level
	ts     *tenantState
	// cors holds the header lines that let a member origin's page read the
	// answer (cors.go); nil for every request but such a read.
	cors []byte

	// The link its request waits on, when it is relayed to another member
	// (relay.go), and a stand-in's fields (standin.go).
	linkCall
	standInFields
	// toLink: the request just served upgraded the connection to this
	// link (a gateway's, gatewaylink.go, or a client's, clientlink.go),
	// which it becomes once that is read.
	toLink *linkConn

	// The request being served, for its latency: a busy spell's request is
	// observed when answered (answerAsync, popSink.Complete).
	reqStart time.Time
	reqRoute routeID

	ls *loopState // the state of this connection's loop: its decoders and buffers (loop.go)

	// The body being read (docs/server.md, request bodies).
	need     int64  // bytes gnet must hold before the parser looks again (0: any)
	big      []byte // a large Content-Length request, read into a buffer of its own
	reserved int64  // bytes of Server.inflight this connection holds
	listed   bool   // in its loop's throttled list (conn.throttle)

	// Read by the tick goroutine.
	lastActive atomic.Int64
	headSince  atomic.Int64 // when the pending request's head began, 0 = none
	bodySince  atomic.Int64 // when the pending request's body began, 0 = none
	overSince  atomic.Int64 // when its unsent answers passed the soft limit, 0 = not over
	state      atomic.Int32 // stIdle, stBusy, stDirect or stDirectInput
}

// linkCall is the link a conn's request waits on and its stream. On the
// landing member, callLink is the dialled link carrying the request to its
// owner while it waits (callID its stream, relayHead its connection
// fields, relayUntil its deadline in unix nanos; relay.go). On a
// stand-in, callLink and callID are the link and stream its answer goes
// back on, until a link frame's request is relayed on to its owner.
type linkCall struct {
	callLink   *linkConn
	callID     uint64
	relayHead  wire.Head
	relayUntil int64
}

// standInFields are a stand-in's (standin.go): a conn with no socket that
// serves a request that came on a link, through the same route handlers as
// an HTTP connection's request.
type standInFields struct {
	// isStandIn marks a stand-in: for a request an accepted relay link
	// carried (this member is its owner), or for a link's frame.
	isStandIn bool
	// frameLink is set on a stand-in for a gateway link's or a client
	// link's frame: the link and stream its answer goes to. On a cell
	// member such a frame lands like a client's request and may be relayed
	// to its owner, callLink then being the relay's link.
	frameLink *linkConn
	frameID   uint64
}

func newConn(s *Server, c gnet.Conn) *conn {
	cs := &conn{s: s, c: c, loop: c.EventLoop()}
	cs.ls = s.loopStateOf(cs.loop)
	cs.sink = popSink{cs: cs, e: s.e}
	cs.onWritten = cs.resumeAfterAsync
	cs.lastActive.Store(s.now.Load())
	return cs
}

func (cs *conn) onTraffic() gnet.Action {
	cs.lastActive.Store(cs.s.now.Load())
	for {
		switch cs.state.Load() {
		case stIdle:
			return cs.serveBuffered()
		case stDirect:
			// Whoever completes the parked pop must wake this loop for
			// what just arrived; if it completed first, serve it now.
			if !cs.state.CompareAndSwap(stDirect, stDirectInput) {
				continue
			}
		}
		// Requests wait behind the answer being made; whoever ends the
		// busy spell serves them.
		if !cs.holdQueued() {
			return gnet.Close
		}
		return gnet.None
	}
}

// serveBuffered serves every complete request buffered, in order, until one
// makes the connection busy or its unsent answers pass the soft limit, then
// writes the answers.
func (cs *conn) serveBuffered() gnet.Action {
	for cs.state.Load() == stIdle && !cs.closeAfter {
		if cs.overSince.Load() != 0 && !cs.outboundDrained() {
			// Requests wait, unread, until the client reads its answers.
			if !cs.holdQueued() {
				return gnet.Close
			}
			break
		}
		var buf []byte
		fromBig := cs.big != nil
		if fromBig {
			if !cs.fillBig() {
				break
			}
			buf = cs.big
		} else {
			if cs.need > 0 && int64(cs.c.InboundBuffered()) < cs.need {
				break // the body is not all here: do not look at it again yet
			}
			buf, _ = cs.c.Peek(-1)
			if len(buf) == 0 {
				cs.headSince.Store(0)
				break
			}
		}
		if cs.p == nil {
			cs.p = cs.ls.parsers.Get()
		}
		req, n, err := cs.p.Parse(buf)
		if err != nil {
			cs.out = cs.s.appendError(cs.out, wire.Head{Close: true}, refusal(err))
			cs.closeAfter = true
			break
		}
		if req == nil {
			if cs.p.InBody() {
				if cs.awaitBody(buf) {
					continue // moved into its own buffer: read what is there
				}
				break
			}
			if cs.headSince.Load() == 0 && cs.p.ReadingHead() {
				cs.headSince.Store(cs.s.now.Load())
			}
			break
		}
		cs.headSince.Store(0)
		keepAlive := req.KeepAlive
		cs.route(req)
		cs.bodyDone()
		if fromBig {
			cs.big = nil
		} else {
			cs.c.Discard(n)
		}
		if cs.toLink != nil {
			return cs.becomeLink()
		}
		if !keepAlive {
			cs.closeAfter = true
		}
		if len(cs.out)+cs.c.OutboundBuffered() > cs.s.cfg.OutboundSoft {
			// Checked after every request, not once per round: a client
			// that pipelines requests with large answers and reads none is
			// stopped here, and the loop moves on to other connections.
			if cs.writeOut() == gnet.Close {
				return gnet.Close
			}
			if cs.c.OutboundBuffered() > cs.s.cfg.OutboundSoft {
				cs.throttle()
			}
		}
	}
	if cs.p != nil && cs.p.Idle() {
		cs.ls.parsers.Put(cs.p)
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
	if cs.writeOut() == gnet.Close {
		return gnet.Close
	}
	if cs.parked() && cs.c.OutboundBuffered() == 0 {
		// Everything answered before the parked pop has left, and the loop
		// writes nothing more to this connection until the pop is answered:
		// from here its completer may write the answer itself (and wake the
		// loop for requests already waiting behind the pop).
		next := stDirect
		if cs.c.InboundBuffered() > 0 {
			next = stDirectInput
		}
		cs.state.CompareAndSwap(stBusy, next)
	}
	if cs.closeAfter && cs.state.Load() == stIdle {
		return gnet.Close
	}
	return gnet.None
}

// parked reports whether a pop of this connection is parked: its sink
// belongs to the engine until Complete, and its answer is not yet written.
func (cs *conn) parked() bool { return !cs.sink.parked.IsZero() }

// goBusy marks the connection as waiting for an answer made off the loop.
func (cs *conn) goBusy() {
	cs.state.Store(stBusy)
}

// answerAsync writes an answer made off the loop (any goroutine); the
// connection resumes serving on its loop once it is written.
func (cs *conn) answerAsync(resp []byte) {
	cs.s.m.observe(cs.reqRoute, cs.reqStart)
	if cs.frameLink != nil {
		cs.answerLater(resp) // a link frame's stand-in: no socket of its own
		return
	}
	if err := cs.c.AsyncWrite(resp, cs.onWritten); err != nil {
		return // the connection is gone
	}
}

// resumeAfterAsync runs on the loop after an async answer was written.
func (cs *conn) resumeAfterAsync(c gnet.Conn, err error) error {
	if err != nil || cs.isClosed {
		cs.state.Store(stIdle)
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
	cs.endPark()
	cs.state.Store(stIdle)
	return cs.serveBuffered()
}

// endPark closes a parked pop's busy spell: Complete has run and its answer
// is written, so the engine is done with the sink and it can serve the
// next pop.
func (cs *conn) endPark() {
	if cs.parked() {
		cs.sink.parked = engine.Parked{}
		if cap(cs.sink.resp) > 1<<20 {
			cs.sink.resp, cs.sink.body = nil, nil
		}
	}
	cs.lastActive.Store(cs.s.now.Load())
}

// writeDirect writes the answer of the connection's parked pop straight to
// its socket from the goroutine that completed the pop (another event loop,
// the timing wheel), and ends the busy spell without waking the
// connection's loop unless requests arrived meanwhile or the connection is
// to close after the answer. On two loops this
// takes an eventfd write, a wake-up of the other loop and its epoll round
// off most request/reply round trips.
//
// It is safe because the connection is in stDirect: gnet's outbound buffer
// was empty when the pop parked and the loop adds nothing to it until the
// spell ends, so the answer cannot overtake earlier bytes; and gnet calls
// OnClose (closed takes wmu) before it closes the socket, so the descriptor
// written to is this connection's. A short write hands the rest to gnet.
func (cs *conn) writeDirect(resp []byte) {
	cs.wmu.Lock()
	if cs.isClosed {
		cs.wmu.Unlock()
		return // nobody to answer; the loop has cleaned up
	}
	n, err := unix.Write(cs.c.Fd(), resp)
	for err == unix.EINTR {
		n, err = unix.Write(cs.c.Fd(), resp)
	}
	switch {
	case err == unix.EAGAIN || err == nil && n < len(resp):
		// The socket is full: gnet queues the rest and resumes the
		// connection once it has left.
		cs.wmu.Unlock()
		cs.answerAsync(resp[max(n, 0):])
		return
	case err != nil:
		cs.wmu.Unlock()
		return // the connection is broken; its loop sees it close
	}
	cs.s.directWrites.Add(1)
	cs.s.m.observe(cs.reqRoute, cs.reqStart)
	cs.endPark()
	// The loop has more to do when requests wait behind the pop, or when the
	// pop's request asked to close (closeAfter was set before stDirect).
	wake := cs.state.Swap(stIdle) == stDirectInput || cs.closeAfter
	cs.wmu.Unlock()
	if wake {
		_ = cs.loop.Execute(context.Background(), gnet.RunnableFunc(cs.serveWoken))
	}
}

// serveWoken serves, on the loop, requests that arrived while a parked pop
// was answered by writeDirect, or closes the connection when that pop's
// request asked for it (flush says so).
func (cs *conn) serveWoken(context.Context) error {
	if cs.isClosed || cs.state.Load() != stIdle {
		return nil
	}
	if cs.serveBuffered() == gnet.Close {
		return cs.c.Close()
	}
	return nil
}

// closed runs on the loop when the connection closes: a parked pop is
// removed at once and is never handed messages (D13).
func (cs *conn) closed() {
	cs.wmu.Lock()
	cs.isClosed = true
	parked := cs.sink.parked
	cs.wmu.Unlock()
	if !parked.IsZero() {
		cs.s.e.Cancel(parked)
	}
	if cs.callLink != nil {
		cs.callLink.cancel(cs) // a relayed pop is let go on the owner
	}
	cs.letGoView()
	if cs.p != nil {
		cs.p.Reset() // forgets the half-read request: idle again
		cs.ls.parsers.Put(cs.p)
		cs.p = nil
	}
	cs.big = nil
	cs.bodyDone()
}

// answer appends a whole answer for req.
func (cs *conn) answer(req *wire.Request, status int, body []byte) {
	cs.out = wire.AppendResponse(cs.out, cs.head(req, status), body)
}
