package gateway

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire"
)

// Client links (docs/gateway.md, "Client links"; the protocol is
// docs/link.md).
//
// A client may turn its connection to the gateway into a link, as it may
// its connection to a broker: GET /api/v1/ephemeral/link with "Upgrade:
// queen-link/1" is answered 101 once the client's identity is established
// as the gateway establishes it for any request. From then on the
// connection carries request frames, each one route of the family, judged
// as the same HTTP request would be at the gateway (the route's
// classification, its level, the plan's gate, the allowance, the rate and
// the parked-pop slots), and forwarded with the link's tenant and level:
// push, pop and ack on the loop's link to the broker, the others (and all
// while there is no such link) on HTTP connections. The broker's answer
// goes back on the frame's stream byte for byte, in whatever order answers
// come. A waiting pop holds its stream and its slot only; a cancel frame,
// or the link closing, gives the slot back and lets the pop go at the
// broker (a cancel frame on the broker link, or closing the pop's own
// connection).
//
// A stream whose request was written to a broker and whose answer was then
// lost ends with a refuse frame "lost": the request may have been served
// (docs/link.md, "The one rule for a lost answer"). One that reached no
// broker is answered 503 ephemeral_forward_failed, nothing done.
//
// A request that is not a waiting pop is never cancelled at the broker: a
// cancel frame only drops its answer, which is still read and metered when
// it comes (a push cancelled at once is still counted), and it keeps its
// place in the link's bound on streams in flight until then.

// clientLinkPath upgrades a client's connection to a link.
const clientLinkPath = "/api/v1/ephemeral/link"

// linkProtocol is the link protocol's version the gateway speaks, as the
// broker does (docs/link.md, "The upgrade").
const linkProtocol = "queen-link/1"

// maxLinkStreams bounds the requests in flight on one client link (the
// broker's bound); one more is refused with a refuse frame "busy", which
// the SDKs back off on.
const maxLinkStreams = 1 << 16

// linkHeadRoom is what a request frame may hold beyond the largest body:
// its target and header lines (the broker's).
const linkHeadRoom = 64 << 10

var (
	errLinkVersion = &wire.Error{Status: 426, Code: wire.CodeBadRequest, Msg: "this route upgrades the connection to a link: send " +
		"Connection: Upgrade and Upgrade: " + linkProtocol + " (the versions this gateway speaks)"}
	errLinkToken   = &wire.Error{Status: 403, Code: codeForbidden, Msg: "a token sent on a link must name the link's tenant"}
	errLinkExpired = &wire.Error{Status: 401, Code: wire.CodeUnauthorized, Msg: "the link's token has expired: send a fresh one in a token frame, or open a new link"}
)

// expiredGrace bounds how long an expired link is kept for the calls it
// carried at exp (the broker's rule, server/clientlink.go): the longest a
// pop may wait, and a little more.
const expiredGrace = int64(wire.MaxPopTimeoutMs)*int64(time.Millisecond) + int64(10*time.Second)

var (
	// linkUpgradeLine names, on a refused upgrade, the versions spoken.
	linkUpgradeLine = []byte("Upgrade: " + linkProtocol + "\r\n")
	linkSwitching   = []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + linkProtocol + "\r\nConnection: Upgrade\r\n\r\n")
)

// clientLink is a client's connection once upgraded. Touched only on its
// loop.
type clientLink struct {
	g  *Gateway
	ls *loopState
	c  gnet.Conn

	// The identity of the upgrade: every frame's. until is when it ends
	// (unix nanos, 0 = never): a JWT's exp, moved by a token frame.
	tenant string
	level  identity.Level
	until  int64
	upIdx  int // the broker its HTTP requests go to first

	// streams are the open streams; pending counts the exchanges not yet
	// settled, those of cancelled streams whose answer is awaited too
	// (the bound on streams in flight).
	streams map[uint64]*exchange
	pending int

	out    []byte // frames to write at the end of this round
	listed bool   // in the loop's list of links to write
	closed bool

	lastRead int64 // unix nanos of the last bytes read (the idle timeout)
	// lastCall: unix nanos of its last call, a request or token frame
	// read, or the last tick that found it holding one (tendLinks); pings
	// do not move it (shed.go, clientLink.idle).
	lastCall     int64
	in           link.FrameReader // its frames: a big one still arriving is read aside
	frameSince   int64            // unix nanos since a frame has been arriving, 0 = none (BodyTimeout)
	reserved     int64            // bytes of Gateway.inflight held for frames arriving or waiting
	queuedOut    int64            // its answers gnet holds unsent, as counted in Gateway.inflight
	stalled      bool             // frames wait, unread, for its answers to drain
	stalledSince int64            // unix nanos, when it stalled
	req          wire.Request
	scratch      []byte
}

