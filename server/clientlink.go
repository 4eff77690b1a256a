package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/queenmq/ephemeral/link"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// Client links (D18; docs/link.md).
//
// Any client may turn a connection on the public port into a link:
// GET /api/v1/ephemeral/link with "Upgrade: queen-link/1" is answered 101
// once its identity is established, exactly as any request's is (modes
// none, jwt and gateway). From then on the connection speaks the frames
// the gateway link and the cell relay speak (package link):
// each request frame carries one of the family's eight routes, and its
// answer frame the whole HTTP answer the route would have written on an
// HTTP connection. The frames of a link are served like a gateway link's
// (gatewaylink.go), on a stand-in conn of the link's loop, with the
// identity of the upgrade instead of the frame's: every gate after
// identity applies per frame (the access level, the kill switch, the
// grant, the rate, the bounds), and on a cell member a push, pop or ack
// of a queue another member owns is relayed to its owner. A pop that
// parks holds only its stream; a cancel frame, or the link's end, lets it
// go (D13).
//
// A JWT identity ends at the token's exp, unless the client sent a fresh
// token of the same tenant on it (a token frame). From then on, as over
// HTTP, a request frame is answered 401 on its stream, while the calls
// already in flight run to their end (a pop parked before exp is served);
// the link is closed as soon as it carries nothing, and at the latest
// expiredGrace after exp. A token frame still restores it meanwhile.
// A link that sent nothing, not even a ping, for the idle timeout is
// closed, as an idle HTTP connection is.

const clientLinkPath = "/api/v1/ephemeral/link"

// Link protocol tokens: the version this broker speaks, and the gateway
// link's old unversioned token, still accepted on the gateway link for one
// release so that gateways of the previous release keep their links.
const (
	linkProtocolV1   = "queen-link/1"
	linkProtocolPrev = "queen-link"
)

// maxLinkStreams bounds the requests in flight on one client link (parked
// pops and store calls); one more is refused with a refuse frame
// RefuseBusy, which the SDKs back off on.
const maxLinkStreams = 1 << 16

// expiredGrace bounds how long an expired link is kept for the calls it
// carried at exp: the longest a pop may wait, and a little more for the
// answer of one parked right before exp.
const expiredGrace = int64(wire.MaxPopTimeoutMs)*int64(time.Millisecond) + int64(10*time.Second)

var (
	errLinkVersion = &wire.Error{Status: 426, Code: codeBadRequest, Msg: "this route upgrades the connection to a link: send Connection: Upgrade and Upgrade: " + linkProtocolV1 + " (the versions this broker speaks)"}
	errLinkToken   = &wire.Error{Status: 403, Code: codeForbidden, Msg: "a token sent on a link must name the link's tenant"}
	errLinkExpired = &wire.Error{Status: 401, Code: codeUnauthorized, Msg: "the link's token has expired: send a fresh one in a token frame, or open a new link"}
)

// upgradeLines names, on a refused upgrade, the versions spoken.
var upgradeLines = []byte("Upgrade: " + linkProtocolV1 + "\r\n")

// switchingTo is the 101 answer for each token spoken.
var switchingTo = map[string][]byte{
	linkProtocolV1:   []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + linkProtocolV1 + "\r\nConnection: Upgrade\r\n\r\n"),
	linkProtocolPrev: []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + linkProtocolPrev + "\r\nConnection: Upgrade\r\n\r\n"),
}

// linkIdentity is a client link's identity, established on its upgrade.
// until is when it ends (unix nanos; 0: never).
type linkIdentity struct {
	tenant string
	level  identity.Level
	until  int64
}

// clientLink answers the upgrade to a client link; the connection becomes
// the link once the answer is written (becomeLink).
func (cs *conn) clientLink(req *wire.Request) {
	s := cs.s
	if !cs.method(req, wire.MethodGet) {
		return
	}
	// Identity first, as on every route of the family (D7): a client
	// without a credential learns nothing else.
	tenant, level, until, werr := s.auth.IdentifyLink(req)
	if werr != nil {
		cs.refuse(req, werr)
		return
	}
	token, ok := pickLinkVersion(req, false)
	if !ok {
		head := req.Head(0)
		head.Extra = upgradeLines
		cs.out = s.appendError(cs.out, head, errLinkVersion)
		return
	}
	who := linkIdentity{tenant: s.tenantName([]byte(tenant)), level: level}
	if !until.IsZero() {
		who.until = until.UnixNano()
	}
	cs.out = append(cs.out, switchingTo[token]...)
	cs.toLink = &linkConn{s: s, role: linkClient, who: who, lastCall: time.Now().UnixNano()}
}

