package server

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/crossorigin"
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

	// A connection's request relayed to another member, or a stand-in's
	// request ((relay.go, standin.go)).
	linkCall
	standInFields
	// toLink: the request just served upgraded the connection to this
	// link (a gateway's, gatewaylink.go, or a client's, clientlink.go),
	// which it becomes once that is read.
	toLink *relayLink

	// The request being served, for its latency: a busy spell's request is
	// observed when answered (answerAsync, popSink.Complete).
	reqStart time.Time
	reqRoute routeID

	ls *loopState // the decoders and buffers of this connection's loop

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
// landing member, relayLink is the dialled link carrying the request to its
// owner while it waits (relayID its stream, relayHead its connection
// fields, relayUntil its deadline in unix nanos; relay.go). On a
// stand-in, relayLink and relayID are the link and stream its answer goes
// back on, until a link frame's request is relayed on to its owner.
type linkCall struct {
	relayLink  *relayLink
	relayID    uint64
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
	// to its owner, relayLink then being the relay's link.
	frameLink *relayLink
	frameID   uint64
}

// Request bodies (docs/server.md, request bodies).
const (
	// bigBody: a Content-Length request longer than this whose body is
	// still arriving is moved out of gnet's buffer into one of its own,
	// of exactly its length, and read into it as it comes; a chunked one
	// once more than this of it is buffered.
	bigBody = 64 << 10
	// earlyIdentity: a request whose body is longer than this (or
	// chunked) and still arriving has its identity checked on its head.
	earlyIdentity = 64 << 10
)

// errInflight: the bound on request bytes in flight across connections is
// reached. 503 because it is the broker's state, not the request's fault.
var errInflight = &wire.Error{Status: 503, Code: codeUnavailable, Msg: "the broker holds too many request bytes in flight; retry", Close: true}

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

// awaitBody runs when a request's head has been read and its body is not
// all here. The first time, it checks the request's identity on its head
// (a large or chunked body, or one the client waits to be invited to send
// with Expect: 100-continue), reserves the body's bytes against the bound on
// request bytes in flight, and only then says 100 Continue when asked; it
// refuses (and closes) instead when either fails. A large Content-Length
// request is then moved into a buffer of its own (it reports true: read
// into it); a smaller one waits in gnet's buffer until all of it is there.
// A chunked body's reservation grows with the bytes it holds.
func (cs *conn) awaitBody(buf []byte) bool {
	need := cs.p.Need()
	cont := cs.p.TakeContinue() // true once, with the head
	if cs.bodySince.Load() == 0 {
		cs.bodySince.Store(cs.s.now.Load())
		if cont || need == 0 || need-int64(len(buf)) > earlyIdentity {
			if werr := cs.earlyIdentity(buf); werr != nil {
				cs.refuseBody(werr)
				return false
			}
		}
	}
	hold := need
	if need == 0 {
		hold = int64(len(buf)) // chunked: what is held so far
	}
	if !cs.reserve(hold) {
		cs.s.tm.bodyRefused.Inc()
		cs.refuseBody(errInflight)
		return false
	}
	if cont {
		cs.out = wire.AppendContinue(cs.out)
	}
	if need == 0 { // chunked
		switch {
		case cs.big != nil:
			return true // read on
		case len(buf) > bigBody:
			cs.big = append(make([]byte, 0, 2*len(buf)), buf...)
			cs.c.Discard(len(buf))
			return true
		}
		return false
	}
	if need <= bigBody {
		cs.need = need
		return false
	}
	cs.big = make([]byte, len(buf), need)
	copy(cs.big, buf)
	cs.c.Discard(len(buf))
	return true
}

// earlyIdentity checks the pending request on its head: a browser's
// request from another origin is refused first (D20), whatever its route;
// then the identity of the routes that need one and take a body
// (docs/server.md, request bodies): POST and PUT under /api/v1/.
func (cs *conn) earlyIdentity(buf []byte) *wire.Error {
	head := cs.p.PendingHead(buf)
	if crossorigin.StateChanging(head.Method, head.Path) {
		if werr := cs.s.cfg.Browsers.Check(head); werr != nil {
			return werr
		}
	}
	if head.Method != wire.MethodPost && head.Method != wire.MethodPut ||
		!bytes.HasPrefix(head.Path, []byte("/api/v1/")) {
		return nil
	}
	_, _, werr := cs.s.auth.Identify(head)
	return werr
}

// refuseBody answers the pending request, whose body is not read, and
// closes the connection after the answer: the unread body cannot be told
// from the next request.
func (cs *conn) refuseBody(werr *wire.Error) {
	cs.out = cs.s.appendError(cs.out, wire.Head{Close: true}, werr)
	cs.closeAfter = true
}

// fillBig reads what arrived into the large request's own buffer. A
// Content-Length request is read up to its length, and fillBig reports
// whether it is whole. A chunked one is read one piece at a time, the chunk
// data or the line the parser examines next (wire.Parser.Want), so that no
// byte of the request after it is taken from gnet's buffer; fillBig reports
// whether anything was read.
func (cs *conn) fillBig() bool {
	if cs.p.Need() > 0 {
		for len(cs.big) < cap(cs.big) {
			n, _ := cs.c.Read(cs.big[len(cs.big):cap(cs.big)])
			if n == 0 {
				return false
			}
			cs.big = cs.big[:len(cs.big)+n]
		}
		return true
	}
	avail := cs.c.InboundBuffered()
	if avail == 0 {
		return false
	}
	data, line := cs.p.Want()
	take := int(min(int64(avail), data))
	if line {
		// Up to the next LF; without one, all of what is here belongs to
		// the line (the parser refuses a line that grows too long).
		peek, _ := cs.c.Peek(min(avail, maxPeekLine))
		take = len(peek)
		if i := bytes.IndexByte(peek, '\n'); i >= 0 {
			take = i + 1
		}
	}
	cs.big = slices.Grow(cs.big, take)
	n, _ := cs.c.Read(cs.big[len(cs.big) : len(cs.big)+take])
	cs.big = cs.big[:len(cs.big)+n]
	return n > 0
}

