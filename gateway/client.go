package gateway

import (
	"bytes"
	"net"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/gateway/routes"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// A client connection (docs/gateway.md, "A request's way through").
//
// Requests are read in order and each is answered in order. A request is
// refused by the gateway itself (identity, route, plan, allowance, rate,
// slots), served by it (health, metrics, the admin routes), or forwarded.
// Every request in flight of one client is on one upstream connection
// (up), whose answers come back in order; a request that would go
// elsewhere, or that the gateway would answer itself, waits unread (held)
// until the answers before it have come back.

// Paths the gateway serves itself.
const (
	healthPath  = "/health"
	metricsPath = "/metrics"
	adminPrefix = "/api/v1/gateway/"
	ackPath     = "/api/v1/ephemeral/ack"
)

// maxInFlight bounds a client's requests in flight; past it its next
// request waits unread.
const maxInFlight = 1024

type clientConn struct {
	g  *Gateway
	ls *loopState
	c  gnet.Conn
	p  *wire.Parser // lent by the loop while part of a request is buffered

	out        []byte // answers to write at the end of this round
	listed     bool   // in the loop's list of clients to write
	closeAfter bool   // close once the answers so far have left
	lost       bool   // an answer was lost: close once those before it have left (lose)
	isClosed   bool
	toLink     *clientLink // the upgrade to a link was answered: becomeLink once written
	busy       bool        // an admin route is being answered off the loop
	held       bool        // the next request waits for the answers in flight
	upIdx      int         // the broker this client's requests go to first
	up         *upConn     // where its requests in flight are
	own        *upConn     // its own connection, once it needed one (upstream.go)
	// On links (link.go): the last link its requests in flight went on (nil
	// while they are on HTTP connections), those requests in order, and
	// whether the last is a waiting pop (the next request waits behind it).
	link        *linkConn
	onLink      []*exchange
	linkWaiting bool
	inFlight    int
	lastActive  int64

	// The request being read (body.go): when its head and its body began
	// to arrive (unix nanos, 0 = not arriving), the length gnet must hold
	// before the parser looks again (0: any), a large body read into a
	// buffer of its own (bigWhole: all of it is there), the bytes of
	// Gateway.inflight held, and a refusal on its head that waits for the
	// answers in flight.
	headSince   int64
	bodySince   int64
	need        int64
	big         []byte
	bigWhole    bool
	reserved    int64
	refuseLater *wire.Error
	// Its answers gnet holds unsent, as counted in Gateway.inflight, and
	// whether its requests wait for them to drain (outbound.go).
	queuedOut int64
	stalled   bool
}

func newClientConn(g *Gateway, c gnet.Conn) *clientConn {
	ls := g.loopOf(c.EventLoop())
	cc := &clientConn{g: g, ls: ls, c: c, lastActive: g.now.Load(), upIdx: -1}
	ls.clients[cc] = struct{}{}
	return cc
}

// exchangeKind is what an exchange meters when answered.
type exchangeKind uint8

const (
	exOther exchangeKind = iota
	exPush               // meters its items as messages on a 201
	exPop                // meters its deliveries on a 200
)

// exchange is one forwarded request waiting for its answer.
type exchange struct {
	cc    *clientConn // nil once the client is gone: the answer is read and dropped
	ts    *tenantState
	plan  *catalog.Plan // the plan it was admitted under
	kind  exchangeKind
	items int  // a push's items, held against the allowance
	slot  bool // a waiting pop holding a parked-consumer slot
	close bool // the client asked to close after this answer

	// On a link (link.go): its stream, whether it is a waiting pop, and,
	// once answered, the answer kept until its client's earlier answers
	// have been given (done), with what it meters.
	linkID    uint64
	wait      bool
	done      bool
	resp      []byte // kept across recycling
	status    int
	delivered int
	closes    bool   // the broker's answer says Connection: close
	refusal   string // the code, when resp is the gateway's own refusal
	lost      bool   // its answer was lost after its request was written (lose)

	// Of a client link's stream (clientlink.go): the link and the stream,
	// the broker link it went on (a client connection's exchange on a link
	// too) or the broker connection of its own it holds, and whether the
	// client cancelled it (its answer is dropped).
	cl        *clientLink
	clID      uint64
	bl        *linkConn
	own       *upConn
	cancelled bool
}

// onTraffic serves what the client sent. While its next request waits
// (busy, held, stalled), what it sends stays in gnet's buffer, bounded
// (holdQueued).
func (cc *clientConn) onTraffic() gnet.Action {
	cc.lastActive = cc.g.now.Load()
	if cc.stalled {
		cc.overOutbound() // its answers may have drained since
	}
	if !cc.busy && !cc.held && !cc.stalled {
		cc.serve()
	} else if !cc.holdQueued() {
		return gnet.Close
	}
	cc.ls.flushOwn()
	return cc.write()
}

// serve reads and handles buffered requests until none is whole, one must
// wait, or the connection is to close. A request's head is parsed once and
// judged before its body is read; its body is read as it arrives and
// looked at once it is all here (body.go).
func (cc *clientConn) serve() {
	for !cc.busy && !cc.held && !cc.closeAfter && !cc.isClosed && cc.toLink == nil {
		if cc.overOutbound() {
			return // its unread answers first (outbound.go)
		}
		var buf []byte
		fromBig := cc.big != nil
		if fromBig {
			if !cc.fillBig() {
				return
			}
			buf = cc.big
		} else {
			if cc.need > 0 && int64(cc.c.InboundBuffered()) < cc.need {
				return // the body is not all here: do not look at it again yet
			}
			buf, _ = cc.c.Peek(-1)
			if len(buf) == 0 {
				cc.headSince = 0
				return
			}
		}
		if cc.p == nil {
			cc.p = cc.ls.parsers.Get()
		}
		req, n, err := cc.p.Parse(buf)
		if err != nil {
			e, _ := err.(*wire.Error)
			cc.refuseBody(e) // after the answers in flight; the stream cannot be read on
			return
		}
		if req == nil {
			if cc.p.InBody() {
				if cc.awaitBody(buf) {
					continue // moved into its own buffer: read what is there
				}
				return
			}
			if cc.headSince == 0 && cc.p.ReadingHead() {
				cc.headSince = cc.g.now.Load()
			}
			return
		}
		cc.headSince = 0
		cc.bigWhole = fromBig
		if !cc.handle(req) {
			cc.hold()
			return
		}
		cc.bodyDone()
		if fromBig {
			cc.big, cc.bigWhole = nil, false
		} else {
			_, _ = cc.c.Discard(n)
		}
		if cc.p.Idle() {
			cc.ls.parsers.Put(cc.p)
			cc.p = nil
		}
	}
}

// hold leaves the parsed request unread: it is parsed again once the
// answers in flight have come back (answeredAll), from its own buffer when
// it has one. Its body stays reserved and its timer stops: it is all here.
func (cc *clientConn) hold() {
	cc.held = true
	cc.p.Reset()
	cc.need, cc.bodySince = 0, 0
}

// handle serves one request; false when it must wait for the answers in
// flight (nothing was done for it).
func (cc *clientConn) handle(req *wire.Request) bool {
	path := req.Path
	if e := cc.crossOrigin(req); e != nil {
		return cc.refuse(req, e, 0)
	}
	switch {
	case bytes.Equal(path, []byte(healthPath)):
		return cc.local(req, func() { cc.out = appendHealth(cc.out, req, cc.g) })
	case bytes.Equal(path, []byte(metricsPath)):
		if e := cc.adminRefusal(req); e != nil {
			return cc.refuse(req, e, 0)
		}
		if cc.inFlight > 0 {
			return false
		}
		// Off the loop: the process's figures read /proc (metrics.go).
		head := req.Head(200)
		cc.offLoop(!req.KeepAlive, func() []byte { return cc.g.appendMetrics(nil, head) })
		return true
	case bytes.HasPrefix(path, []byte(adminPrefix)):
		if cc.inFlight > 0 {
			return false
		}
		cc.admin(req)
		return true
	case bytes.Equal(path, []byte(clientLinkPath)):
		if cc.inFlight > 0 {
			return false
		}
		cc.upgradeToLink(req)
		return true
	}
	return cc.forward(req)
}

// local answers req on the loop, once nothing is in flight.
func (cc *clientConn) local(req *wire.Request, answer func()) bool {
	if cc.inFlight > 0 {
		return false
	}
	answer()
	if !req.KeepAlive {
		cc.closeAfter = true
	}
	return true
}

// refuse answers req with e, once nothing is in flight.
func (cc *clientConn) refuse(req *wire.Request, e *wire.Error, retryAfter int) bool {
	if cc.inFlight > 0 {
		return false
	}
	cc.g.m.refused(e.Code)
	cc.out = appendRefusal(cc.out, req, e, retryAfter)
	if !req.KeepAlive || e.Close {
		cc.closeAfter = true
	}
	return true
}

// passed is what the gates that judge a request on its head found.
type passed struct {
	tenant string
	level  identity.Level
	route  routes.Route
	ts     *tenantState
	plan   *catalog.Plan
}

// gate applies the gates that need no body, outermost first: identity,
// the route, the route's level, the plan's feature (docs/gateway.md, "A
// request's way through"). It runs on the head of a request whose body is
// still arriving (headGate) and again on the whole request.
func (cc *clientConn) gate(req *wire.Request) (passed, *wire.Error) {
	g := cc.g
	tenant, level, ierr := g.cfg.Auth.Identify(req)
	if ierr != nil {
		return passed{}, ierr
	}
	r, ok := g.cfg.Routes.Match(req.Method.String(), req.Path)
	if !ok {
		return passed{}, errRouteBlocked
	}
	if !level.Allows(accessOf(r)) {
		return passed{}, errLevel
	}
	ts := g.tenant(tenant)
	plan := ts.plan.Load()
	if plan == nil || !plan.Features.Ephemeral {
		return passed{}, errFeatureGated
	}
	return passed{tenant: tenant, level: level, route: r, ts: ts, plan: plan}, nil
}

// kindOf says what a request of a route metered as meter is (a push, a
// pop or neither), whether it is a pop that may wait, and a pop's queue
// (nil when its query does not parse: the broker refuses it).
func kindOf(meter string, req *wire.Request) (kind exchangeKind, wait bool, popQueue []byte) {
	switch meter {
	case routes.MeterMessages:
		return exPush, false, nil
	case routes.MeterDeliveries:
		if pp, err := wire.ParsePop(req.Query(), 0); err == nil {
			wait, popQueue = pp.Wait, pp.Queue
		}
		return exPop, wait, popQueue
	}
	return exOther, false, nil
}

// forward applies the gates to a request of the family and forwards it: a
// push, pop or ack on the link to its queue's owner in front of a cell
// (owners.go), else to the client's broker.
func (cc *clientConn) forward(req *wire.Request) bool {
	g := cc.g
	gp, e := cc.gate(req)
	if e != nil {
		return cc.refuse(req, e, 0)
	}
	tenant, level, r, ts, plan := gp.tenant, gp.level, gp.route, gp.ts, gp.plan
	if r.Path == cellViewPath {
		return cc.local(req, func() { cc.out = cellViewAnswer(cc.out, req, req.Head(200), tenant) }) // answered here (cellview.go)
	}
	kind, wait, queue := kindOf(r.Meter, req)
	isAck := r.Path == ackPath
	dedicated := wait || (kind == exOther && !isAck)

	// The broker this request goes to, and whether order lets it go now.
	// The clock is read here, not taken from the tick (g.now, up to a
	// second old): the period a request is counted in must be the one the
	// usage writer rolls to (it reads the clock), and a broker is passed
	// over for downFor after a failed dial, not for up to a second more.
	now := time.Now().UnixNano()
	var items int
	how := routedNone
	if kind != exOther || isAck {
		g.offerTenant(tenant) // the cell's view is asked as a tenant that is served (cellwatch.go)
		queue, items = cc.ls.queueOf(kind, isAck, req, queue)
		var l *linkConn
		if l, how = cc.ls.ownerLink(tenant, queue, now); l != nil {
			return cc.forwardOnLink(l, req, tenant, level, ts, plan, kind, wait, items, how, now)
		}
	}
	up := cc.upIdx
	if cc.own != nil {
		up = cc.own.up
	} else if up < 0 || cc.ls.downUntil[up] > now {
		if up = cc.ls.pick(now); up < 0 {
			return cc.refuse(req, errForwardFailed, 1)
		}
		cc.upIdx = up
	}
	if kind != exOther || isAck {
		if l := cc.ls.linkFor(up, now); l != nil {
			return cc.forwardOnLink(l, req, tenant, level, ts, plan, kind, wait, items, how, now)
		}
	}
	if cc.inFlight > 0 && cc.link != nil {
		return false // after the answers in flight on the link
	}
	if cc.inFlight > 0 && (cc.inFlight >= maxInFlight || cc.own == nil && (dedicated || cc.up.up != up)) {
		return false // after the answers in flight (on a shared connection)
	}

	// Admission: the allowance, the rate, a slot.
	ex := cc.ls.newExchange()
	*ex = exchange{cc: cc, ts: ts, plan: plan, kind: kind, close: !req.KeepAlive}
	unixNow := now / int64(time.Second)
	if e, after := cc.ls.admit(ex, items, wait, unixNow); e != nil {
		cc.ls.recycle(ex)
		return cc.refuse(req, e, after)
	}

	var u *upConn
	switch {
	case cc.own != nil:
		u = cc.own
	case dedicated:
		u = cc.ls.dedicatedConn(up)
		u.owner, cc.own = cc, u
	case cc.inFlight > 0:
		u = cc.up
	default:
		u = cc.ls.sharedConn(up)
	}
	u.out = appendForward(u.out, req, g.upstreams[up].host, tenant, level, g.cfg.Secret)
	u.send(ex)
	cc.up = u
	cc.inFlight++
	g.m.sent(how)
	return true
}

// forwardOnLink forwards a push, pop or ack on link l (link.go): after the
// client's answers in flight on HTTP connections, or behind its waiting
// pop, it waits. Its requests in flight may be on links to several
// members (each to its queue's owner, owners.go): their answers are given
// in the client's order whichever link they come on (giveInOrder).
func (cc *clientConn) forwardOnLink(l *linkConn, req *wire.Request, tenant string, level identity.Level, ts *tenantState, plan *catalog.Plan, kind exchangeKind, wait bool, items int, how routedHow, now int64) bool {
	if cc.inFlight > 0 && (cc.link == nil || cc.linkWaiting || cc.inFlight >= maxInFlight) {
		return false
	}
	ex := cc.ls.newExchange()
	*ex = exchange{cc: cc, ts: ts, plan: plan, kind: kind, close: !req.KeepAlive, wait: wait, resp: ex.resp}
	if e, after := cc.ls.admit(ex, items, wait, now/int64(time.Second)); e != nil {
		cc.ls.recycle(ex)
		return cc.refuse(req, e, after)
	}
	l.send(ex, req, tenant, level)
	ex.bl = l
	cc.link = l
	cc.onLink = append(cc.onLink, ex)
	cc.linkWaiting = wait
	cc.inFlight++
	cc.g.m.sent(how)
	return true
}

// admit applies the plan's allowance, rate and slots to a request about
// to be forwarded (items: a push's item count, 0 for a body the broker
// will refuse, which then meters nothing; queueOf); the refusal's int is
// its Retry-After.
func (ls *loopState) admit(ex *exchange, items int, wait bool, now int64) (*wire.Error, int) {
	switch ex.kind {
	case exPush:
		ex.items = items
		return admitPush(ex.ts, ex.plan, ex.items, now)
	case exPop:
		if e, after := admitPop(ex.ts, ex.plan, now); e != nil {
			return e, after
		}
		if wait {
			if !takeSlot(ex.ts, ex.plan) {
				return errSlots, 0
			}
			ex.slot = true
		}
	}
	return nil, 0
}

// newExchange takes an exchange from the loop's spares.
func (ls *loopState) newExchange() *exchange {
	if n := len(ls.spareEx); n > 0 {
		ex := ls.spareEx[n-1]
		ls.spareEx = ls.spareEx[:n-1]
		return ex
	}
	return new(exchange)
}

// recycle keeps a settled exchange for the next request.
func (ls *loopState) recycle(ex *exchange) {
	if len(ls.spareEx) < maxSpareExchanges {
		resp := ex.resp[:0]
		if cap(resp) > 64<<10 {
			resp = nil
		}
		*ex = exchange{resp: resp}
		ls.spareEx = append(ls.spareEx, ex)
	}
}

// maxSpareExchanges bounds the spare exchanges a loop keeps.
const maxSpareExchanges = 4096

// accessOf is the level a route of the table needs (routes.Parse admits
// only these names).
func accessOf(r routes.Route) identity.Level {
	switch r.Access {
	case "read-only":
		return identity.ReadOnly
	case "write-only":
		return identity.WriteOnly
	case "read-write":
		return identity.ReadWrite
	}
	return identity.Admin
}

// give appends answer bytes for the client, written at the end of the
// round (write).
func (cc *clientConn) give(b []byte) {
	if cc.isClosed || cc.lost {
		return // nothing after a lost answer: the connection closes
	}
	cc.out = append(cc.out, b...)
	cc.markWrite()
}

// markWrite lists the client for the loop's next writeListed.
func (cc *clientConn) markWrite() {
	if !cc.listed {
		cc.listed = true
		cc.ls.toWrite = append(cc.ls.toWrite, cc)
	}
}

// answered settles an exchange whose answer has been handed to the client:
// the meters, the slot, the client's count in flight. It returns the
// client when nothing of it is in flight any more (answeredAll is due).
func (ex *exchange) answered(status, delivered int) *clientConn {
	switch ex.kind {
	case exPush:
		pushAnswered(ex.ts, ex.plan, ex.items, status)
	case exPop:
		if status == 200 {
			popAnswered(ex.ts, ex.plan, delivered)
		}
	}
	return ex.settle()
}

// fail answers an exchange's client with e, errForwardFailed: its request
// reached no broker. What its admission held is given back.
func (ex *exchange) fail(e *wire.Error) *clientConn {
	if ex.cl != nil {
		ex.streamFail(e)
		return nil
	}
	if ex.kind == exPush {
		pushAnswered(ex.ts, ex.plan, ex.items, 0)
	}
	if cc := ex.cc; cc != nil {
		cc.g.m.refused(e.Code)
		cc.give(appendFailure(nil, e, ex.close))
	}
	return ex.settle()
}

// lose settles an exchange whose request was written to a broker whose
// connection then failed before its answer came: the broker may have
// served it, so it gets no 503 ephemeral_forward_failed, which says that
// nothing was done and which the SDKs send again by themselves (a push
// would be applied twice). Its client's connection closes after the
// answers before it instead, as the broker's own would have: the client
// sees a lost answer, as without a gateway (docs/gateway.md, "When a
// broker fails with a request written"). What its admission held is given
// back.
func (ex *exchange) lose() *clientConn {
	if ex.cl != nil {
		ex.streamLost()
		return nil
	}
	if ex.kind == exPush {
		pushAnswered(ex.ts, ex.plan, ex.items, 0)
	}
	if cc := ex.cc; cc != nil {
		cc.lose()
	}
	return ex.settle()
}

// lose closes the connection once the answers given so far have left; no
// later answer is given.
func (cc *clientConn) lose() {
	if cc.lost || cc.isClosed {
		return
	}
	cc.g.m.lost.Inc()
	cc.lost, cc.closeAfter = true, true
	cc.markWrite()
}

// settle releases the slot and counts the exchange out of its client.
func (ex *exchange) settle() *clientConn {
	if ex.slot {
		ex.slot = false
		ex.ts.parked.Add(-1)
	}
	cc := ex.cc
	if cc == nil {
		return nil
	}
	ex.cc = nil
	if ex.close {
		cc.closeAfter = true
	}
	cc.inFlight--
	if cc.inFlight > 0 {
		return nil
	}
	cc.up = nil
	cc.lastActive = cc.g.now.Load() // idle from its last answer, not its request (closeIdle, shed.go)
	return cc
}

// answeredAll runs when the last answer in flight has been given: a held
// request is read again.
func (cc *clientConn) answeredAll() {
	if cc.isClosed || !cc.held {
		return
	}
	cc.held = false
	if e := cc.refuseLater; e != nil {
		cc.refuseLater = nil
		cc.refuseBody(e)
	} else {
		cc.serve()
	}
	cc.markWrite()
}

// write sends the round's answers, and closes when asked to once nothing
// is in flight.
func (cc *clientConn) write() gnet.Action {
	if len(cc.out) > 0 && !cc.isClosed {
		_, err := cc.c.Write(cc.out)
		cc.out = reuse(cc.out)
		if err != nil {
			return gnet.Close
		}
		cc.countOutbound()
	}
	if cc.toLink != nil && !cc.isClosed {
		return cc.becomeLink()
	}
	if cc.lost || cc.closeAfter && cc.inFlight == 0 && !cc.busy {
		return gnet.Close
	}
	return gnet.None
}

// writeListed writes the answers given to the loop's clients this round.
func (ls *loopState) writeListed() {
	for i, cc := range ls.toWrite {
		ls.toWrite[i] = nil
		cc.listed = false
		if cc.write() == gnet.Close && !cc.isClosed {
			_ = cc.c.Close()
		}
	}
	ls.toWrite = ls.toWrite[:0]
	for i, l := range ls.linksToWrite {
		ls.linksToWrite[i] = nil
		l.listed = false
		if l.write() == gnet.Close {
			_ = l.c.Close()
		}
	}
	ls.linksToWrite = ls.linksToWrite[:0]
}

// closed runs in OnClose: the client's answers in flight are dropped when
// they come, and a waiting pop's broker connection is closed, which the
// broker takes as the pop's end (its messages stay unleased).
func (cc *clientConn) closed() {
	cc.isClosed = true
	delete(cc.ls.clients, cc)
	if cc.p != nil {
		cc.p.Reset()
		cc.ls.parsers.Put(cc.p)
		cc.p = nil
	}
	cc.big = nil
	cc.bodyDone()
	cc.g.inflight.Add(-cc.queuedOut)
	cc.queuedOut = 0
	if u := cc.up; u != nil {
		for _, ex := range u.queue {
			if ex != nil && ex.cc == cc {
				ex.cc = nil
				if ex.slot {
					ex.slot = false
					ex.ts.parked.Add(-1)
				}
			}
		}
	}
	for _, ex := range cc.onLink {
		ex.cc = nil
		if ex.slot {
			ex.slot = false
			ex.ts.parked.Add(-1)
		}
		if ex.wait && !ex.done && ex.bl != nil {
			ex.bl.cancel(ex.linkID) // the broker lets its parked pop go
		}
	}
	cc.onLink, cc.link = nil, nil
	if u := cc.own; u != nil {
		cc.own = nil
		if len(u.queue) > 0 && u.c != nil {
			u.owner = nil
			_ = u.c.Close() // OnClose: failed; the broker ends a parked pop with it
		} else if len(u.queue) > 0 {
			u.owner = nil
			u.dead = true // being dialled: opened closes it
			u.ls.forget(u)
		} else {
			u.release()
		}
	}
}

// closeIdle closes the loop's clients with nothing in flight that have
// been quiet for the idle timeout, and those whose request's head or body
// has been arriving for longer than its timeout (body.go); the others'
// unread answers are counted again (outbound.go).
func (ls *loopState) closeIdle(now int64) {
	limit := int64(ls.g.cfg.IdleTimeout)
	for cc := range ls.clients {
		if cc.inFlight == 0 && !cc.busy && now-cc.lastActive > limit || cc.overdue(now) {
			_ = cc.c.Close()
			continue
		}
		cc.recheckOutbound()
	}
	ls.writeListed()
	ls.flushOwn()
}

// isLoopback reports whether the client connects from this host.
func (cc *clientConn) isLoopback() bool {
	a, ok := cc.c.RemoteAddr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