// pickLinkVersion returns the link protocol to switch to: the newest
// version this broker speaks among those req's Upgrade header lists
// (comma-separated, RFC 9110 7.8), the old unversioned token too when
// prev allows it (the gateway link). ok is false when none is spoken.
func pickLinkVersion(req *wire.Request, prev bool) (token string, ok bool) {
	v, found := req.Header("Upgrade")
	if !found {
		return "", false
	}
	for _, t := range bytes.Split(v, []byte(",")) {
		t = bytes.TrimSpace(t)
		switch {
		case strings.EqualFold(string(t), linkProtocolV1):
			return linkProtocolV1, true
		case prev && strings.EqualFold(string(t), linkProtocolPrev):
			token, ok = linkProtocolPrev, true
		}
	}
	return token, ok
}

// serveClientFrame serves a request frame of a client link, on its loop,
// as a request of the link's identity that landed here (see above). It
// reports false for a frame that breaks the protocol (the link is closed):
// one that does not decode, or that names a tenant or an access level (a
// client link's identity is its upgrade's, never a frame's).
func (s *Server) serveClientFrame(l *linkConn, id uint64, p []byte) bool {
	var rq link.Request
	if link.DecodeRequest(p, &rq) != nil || len(rq.Tenant) != 0 || rq.Access != 0 {
		return false
	}
	if l.expired(l.lastRead) {
		// As HTTP answers a request whose token has expired; the link
		// closes once what it carries has ended (tendClientLinks).
		l.answer(id, s.appendError(nil, wire.Head{Status: 401}, errLinkExpired))
		return true
	}
	l.lastCall = l.lastRead
	if len(l.streams) >= maxLinkStreams || l.offLoopBusy(&rq) {
		l.refuse(id, link.RefuseBusy)
		return true
	}
	ls := l.ls
	cs := ls.standIn(s)
	cs.callLink, cs.callID = l, id
	cs.frameLink, cs.frameID = l, id
	cs.reqStart, cs.reqRoute = time.Now(), routeOther
	req := link.ToWire(&ls.relayReq, &rq)
	switch {
	case int64(len(rq.Body)) > s.cfg.MaxBodyBytes:
		// The refusal HTTP gives a Content-Length over the bound, in the
		// same words; the link stays open (its frame was read whole).
		cs.refuse(req, &wire.Error{Status: 400, Code: codeBadRequest,
			Msg: fmt.Sprintf("Content-Length \"%d\" exceeds the body limit of %d bytes (QUEEN_MAX_BODY_BYTES)", len(rq.Body), s.cfg.MaxBodyBytes)})
	case bytes.HasPrefix(req.Path, []byte(prefix)) && !bytes.Equal(req.Path, []byte(clientLinkPath)):
		cs.routeEphemeral(req, req.Path[len(prefix):])
	default:
		cs.refuse(req, errNoRoute) // a link carries the family's routes only
	}
	l.endStandIn(cs, id)
	return true
}

// expired reports whether the link's identity has ended at now (unix
// nanos): a JWT's exp has passed and no fresh token extended it.
func (l *linkConn) expired(now int64) bool {
	return l.who.until != 0 && now >= l.who.until
}

// refreshToken serves a token frame: a fresh credential for the link's
// tenant extends its identity (and sets its access level to the new
// token's); anything else is refused on the frame's stream and changes
// nothing. The answer is an HTTP answer, as a request frame's.
func (s *Server) refreshToken(l *linkConn, id uint64, p []byte) bool {
	l.lastCall = l.lastRead
	head := wire.Head{Status: 200} // no connection field: a link is not closed by an answer
	tenant, level, until, werr := s.auth.IdentifyToken(p)
	switch {
	case werr != nil:
	case tenant != l.who.tenant:
		werr = errLinkToken
	default:
		l.who.level = level
		l.who.until = 0
		if !until.IsZero() {
			l.who.until = until.UnixNano()
		}
		l.answer(id, wire.AppendResponse(nil, head, []byte("{}")))
		return true
	}
	l.answer(id, s.appendError(nil, head, werr))
	return true
}