// upgradeToLink answers the upgrade to a client link (the connection
// becomes one once the 101 is written: becomeLink). The identity is
// established first, as on every route: a client without a credential
// learns nothing else.
func (cc *clientConn) upgradeToLink(req *wire.Request) {
	if req.Method != wire.MethodGet {
		cc.refuse(req, errMethod, 0)
		return
	}
	tenant, level, until, e := cc.g.cfg.Auth.IdentifyLink(req)
	if e != nil {
		cc.refuse(req, e, 0)
		return
	}
	if !speaksLink(req) {
		cc.g.m.refused(errLinkVersion.Code)
		head := req.Head(errLinkVersion.Status)
		head.Extra = linkUpgradeLine
		cc.out = wire.AppendError(cc.out, head, errLinkVersion)
		if !req.KeepAlive {
			cc.closeAfter = true
		}
		return
	}
	l := &clientLink{g: cc.g, ls: cc.ls, tenant: tenant, level: level, upIdx: cc.upIdx, streams: map[uint64]*exchange{}}
	l.in.Hold = l.holdFrame
	if !until.IsZero() {
		l.until = until.UnixNano()
	}
	cc.out = append(cc.out, linkSwitching...)
	cc.toLink = l
}

// speaksLink reports whether req's Upgrade header lists the version the
// gateway speaks (comma-separated, RFC 9110 7.8).
func speaksLink(req *wire.Request) bool {
	v, ok := req.Header("Upgrade")
	if !ok {
		return false
	}
	for _, t := range bytes.Split(v, []byte(",")) {
		if strings.EqualFold(string(bytes.TrimSpace(t)), linkProtocol) {
			return true
		}
	}
	return false
}

// becomeLink turns the client's connection into its link once the 101 has
// been written: it stops being a client connection, and what the client
// sent behind the upgrade is read as frames.
func (cc *clientConn) becomeLink() gnet.Action {
	l := cc.toLink
	cc.toLink = nil
	c := cc.c
	cc.closed() // nothing is in flight: its own broker connection goes back to the pool
	cc.g.clients.Add(-1)
	l.c = c
	l.lastRead = cc.g.now.Load()
	l.lastCall = time.Now().UnixNano()
	c.SetContext(l)
	cc.ls.clientLinks[l] = struct{}{}
	cc.g.clientLinks.Add(1)
	if c.InboundBuffered() > 0 && l.onTraffic() == gnet.Close {
		// Not returned: from writeListed, a Close would be taken for the
		// client connection's, which is no more.
		_ = c.Close()
	}
	return gnet.None
}

// onTraffic reads the frames that arrived and writes the round's answers.
func (l *clientLink) onTraffic() gnet.Action {
	l.lastRead = l.g.now.Load()
	act := l.readFrames()
	l.ls.flushOwn()
	if l.write() == gnet.Close {
		return gnet.Close
	}
	return act
}

// frameLimit is the longest frame a client link reads: the largest body
// and its head room.
func (l *clientLink) frameLimit() int {
	return int(l.g.cfg.MaxBodyBytes) + linkHeadRoom
}

// readFrames serves every whole frame buffered, unless the client's unread
// answers pass the soft bound (then what it sent waits, bounded, in gnet's
// buffer: holdInbound). A frame longer than 64 KiB still arriving holds
// its length of the bound on bytes in flight (holdFrame) and is read
// aside, or the link is refused and closed.
func (l *clientLink) readFrames() gnet.Action {
	c := l.c
	for !l.closed {
		if l.overOutbound() {
			if !l.holdInbound() {
				return gnet.Close
			}
			return gnet.None
		}
		typ, id, p, whole, err := l.in.Next(c, l.frameLimit())
		switch {
		case err == link.ErrNotHeld:
			l.streamRefusal(id, errInflight, 0)
			return gnet.Close // its bytes are not read: the link cannot go on
		case err != nil:
			return gnet.Close // a protocol error (docs/link.md, "Bounds")
		case !whole:
			if !l.in.Begun(c) {
				l.frameSince = 0
			} else if l.frameSince == 0 {
				l.frameSince = l.g.now.Load()
			}
			return gnet.None
		}
		ok := l.frame(typ, id, p)
		l.in.Done(c)
		l.frameSince = 0
		l.ls.releaseInflight(&l.reserved)
		if !ok {
			return gnet.Close
		}
	}
	return gnet.None
}

