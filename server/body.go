package server

import (
	"bytes"
	"slices"

	"github.com/queenmq/ephemeral/internal/crossorigin"
	"github.com/queenmq/ephemeral/wire"
)

// A request's body (docs/server.md, request bodies): a head is checked
// before its body is read, the body's bytes are held against the bound on
// request bytes in flight while they arrive, a large one is read into a
// buffer of its own, and bytes queued unread behind a busy connection are
// held against the same bound.

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
