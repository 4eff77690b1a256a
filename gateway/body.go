package gateway

import (
	"bytes"
	"slices"

	"github.com/queenmq/ephemeral/wire"
)

// A request's head and body, as the broker reads them (docs/gateway.md,
// "The front door"; the broker's own rules are docs/server.md, request
// bodies).
//
// The head is parsed once, by offsets, however many reads it takes
// (wire.Parser). Once it is in and the body is still arriving, the request
// is judged on its head: identity, route, level and the plan's gate for a
// forwarded route, the admin scope for an admin route. A request that fails
// is answered and its connection closed without one more byte of its body
// being read. One that passes reserves its body's bytes against the bound
// on request bytes in flight across all connections (MaxInflightBytes) or
// is refused 503 on its head. Its body is then read as it comes: a small
// Content-Length body waits in gnet's buffer until all of it is there (it is
// not looked at again before), a larger one, or a chunked one past bigBody,
// is moved into a buffer of its own and read into it. The head may take
// HeaderTimeout and the body BodyTimeout (closeIdle closes a connection past
// either).

// bigBody: a Content-Length request longer than this whose body is still
// arriving is moved out of gnet's buffer into one of its own, of exactly its
// length; a chunked one once more than this of it is buffered (the
// broker's rule).
const bigBody = 64 << 10

// queuedFree is what a client may have buffered, unread, behind a request
// that waits (or while an admin route is answered) without holding any of
// the bound on request bytes in flight: a few pipelined requests cost
// nothing.
const queuedFree = 64 << 10

// errInflight: the bound on request bytes in flight across connections is
// reached; the broker's answer for the same state (503
// ephemeral_unavailable, the connection closed: its body is not read).
var errInflight = &wire.Error{Status: 503, Code: codeUnavailable, Close: true,
	Msg: "the gateway holds too many request bytes in flight (QUEEN_MAX_INFLIGHT_BYTES); retry"}

// awaitBody runs when a request's head has been read and its body is not
// all here. The first time, the request is judged on its head (headGate),
// and only then is 100 Continue said when asked; its body's bytes are
// reserved. It is refused, and the connection closed, when either fails
// (refuseBody). A large Content-Length body is then moved into a buffer of
// its own (it reports true: read into it); a smaller one waits in gnet's
// buffer until all of it is there. A chunked body's reservation grows with
// the bytes it holds.
func (cc *clientConn) awaitBody(buf []byte) bool {
	need := cc.p.Need()
	cont := cc.p.TakeContinue() // true once, with the head
	if cc.bodySince == 0 {
		cc.bodySince = cc.g.now.Load()
		if e := cc.headGate(cc.p.PendingHead(buf)); e != nil {
			cc.refuseBody(e)
			return false
		}
	}
	hold := need
	if need == 0 {
		hold = int64(len(buf)) // chunked: what is held so far
	}
	if !cc.reserve(hold) {
		cc.refuseBody(errInflight)
		return false
	}
	if cont {
		cc.out = wire.AppendContinue(cc.out)
	}
	if need == 0 { // chunked
		switch {
		case cc.big != nil:
			return true // read on
		case len(buf) > bigBody:
			cc.big = append(make([]byte, 0, 2*len(buf)), buf...)
			_, _ = cc.c.Discard(len(buf))
			return true
		}
		return false
	}
	if need <= bigBody {
		cc.need = need
		return false
	}
	cc.big = make([]byte, len(buf), need)
	copy(cc.big, buf)
	_, _ = cc.c.Discard(len(buf))
	return true
}

// headGate judges a request on its head, before its body is read: what
// handle and forward would refuse without the body. A body on /health is
// not needed and is bounded like any other.
func (cc *clientConn) headGate(req *wire.Request) *wire.Error {
	path := req.Path
	if e := cc.crossOrigin(req); e != nil {
		return e
	}
	switch {
	case bytes.Equal(path, []byte(healthPath)):
		return nil
	case bytes.Equal(path, []byte(metricsPath)), bytes.HasPrefix(path, []byte(adminPrefix)):
		return cc.adminRefusal(req)
	case bytes.Equal(path, []byte(clientLinkPath)):
		_, _, _, e := cc.g.cfg.Auth.IdentifyLink(req)
		return e
	}
	_, e := cc.gate(req)
	return e
}