// maxPeekLine bounds what fillBig looks at to find a chunked body's line.
const maxPeekLine = 4 << 10

// reserve makes the connection hold n bytes of the bound on request bytes
// in flight (more when it already holds some), or reports false when the
// bound does not allow it.
func (cs *conn) reserve(n int64) bool { return cs.s.reserve(&cs.reserved, n) }

// reserve makes a holder that holds *held bytes of the bound on request
// bytes in flight hold n (more when it already holds some), or reports
// false when the bound does not allow it: a connection's body being read,
// or a client link's unread frames (linkbounds.go).
func (s *Server) reserve(held *int64, n int64) bool {
	d := n - *held
	if d <= 0 {
		return true
	}
	for {
		cur := s.inflight.Load()
		if cur+d > s.cfg.MaxInflightBytes {
			return false
		}
		if s.inflight.CompareAndSwap(cur, cur+d) {
			*held = n
			return true
		}
	}
}

// queuedFree is what a connection may queue unread behind a busy request
// (or while stopped for its unread answers) without holding any of the
// bound on request bytes in flight: a few pipelined requests cost nothing.
const queuedFree = 64 << 10

// holdQueued counts the bytes queued unread behind a busy or stopped
// connection against the bound on request bytes in flight, so that many
// connections each queueing up to MaxPipelined cannot add up without
// bound (docs/server.md, request bodies). It reports false, and the
// connection is closed, past the connection's own MaxPipelined or when the
// bound cannot hold them. The hold is given back with the next request's
// body (bodyDone) or when the connection closes.
func (cs *conn) holdQueued() bool {
	n := cs.c.InboundBuffered()
	if n > cs.s.cfg.MaxPipelined {
		return false
	}
	if n <= queuedFree || cs.reserve(int64(n)) {
		return true
	}
	cs.s.tm.bodyRefused.Inc()
	return false
}

// bodyDone ends the body of the request just served (or of a connection
// closed): its reservation is given back and its timer stops.
func (cs *conn) bodyDone() {
	if cs.reserved != 0 {
		cs.s.inflight.Add(-cs.reserved)
		cs.reserved = 0
	}
	cs.need = 0
	if cs.bodySince.Load() != 0 {
		cs.bodySince.Store(0)
	}
}

// writeOut hands this round's answers so far to gnet.
func (cs *conn) writeOut() gnet.Action {
	if len(cs.out) == 0 {
		return gnet.None
	}
	before := cs.c.OutboundBuffered()
	if _, err := cs.c.Write(cs.out); err != nil {
		return gnet.Close
	}
	if cap(cs.out) > 1<<20 {
		cs.out = nil // do not pin a huge answer's buffer on an idle connection
	} else {
		cs.out = cs.out[:0]
	}
	if before > 0 && cs.c.OutboundBuffered() > cs.s.cfg.OutboundHard {
		// Answers were already waiting unread and now pass the hard limit.
		// One large answer to a client that reads is not this.
		cs.s.tm.outboundShed.Inc()
		return gnet.Close
	}
	return gnet.None
}

// throttle stops serving the connection until its client reads: its loop
// looks at it again every throttleCheck (loopState.checkThrottled).
func (cs *conn) throttle() {
	if !cs.overSince.CompareAndSwap(0, cs.s.now.Load()) || cs.listed {
		return
	}
	cs.listed = true
	cs.ls.throttled = append(cs.ls.throttled, cs)
	cs.ls.nThrottled.Add(1)
	cs.s.nThrottled.Add(1)
	cs.s.watchThrottled()
}

// outboundDrained reports whether a connection stopped for its unsent
// answers may be served again, and if so forgets that it was over.
func (cs *conn) outboundDrained() bool {
	if cs.c.OutboundBuffered() > cs.s.cfg.OutboundSoft {
		return false
	}
	cs.overSince.Store(0)
	return true
}

// checkOutbound looks, on its loop, at a connection stopped for its unread
// answers: it closes one that stayed over the soft limit for too long and
// serves one whose client has read (gnet says nothing when its buffer
// drains). It reports whether the connection is still stopped.
func (cs *conn) checkOutbound() (stopped bool) {
	since := cs.overSince.Load()
	if cs.isClosed || since == 0 {
		return false
	}
	if cs.state.Load() != stIdle {
		return true
	}
	if !cs.outboundDrained() {
		if cs.s.now.Load()-since > int64(cs.s.cfg.OutboundSoftTime) {
			cs.s.tm.outboundShed.Inc()
			cs.c.Close()
			return false
		}
		return true
	}
	if cs.serveBuffered() == gnet.Close {
		cs.c.Close()
	}
	return false
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
	if cs.relayLink != nil {
		cs.relayLink.cancel(cs) // a relayed pop is let go on the owner
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
	cs.out = wire.AppendResponse(cs.out, req.Head(status), body)
}