// holdFrame is the link's FrameReader.Hold: a frame longer than 64 KiB
// still arriving holds its whole length of the bound on bytes in flight
// before it is read aside, or it is refused.
func (l *clientLink) holdFrame(n int) bool { return l.ls.reserveInflight(&l.reserved, int64(n)) }

// holdInbound bounds what a stalled link may leave unread in gnet's
// buffer, as holdQueued does a client connection's: a frame's worth, and
// past queuedFree only what the bound on bytes in flight can hold.
func (l *clientLink) holdInbound() bool {
	n := int64(l.c.InboundBuffered())
	if n > int64(l.frameLimit())+link.HeaderLen+queuedFree {
		return false
	}
	return n <= queuedFree || l.ls.reserveInflight(&l.reserved, max(n, l.reserved))
}

// frame serves one frame; false for a protocol error (the link closes).
func (l *clientLink) frame(typ byte, id uint64, p []byte) bool {
	switch typ {
	case link.FrameRequest:
		return l.request(id, p)
	case link.FrameCancel:
		l.cancel(id)
		return true
	case link.FramePing:
		l.out = link.AppendHeader(l.out, link.FramePong, 0, 0)
		return true
	case link.FrameToken:
		return l.token(id, p)
	}
	return false
}

// expired reports whether the link's identity has ended at now.
func (l *clientLink) expired(now int64) bool {
	return l.until != 0 && now >= l.until
}

// request judges a request frame as the gateway judges the same HTTP
// request, then forwards it. It reports false for a frame that breaks the
// protocol: one that does not decode, names a tenant or an access level
// (a client link's identity is its upgrade's) or reuses an open stream's
// id. After the link's identity ended it is answered 401 on its stream, as
// HTTP answers a request whose token expired; the link closes once what
// it carries has ended (tendLinks).
func (l *clientLink) request(id uint64, p []byte) bool {
	var rq link.Request
	if link.DecodeRequest(p, &rq) != nil || len(rq.Tenant) != 0 || rq.Access != 0 {
		return false
	}
	now := time.Now().UnixNano()
	if _, open := l.streams[id]; open {
		return false
	}
	if l.expired(now) {
		l.streamRefusal(id, errLinkExpired, 0)
		return true
	}
	l.lastCall = now
	if l.pending >= maxLinkStreams {
		l.refuseStream(id, link.RefuseBusy)
		return true
	}
	req := link.ToWire(&l.req, &rq)
	if int64(len(rq.Body)) > l.g.cfg.MaxBodyBytes {
		// HTTP's refusal of a body over the bound, in the same words; the
		// link goes on (its frame was read whole).
		l.streamRefusal(id, &wire.Error{Status: 400, Code: wire.CodeBadRequest,
			Msg: "Content-Length \"" + strconv.Itoa(len(rq.Body)) + "\" exceeds the body limit of " + strconv.FormatInt(l.g.cfg.MaxBodyBytes, 10) + " bytes (QUEEN_MAX_BODY_BYTES)"}, 0)
		return true
	}
	r, e := l.gate(req)
	if e != nil {
		l.streamRefusal(id, e, 0)
		return true
	}
	if r.route.Path == cellViewPath {
		l.scratch = cellViewAnswer(l.scratch[:0], req, wire.Head{Status: 200}, l.tenant) // answered here (cellview.go)
		l.answer(id, l.scratch)
		return true
	}
	l.forward(id, req, r)
	return true
}

// gate is clientConn.gate for a frame, the identity being the link's: the
// route, its level, the plan's feature.
func (l *clientLink) gate(req *wire.Request) (passed, *wire.Error) {
	g := l.g
	r, ok := g.cfg.Routes.Match(req.Method.String(), req.Path)
	if !ok {
		return passed{}, errRouteBlocked
	}
	if !l.level.Allows(accessOf(r)) {
		return passed{}, errLevel
	}
	ts := g.tenant(l.tenant)
	plan := ts.plan.Load()
	if plan == nil || !plan.Features.Ephemeral {
		return passed{}, errFeatureGated
	}
	return passed{tenant: l.tenant, level: l.level, route: r, ts: ts, plan: plan}, nil
}