// refuseBody answers the pending request, whose body is not read (or
// whose framing is broken), and closes the connection after the answer:
// the unread body cannot be told from the next request. With answers in
// flight before it, the refusal waits for them (answeredAll) and nothing
// more is read meanwhile.
func (cc *clientConn) refuseBody(e *wire.Error) {
	if cc.inFlight > 0 {
		cc.refuseLater, cc.held = e, true
		return
	}
	cc.g.m.refused(e.Code)
	cc.out = wire.AppendError(cc.out, wire.Head{Status: e.Status, Close: true}, e)
	cc.closeAfter = true
}

// fillBig reads what arrived into the large request's own buffer. A
// Content-Length request is read up to its length, and fillBig reports
// whether it is whole. A chunked one is read one piece at a time, the chunk
// data or the line the parser examines next (wire.Parser.Want), so that no
// byte of the request after it is taken from gnet's buffer; fillBig reports
// whether anything was read. A request already whole in it (held for the
// answers in flight) is not read into again.
func (cc *clientConn) fillBig() bool {
	if cc.bigWhole {
		return true
	}
	if cc.p.Need() > 0 {
		for len(cc.big) < cap(cc.big) {
			n, _ := cc.c.Read(cc.big[len(cc.big):cap(cc.big)])
			if n == 0 {
				return false
			}
			cc.big = cc.big[:len(cc.big)+n]
		}
		return true
	}
	avail := cc.c.InboundBuffered()
	if avail == 0 {
		return false
	}
	data, line := cc.p.Want()
	take := int(min(int64(avail), data))
	if line {
		// Up to the next LF; without one, all of what is here belongs to
		// the line (the parser refuses a line that grows too long).
		peek, _ := cc.c.Peek(min(avail, maxPeekLine))
		take = len(peek)
		if i := bytes.IndexByte(peek, '\n'); i >= 0 {
			take = i + 1
		}
	}
	cc.big = slices.Grow(cc.big, take)
	n, _ := cc.c.Read(cc.big[len(cc.big) : len(cc.big)+take])
	cc.big = cc.big[:len(cc.big)+n]
	return n > 0
}

// maxPeekLine bounds what fillBig looks at to find a chunked body's line.
const maxPeekLine = 4 << 10

// reserve makes the connection hold n bytes of the bound on request bytes
// in flight (more when it already holds some), or reports false when the
// bound does not allow it, even once the loop's unread answers are counted
// again.
func (cc *clientConn) reserve(n int64) bool {
	return cc.ls.reserveInflight(&cc.reserved, n)
}

// reserveInflight makes *held, what a client connection or link holds of
// the bound on request bytes in flight, n (more when it holds some), or
// reports false when the bound does not allow it, even once the loop's
// unread answers are counted again.
func (ls *loopState) reserveInflight(held *int64, n int64) bool {
	d := n - *held
	if d <= 0 {
		return true
	}
	g := ls.g
	recounted := false
	for {
		cur := g.inflight.Load()
		if cur+d > g.cfg.MaxInflightBytes {
			if recounted {
				return false
			}
			ls.recountOutbound() // answers that left give their room back
			recounted = true
			continue
		}
		if g.inflight.CompareAndSwap(cur, cur+d) {
			*held = n
			return true
		}
	}
}

// releaseInflight gives back what *held holds of the bound.
func (ls *loopState) releaseInflight(held *int64) {
	if *held != 0 {
		ls.g.inflight.Add(-*held)
		*held = 0
	}
}

// holdQueued counts the bytes a client has buffered, unread, while its next
// request waits (for the answers in flight, or an admin answer) against the
// bound on request bytes in flight, so that many clients doing so cannot
// add up without bound. It reports false, and the connection is closed,
// past MaxBodyBytes and a head, or when the bound cannot hold them. The
// hold is given back with the request's body (bodyDone) or when the
// connection closes.
func (cc *clientConn) holdQueued() bool {
	n := int64(cc.c.InboundBuffered())
	if n > cc.g.cfg.MaxBodyBytes+queuedFree {
		return false
	}
	return n <= queuedFree || cc.reserve(max(n, cc.reserved))
}

// bodyDone ends the body of the request just served (or of a connection
// closed): its reservation is given back and its timer stops.
func (cc *clientConn) bodyDone() {
	if cc.reserved != 0 {
		cc.g.inflight.Add(-cc.reserved)
		cc.reserved = 0
	}
	cc.need = 0
	cc.bodySince = 0
}

// overdue reports whether the client's pending head or body has been
// arriving for longer than its timeout.
func (cc *clientConn) overdue(now int64) bool {
	cfg := &cc.g.cfg
	return cc.headSince != 0 && now-cc.headSince > int64(cfg.HeaderTimeout) ||
		cc.bodySince != 0 && now-cc.bodySince > int64(cfg.BodyTimeout)
}