// linkAdmits is admit for a client link's frame: the identity is the
// link's, and every gate after identity applies (D7).
func (cs *conn) linkAdmits(req *wire.Request, need identity.Level) bool {
	who := &cs.frameLink.who
	return cs.admitAs(req, need, who.tenant, who.level)
}

// answerLater is answerAsync for a stand-in of a link's frame: the answer
// of a request served off the loop (a configure, a delete, a reset in a
// cell, a long listing) goes back on the frame's stream, on the link's
// loop, and the stand-in is taken back there.
func (cs *conn) answerLater(resp []byte) {
	l, id := cs.frameLink, cs.frameID
	view := cs.reqRoute == routeCellView // a waiting view read is not counted off the loop (cellview.go)
	_ = l.ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		if l.streams[id] == cs {
			delete(l.streams, id)
			l.answer(id, resp)
		}
		l.ls.putStandIn(cs)
		if !view {
			l.offLoopDone()
		}
		return nil
	}))
}

// tendClientLinks runs on the loop every second: a client link idle for
// the idle timeout, or whose identity has ended, is closed; so is one
// whose frame, begun, is not whole within the body timeout, as an HTTP
// connection whose body takes longer is (a frame trickled a byte at a time
// would otherwise hold what it sent for as long as it keeps trickling).
// A link that holds anything (a parked pop, say) counts as carrying a call
// now, so that shedding (shed.go) finds it idle only after a second of
// real silence once the last of its streams is answered (an HTTP
// connection is idle from its last answer; a link's answers are not
// timed, which would cost the answer path).
func (ls *loopState) tendClientLinks(context.Context) error {
	now := time.Now().UnixNano()
	idle, body := int64(ls.s.cfg.IdleTimeout), int64(ls.s.cfg.BodyTimeout)
	for l := range ls.clientLinks {
		switch {
		case now-l.lastRead > idle || l.expired(now) && (l.quiet() || now-l.who.until > expiredGrace):
			l.fail(nil)
		case l.partialSince != 0 && now-l.partialSince > body:
			l.failHolding(errFrameStalled)
		case !l.quiet():
			l.lastCall = now
		}
	}
	return nil
}

// tendClientLinksEverySecond has every loop with client links tend them
// (tendClientLinks) until the server stops.
func (s *Server) tendClientLinksEverySecond() {
	s.tickLoops(time.Second, func(ls *loopState) gnet.RunnableFunc {
		if ls.nClientLinks.Load() > 0 {
			return ls.tendClientTask
		}
		return nil
	}, nil)
}

// linkHeadRoom is what a client link's request frame may hold beyond the
// largest body: its target and header lines.
const linkHeadRoom = 64 << 10

// frameLimit is the longest frame the link reads: on a client link the
// largest body the broker accepts and its head room, elsewhere the
// relay's limit.
func (l *linkConn) frameLimit() int {
	if l.role == linkClient {
		return int(l.s.cfg.MaxBodyBytes) + linkHeadRoom
	}
	return link.MaxFrame
}

// refuseLongFrame answers a client link's request frame longer than the
// link takes as HTTP answers a body over the bound, 400 with the same
// words, and drops its bytes as they arrive (skipFrame), so that one
// oversized request costs its own stream, not every stream of the link.
// It reports false for anything else over the limit, which closes the link.
func (l *linkConn) refuseLongFrame() bool {
	hdr, _ := l.c.Peek(link.HeaderLen)
	typ, id, n := link.ParseHeader(hdr)
	if l.role != linkClient || typ != link.FrameRequest {
		return false
	}
	s := l.s
	head := wire.Head{Status: 400, KeepAlive: true}
	l.answer(id, s.appendError(nil, head, &wire.Error{Status: 400, Code: codeBadRequest,
		Msg: fmt.Sprintf("a request frame of %d bytes exceeds the body limit of %d bytes (QUEEN_MAX_BODY_BYTES)", n, s.cfg.MaxBodyBytes)}))
	l.skip = int64(link.HeaderLen + n)
	l.skipFrame()
	return true
}

// skipFrame drops what has arrived of a refused frame; true once all of it
// has.
func (l *linkConn) skipFrame() bool {
	d := min(l.skip, int64(l.c.InboundBuffered()))
	_, _ = l.c.Discard(int(d))
	l.skip -= d
	return l.skip == 0
}