// forward admits a request that passed the gates (the allowance, the rate,
// a slot) and forwards it: push, pop and ack on the loop's link to the
// broker when it is open, anything else on HTTP connections (a shared one,
// or a connection of its own for a request that may take long).
func (l *clientLink) forward(id uint64, req *wire.Request, gp passed) {
	g, ls := l.g, l.ls
	r := gp.route
	kind, wait, queue := kindOf(r.Meter, req)
	isAck := r.Path == ackPath
	now := time.Now().UnixNano()
	var items int
	var bl *linkConn
	how := routedNone
	if kind != exOther || isAck {
		g.offerTenant(gp.tenant) // the cell's view is asked as a tenant that is served (cellwatch.go)
		queue, items = ls.queueOf(kind, isAck, req, queue)
		bl, how = ls.ownerLink(gp.tenant, queue, now)
	}
	up := l.upIdx
	if bl == nil && (up < 0 || ls.downUntil[up] > now) {
		if up = ls.pick(now); up < 0 {
			l.streamRefusal(id, errForwardFailed, 1)
			return
		}
		l.upIdx = up
	}
	ex := ls.newExchange()
	*ex = exchange{ts: gp.ts, plan: gp.plan, kind: kind, wait: wait, cl: l, clID: id, resp: ex.resp}
	if e, after := ls.admit(ex, items, wait, now/int64(time.Second)); e != nil {
		ls.recycle(ex)
		l.streamRefusal(id, e, after)
		return
	}
	l.streams[id] = ex
	l.pending++
	g.m.sent(how)
	if kind != exOther || isAck {
		if bl == nil {
			bl = ls.linkFor(up, now)
		}
		if bl != nil {
			bl.send(ex, req, gp.tenant, gp.level)
			ex.bl = bl
			return
		}
	}
	var u *upConn
	if wait || kind == exOther && !isAck {
		u = ls.dedicatedConn(up)
		ex.own = u
	} else {
		u = ls.sharedConn(up)
	}
	u.out = appendForward(u.out, req, g.upstreams[up].host, gp.tenant, gp.level, g.cfg.Secret)
	u.send(ex)
}

// cancel serves a cancel frame: the stream ends for the client, with no
// answer. A waiting pop is let go at the broker and its slot comes back;
// any other request's answer is still read and metered, then dropped.
func (l *clientLink) cancel(id uint64) {
	ex := l.streams[id]
	if ex == nil {
		return // answered already, or never opened
	}
	delete(l.streams, id)
	ex.cancelled = true
	if ex.wait {
		l.letGo(ex)
	}
}

// letGo ends a waiting pop whose client gave up: its slot comes back at
// once, and the broker lets it go, as a closed connection's (D13), so that
// no message is leased to a client that left.
func (l *clientLink) letGo(ex *exchange) {
	if ex.slot {
		ex.slot = false
		ex.ts.parked.Add(-1)
	}
	switch {
	case ex.bl != nil:
		ex.bl.cancel(ex.linkID) // no answer will come for it
		l.pending--
		l.ls.recycle(ex)
	case ex.own != nil:
		u := ex.own
		ex.own = nil
		if u.c != nil {
			_ = u.c.Close() // OnClose: failed, which settles ex as lost (no answer: cancelled)
			return
		}
		// Still being dialled: opened closes it.
		u.dead = true
		l.ls.forget(u)
		u.queue, u.out = nil, nil
		ex.streamEnd(0, 0, nil, 0)
		l.ls.recycle(ex)
	}
}

// token serves a token frame (docs/link.md, "Token"): a fresh credential
// of the link's tenant extends its identity and sets its level; anything
// else is refused on the frame's stream and changes nothing.
func (l *clientLink) token(id uint64, p []byte) bool {
	now := time.Now().UnixNano()
	l.lastCall = now
	tenant, level, until, e := l.g.cfg.Auth.IdentifyToken(p)
	switch {
	case e != nil:
	case tenant != l.tenant:
		e = errLinkToken
	default:
		l.level, l.until = level, 0
		if !until.IsZero() {
			l.until = until.UnixNano()
		}
		l.scratch = wire.AppendResponse(l.scratch[:0], wire.Head{Status: 200}, []byte("{}"))
		l.answer(id, l.scratch)
		return true
	}
	l.streamRefusal(id, e, 0)
	return true
}

// answer appends an answer frame carrying raw, a whole HTTP answer, on
// stream id.
func (l *clientLink) answer(id uint64, raw []byte) {
	if l.closed {
		return
	}
	l.out = link.AppendHeader(l.out, link.FrameAnswer, id, len(raw))
	l.out = append(l.out, raw...)
	l.markWrite()
}

// streamRefusal answers stream id with the gateway's refusal e (and
// Retry-After when retryAfter is positive), as HTTP would; no connection
// field, since a link is not closed by an answer.
func (l *clientLink) streamRefusal(id uint64, e *wire.Error, retryAfter int) {
	l.g.m.refused(e.Code)
	l.scratch = wire.AppendError(l.scratch[:0], wire.Head{Status: e.Status, RetryAfter: retryAfter}, e)
	l.answer(id, l.scratch)
}

// refuseStream ends stream id with a refuse frame of reason.
func (l *clientLink) refuseStream(id uint64, reason byte) {
	if l.closed {
		return
	}
	l.out = link.AppendHeader(l.out, link.FrameRefuse, id, 1)
	l.out = append(l.out, reason)
	l.markWrite()
}

// markWrite lists the link for the loop's next writeListed.
func (l *clientLink) markWrite() {
	if !l.listed {
		l.listed = true
		l.ls.linksToWrite = append(l.ls.linksToWrite, l)
	}
}

// Bounds on a link's unread answers beyond the soft one (outbound.go), the
// broker's defaults for an HTTP connection (QUEEN_OUTBOUND_HARD_BYTES,
// QUEEN_OUTBOUND_SOFT_S): a link stalled on the soft bound stops taking new
// requests, but those already in flight (up to maxLinkStreams of them)
// still answer, so a client that does not read is closed when its unread
// answers pass linkOutboundHard with answers already waiting, or when it
// has been stalled for linkStalledFor.
const (
	linkOutboundHard = 8 << 20
	linkStalledFor   = 10 * time.Second
)

// write sends the round's frames in one write; Close when the unread
// answers pass linkOutboundHard with answers already waiting before these.
func (l *clientLink) write() gnet.Action {
	if l.closed || len(l.out) == 0 {
		return gnet.None
	}
	before := l.c.OutboundBuffered()
	_, err := l.c.Write(l.out)
	l.out = reuse(l.out)
	if err != nil {
		return gnet.Close
	}
	l.countOutbound()
	if before > 0 && l.c.OutboundBuffered() > linkOutboundHard {
		return gnet.Close
	}
	return gnet.None
}

// countOutbound brings the link's share of the in-flight bound up to date
// with what gnet holds of its answers (outbound.go).
func (l *clientLink) countOutbound() {
	n := int64(l.c.OutboundBuffered())
	if d := n - l.queuedOut; d != 0 {
		l.g.inflight.Add(d)
		l.queuedOut = n
	}
}

// overOutbound is clientConn.overOutbound for a link: past the soft bound
// of unread answers its frames wait, unread, until they drain.
func (l *clientLink) overOutbound() bool {
	if l.c.OutboundBuffered() <= outboundSoft {
		l.stalled = false
		return false
	}
	if !l.stalled {
		l.stalled, l.stalledSince = true, l.g.now.Load()
		l.ls.stalledLinks = append(l.ls.stalledLinks, l)
		l.ls.watchStalled()
	}
	return true
}

// recheckOutbound counts the link's unread answers again and reads its
// frames again once they have drained.
func (l *clientLink) recheckOutbound() {
	l.countOutbound()
	if !l.stalled || l.c.OutboundBuffered() > outboundSoft {
		return
	}
	l.stalled = false
	if l.readFrames() == gnet.Close {
		_ = l.c.Close()
		return
	}
	l.markWrite()
}

// closedConn runs in OnClose: waiting pops are let go (their slots come
// back, the broker ends them), the other requests' answers are metered and
// dropped when they come.
func (l *clientLink) closedConn() {
	if l.closed {
		return
	}
	l.closed = true
	l.out = nil
	delete(l.ls.clientLinks, l)
	l.g.clientLinks.Add(-1)
	l.g.inflight.Add(-l.queuedOut)
	l.queuedOut = 0
	l.ls.releaseInflight(&l.reserved)
	l.in = link.FrameReader{} // a frame read aside is let go with the link
	for id, ex := range l.streams {
		delete(l.streams, id)
		ex.cancelled = true
		if ex.wait {
			l.letGo(ex)
		}
	}
	l.ls.flushOwn()
}

// tendLinks runs on the tick: a link idle for the idle timeout, whose
// identity has ended, whose frame has been arriving for longer than the
// body timeout, or stalled behind its unread answers for linkStalledFor is
// closed; the others' unread answers are counted again, and one holding
// anything counts as carrying a call now, so that shedding finds it idle
// no sooner than a second after its last answer (the broker's rule:
// server/clientlink.go, tendClientLinks).
func (ls *loopState) tendLinks(now int64) {
	cfg := &ls.g.cfg
	for l := range ls.clientLinks {
		if now-l.lastRead > int64(cfg.IdleTimeout) || l.expired(now) && (l.quiet() || now-l.until > expiredGrace) ||
			l.frameSince != 0 && now-l.frameSince > int64(cfg.BodyTimeout) ||
			l.stalled && now-l.stalledSince > int64(linkStalledFor) {
			_ = l.c.Close()
			continue
		}
		l.countOutbound()
		if !l.quiet() {
			l.lastCall = now
		}
	}
}

// streamEnd settles an exchange of a client link: the meters (status and
// delivered as exchange.answered takes them), the slot, the link's count
// in flight, a dedicated broker connection back to the pool; and, unless
// its stream was cancelled or the link closed, gives the client raw (an
// answer) or, when raw is nil and reason is not 0, a refuse frame.
func (ex *exchange) streamEnd(status, delivered int, raw []byte, reason byte) {
	l := ex.cl
	ex.answered(status, delivered)
	if u := ex.own; u != nil {
		ex.own = nil
		if !u.dead && len(u.queue) == 0 {
			u.release()
		}
	}
	l.pending--
	if ex.cancelled {
		return
	}
	delete(l.streams, ex.clID)
	switch {
	case raw != nil:
		l.answer(ex.clID, raw)
	case reason != 0:
		l.refuseStream(ex.clID, reason)
	}
}

// streamLost settles ex whose request was written to a broker and whose
// answer was lost: the stream ends "lost", may have been served.
func (ex *exchange) streamLost() {
	if !ex.cancelled && !ex.cl.closed {
		ex.cl.g.m.lost.Inc()
	}
	ex.streamEnd(0, 0, nil, link.RefuseLost)
}

// streamFail settles ex, which reached no broker, with refusal e (503
// ephemeral_forward_failed, Retry-After: 1): nothing was done.
func (ex *exchange) streamFail(e *wire.Error) {
	ex.cl.g.m.refused(e.Code)
	ex.resp = appendFailure(ex.resp[:0], e, false)
	ex.streamEnd(0, 0, ex.resp, 0)
}

// dechunk returns raw, an HTTP answer, with a chunked body turned into one
// of Content-Length; raw itself when it is not chunked.
func dechunk(raw []byte) []byte {
	end := bytes.Index(raw, []byte("\r\n\r\n"))
	if end < 0 || !bytes.Contains(bytes.ToLower(raw[:end]), []byte("transfer-encoding: chunked")) {
		return raw
	}
	var body []byte
	rest := raw[end+4:]
	for {
		lf := bytes.IndexByte(rest, '\n')
		if lf < 0 {
			return raw
		}
		size, ok := chunkSize(bytes.TrimRight(rest[:lf], "\r"))
		rest = rest[lf+1:]
		if !ok || int64(len(rest)) < size {
			return raw
		}
		if size == 0 {
			break
		}
		body = append(body, rest[:size]...)
		rest = bytes.TrimPrefix(rest[size:], []byte("\r\n"))
	}
	out := make([]byte, 0, end+len(body)+32)
	for _, line := range bytes.Split(raw[:end], []byte("\r\n")) {
		if bytes.HasPrefix(bytes.ToLower(line), []byte("transfer-encoding:")) {
			continue
		}
		out = append(out, line...)
		out = append(out, "\r\n"...)
	}
	out = append(out, "Content-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\n\r\n"...)
	return append(out, body...)
}
