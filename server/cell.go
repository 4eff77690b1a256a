package server

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/link"

	"github.com/VictoriaMetrics/metrics"
	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// Relaying in a cell (D17; docs/cell.md, "Relaying in the server"). A push,
// pop or ack (the routes whose cellRole is servedByOwner) that lands on a
// member that does not own its (tenant, queue) is relayed to the owner once
// identity, kill switch, grant and shape have been checked here; the
// owner's answer is written back byte for byte. The relay's connections are
// served on the event loops (relaylink.go). The owner serves a relayed
// request through the same route handler as a local one, on a stand-in conn
// of the link's loop whose answer goes back on the link instead of a socket.

// The cell's two refusals (server/codes.go; docs/cell.md says when each is answered).
var (
	errOwnerMoved    = &wire.Error{Status: 503, Code: codeOwnerMoved, Msg: "ownership of the queue moved while the request was in flight; it was not served"}
	errForwardFailed = &wire.Error{Status: 503, Code: codeForwardFailed, Msg: "the broker that owns the queue could not be reached"}
)

// cellState is the server's part of the cell: nil in a cell of one.
type cellState struct {
	m  viewer        // the membership (a test may stand in its own)
	rc *relay.Client // the fan-out of reset and delete (fanout.go); requests are relayed on the loops (relaylink.go)
	RelayOptions

	// Metrics (cell members only): requests this member relayed, relayed
	// requests it served as the owner, relays whose client connection it
	// closed unanswered because the owner may have acted, and the relay's
	// dials. The two refusals are counted with every refusal, by code.
	relayed, served, lost, dials *metrics.Counter
	refused, shed                *metrics.Counter // the relay port's, counted by cmd/queen's relay.Server
	linkCount                    atomic.Int64     // relay links open or being dialled, both ways
}

// RelayOptions configure the relay on the event loops (relaylink.go).
type RelayOptions struct {
	Secret       []byte        // the cell secret: links are dialled with its handshake
	DialTimeout  time.Duration // dial and handshake together (default 2 s)
	PingInterval time.Duration // every dialled link is pinged this often (default 1 s)
	PingTimeout  time.Duration // a link, dialled or accepted, silent for this long fails, and its calls with it (default 5 s)
	// FrameTimeout: a link whose frame, once begun, is not whole within
	// this long fails (default: the server's BodyTimeout), so that a peer
	// cannot hold the bytes of frames it never completes.
	FrameTimeout time.Duration
	// CallDeadline bounds a relayed push or ack (default 30 s), PopMargin
	// a relayed pop beyond its wait (default 5 s): an owner that never
	// answers still ends the call, and the client's connection is closed
	// (the owner may have acted).
	CallDeadline, PopMargin time.Duration
	// FanOutDeadline bounds the wait for the other members' answers to a
	// reset or delete (fanout.go; default 5 s): set it to the member
	// timeout, within which a silent member leaves the cell anyway.
	FanOutDeadline time.Duration
	// Delay is a test hook (zero in production): the owner waits this long
	// before serving each relayed request, so a test can move ownership
	// while one is in flight (owner_moved).
	Delay time.Duration
}

// viewer is what the relay needs of the membership: its current view.
type viewer interface{ View() *cell.View }

// AttachCell makes the server a member of a cell: requests for queues it
// does not own in the membership's current view are relayed to their
// owner on the event loops; rc carries the fan-out of reset and delete.
// It is called before the membership starts (whose OnChange is
// CellChanged), SetMembership after, both before Start; connections from
// other members are handed to AdoptRelayConn once Start has returned.
func (s *Server) AttachCell(rc *relay.Client, opts RelayOptions) {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 2 * time.Second
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = time.Second
	}
	if opts.PingTimeout <= 0 {
		opts.PingTimeout = 5 * time.Second
	}
	if opts.FrameTimeout <= 0 {
		opts.FrameTimeout = s.cfg.BodyTimeout
	}
	if opts.CallDeadline <= 0 {
		opts.CallDeadline = 30 * time.Second
	}
	if opts.PopMargin <= 0 {
		opts.PopMargin = 5 * time.Second
	}
	if opts.FanOutDeadline <= 0 {
		opts.FanOutDeadline = 5 * time.Second
	}
	s.cell = &cellState{rc: rc, RelayOptions: opts}
	set := s.m.set
	s.cell.relayed = set.NewCounter("queen_ephemeral_relayed_total")
	s.cell.served = set.NewCounter("queen_ephemeral_relay_served_total")
	s.cell.lost = set.NewCounter("queen_ephemeral_relay_closed_unanswered_total")
	s.cell.dials = set.NewCounter("queen_ephemeral_relay_dials_total")
	s.cell.refused = set.NewCounter("queen_ephemeral_relay_handshakes_refused_total")
	s.cell.shed = set.NewCounter("queen_ephemeral_relay_shed_total")
	set.NewGauge("queen_ephemeral_relay_links", func() float64 { return float64(s.cell.linkCount.Load()) })
}

// SetMembership gives the server the cell's membership (see AttachCell),
// which also answers the status reads (/health's cell, GET
// /api/v1/system/cell) unless Config.Cell named another source. Like
// AttachCell it is called before Start.
func (s *Server) SetMembership(m *cell.Membership) {
	s.cell.m = m
	if s.cfg.Cell == nil {
		s.cfg.Cell = m
	}
}

// AdoptRelayConn serves a connection another member dialled to this
// member's relay port, once it passed the relay's handshake
// (relay.ServerConfig.Adopt): it is enrolled on an event loop and served
// there. Call it only after Start.
func (s *Server) AdoptRelayConn(nc net.Conn) {
	if s.cli == nil || s.stopping.Load() {
		nc.Close()
		return
	}
	_, _ = s.cli.EnrollContext(nc, &relayLink{s: s, role: linkAccepted}) // closes nc: the loop holds a duplicate
}

// CountRelayRefused and CountRelayShed count a connection to the relay
// port refused at its handshake, or closed before it (relay.ServerConfig's
// OnRefused and OnShed). Call them only after AttachCell.
func (s *Server) CountRelayRefused() { s.cell.refused.Inc() }

// CountRelayShed: see CountRelayRefused.
func (s *Server) CountRelayShed() { s.cell.shed.Inc() }

// RelayCounts reports the relayed requests answered 503
// ephemeral_forward_failed and those whose client connection was closed
// unanswered because the owner may have acted.
func (s *Server) RelayCounts() (forwardFailed, lost int64) {
	return s.relayFailed.Load(), s.relayLost.Load()
}

// CellChanging is the membership's BeforeChange: the queues this member is
// about to own in next and did not own in prev are emptied before any
// request can see next (D17: the new owner starts a queue empty). They
// hold something only when a request checked under an older view acted
// after that view's drop (the check and the act are not one step), or
// when this member comes back from fencing (prev owns nothing, so all it
// will own is emptied: a request checked just before the fence may have
// added contents after the fenced view's drop). Emptied here, such
// leftovers can never come back to life when ownership returns, and their
// ids answer stale (docs/cell.md, "Membership changes").
func (s *Server) CellChanging(prev, next *cell.View) {
	s.e.DropMoved(func(tenant, queue string) bool {
		return !next.Owns(tenant, queue) || prev.Owns(tenant, queue)
	})
}

// CellChanged is the membership's OnChange: the queues this member no
// longer owns in next are dropped (D17: a move empties what moved), shares
// of tenant allowances are divided anew, and the relay forgets members
// that left. Both walks run on the membership goroutine; they allocate
// nothing and cost about 0.2 µs a queue (docs/engine.md), which the next
// heartbeat waits for.
func (s *Server) CellChanged(prev, next *cell.View) {
	s.e.DropMoved(next.Owns)
	s.redivide(next)
	if s.views.n.Load() > 0 {
		go s.views.wake(s, false) // the view reads parked on an older generation
	}
	if prev == nil || s.cell == nil {
		return
	}
	for _, old := range prev.Members {
		if old.ID == next.Self {
			continue
		}
		if !hasMember(next.Members, old.ID) {
			s.cell.rc.Forget(old.ID)
			s.forgetLinks(old.ID)
		}
	}
}

func hasMember(ms []cell.Member, id string) bool {
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}

// elsewhere decides, once identity and shape have been checked, whether
// this member serves a push, pop or ack of queue itself. It reports true
// when the request has been taken care of otherwise: relayed to its owner
// (the connection goes busy), or refused. wait is a pop's wait (0 for the
// others). Checked as late as possible, just before the engine acts, so
// that an owner_moved answer means nothing was done.
func (cs *conn) elsewhere(req *wire.Request, queue []byte, wait time.Duration) bool {
	c := cs.s.cell
	if c == nil {
		return false
	}
	v := c.m.View()
	owner, ok := v.Owner(cs.tenant, bytesString(queue))
	if cs.relayed && cs.frameLink == nil {
		// The owner's side: serve only what this member owns now.
		if !ok || !v.IsSelf(owner) || v.Fenced() {
			cs.refuse(req, errOwnerMoved)
			return true
		}
		return false
	}
	switch {
	case !ok:
		// No live member in this member's view (it has not joined yet, or
		// it is fenced and sees nobody): nothing was sent anywhere.
		cs.refuse(req, errForwardFailed)
		return true
	case v.IsSelf(owner):
		if v.Fenced() {
			cs.refuse(req, errOwnerMoved)
			return true
		}
		return false
	}
	cs.relay(req, owner.ID, wait)
	return true
}

// relay sends req to the member at addr over this loop's link to it and
// makes the connection busy until the answer is written (P1: nothing here
// waits; relaylink.go).
func (cs *conn) relay(req *wire.Request, addr string, wait time.Duration) {
	deadline := cs.s.cell.CallDeadline
	if wait > 0 {
		deadline = wait + cs.s.cell.PopMargin
	}
	cs.s.cell.relayed.Inc()
	if l := cs.ls.link(cs.s, addr); l == nil || !l.call(cs, req, deadline) {
		// Not started (a dial to the owner failed just now, too many calls
		// waiting on the link, or it just failed): nothing reached the
		// owner.
		cs.s.relayFailed.Add(1)
		cs.refuse(req, errForwardFailed)
		return
	}
	cs.goBusy()
}

// relayAnswered writes the owner's answer (on the loop): as it is, but for
// the connection fields of this client's request; then the connection
// serves what queued behind it.
func (cs *conn) relayAnswered(raw []byte) {
	if cs.frameLink != nil {
		cs.s.m.observe(cs.reqRoute, cs.reqStart)
		cs.answerGateway(raw) // a link frame's answer carries no connection fields
		return
	}
	raw, closeAfter := connectionFields(raw, cs.relayHead)
	cs.s.m.observe(cs.reqRoute, cs.reqStart)
	cs.out = append(cs.out, raw...)
	cs.closeAfter = cs.closeAfter || closeAfter
	cs.resumeRelayed()
}

// relayRefused answers 503 ephemeral_forward_failed (on the loop): the
// owner provably did not get or did not serve the request.
func (cs *conn) relayRefused() {
	cs.s.relayFailed.Add(1)
	cs.out = cs.s.appendError(cs.out, cs.relayHead, errForwardFailed)
	if cs.frameLink != nil {
		cs.answerGateway(cs.out)
		return
	}
	cs.resumeRelayed()
}

// resumeRelayed ends a relay's busy spell on the loop, as the written
// answer of any other busy spell does (resumeAfterAsync). Called through
// the connection's onWritten: a direct call would make the route table
// refer to itself (Go's initialization order).
func (cs *conn) resumeRelayed() {
	_ = cs.onWritten(cs.c, nil)
}

// relayLost closes the client's connection without an answer (on the
// loop): the owner may have acted, so the client must see a lost answer
// (as without a cell) and never repeat a push or ack because of a 503
// (docs/cell.md, "SDKs").
func (cs *conn) relayLost() {
	cs.s.relayLost.Add(1)
	cs.s.cell.lost.Inc()
	if cs.frameLink != nil {
		// The gateway closes its client's connection for it, as this
		// member closes a client's own.
		delete(cs.frameLink.streams, cs.frameID)
		cs.frameLink.refuse(cs.frameID, link.RefuseLost)
		cs.ls.putStandIn(cs)
		return
	}
	// Nothing behind the lost answer is answered: gnet's Close runs after
	// this poll's events, and a read of this connection among them would
	// serve its pipelined requests, whose first answer the client would
	// take for the lost one's (HTTP/1.1 pairs them by order).
	cs.closeAfter = true
	cs.state.Store(stIdle)
	_ = cs.c.Close()
}

// answerGateway gives a gateway link's stand-in its answer, raw, once the
// request's relay to its owner has ended (on the loop), and takes the
// stand-in back.
func (cs *conn) answerGateway(raw []byte) {
	g, id := cs.frameLink, cs.frameID
	delete(g.streams, id)
	g.answer(id, raw) // copied into the link's output
	cs.ls.putStandIn(cs)
}

// letGo ends the request of a stand-in whose caller went away (a cancel
// frame, or its link closed): a pop parked here is let go as a closed
// connection's is (D13); a gateway link's frame relayed to its owner is
// cancelled there. The stand-in is taken back unless a completion is
// still to come.
func (cs *conn) letGo() {
	if cs.letGoView() {
		cs.ls.putStandIn(cs) // a parked view read: nothing will answer it
		return
	}
	if l := cs.relayLink; cs.frameLink != nil && l != nil && l != cs.frameLink {
		l.cancel(cs) // no answer will find it
		cs.ls.putStandIn(cs)
		return
	}
	if cs.s.e.Cancel(cs.sink.parked) {
		cs.ls.putStandIn(cs) // let go: Complete will not run
	}
}

var connClose = []byte("\r\nConnection: close\r\n")

var contentLength = []byte("\r\nContent-Length: ")

// connectionFields adapts the owner's answer to this client's connection:
// the owner answers as to an HTTP/1.1 keep-alive request, so an HTTP/1.0
// keep-alive client gets "Connection: keep-alive" and a client that asked
// to close gets "Connection: close", where wire.AppendHead puts it (after
// Content-Length), so the bytes are exactly those this member would have
// written had it owned the queue. closeAfter: the connection ends after the
// answer (the client asked, or the owner's answer says so).
func connectionFields(raw []byte, h wire.Head) (out []byte, closeAfter bool) {
	end := bytes.Index(raw, []byte("\r\n\r\n"))
	if end < 0 {
		return raw, true
	}
	if bytes.Contains(raw[:end+2], connClose) {
		return raw, true
	}
	var extra string
	switch {
	case h.Close:
		extra = "\r\nConnection: close"
	case h.KeepAlive:
		extra = "\r\nConnection: keep-alive"
	default:
		return raw, false
	}
	at := bytes.Index(raw[:end+2], contentLength)
	if at < 0 {
		return raw, true // not an answer of ours: pass it on and close
	}
	at += len(contentLength)
	at += bytes.Index(raw[at:], []byte("\r\n"))
	out = make([]byte, 0, len(raw)+len(extra))
	out = append(append(append(out, raw[:at]...), extra...), raw[at:]...)
	return out, h.Close
}

// serveRelayed serves a request frame of an accepted link, on its loop.
// It reports false for a frame that is not a request (the link is
// closed).
func (s *Server) serveRelayed(l *relayLink, id uint64, p []byte) bool {
	var rq link.Request
	if link.DecodeRequest(p, &rq) != nil {
		return false
	}
	if d := s.cell.Delay; d > 0 {
		// The tests that set the delay wait for this line: the request is
		// held here, so what they do next happens while the owner holds it.
		s.cfg.Logger.Warn("fault injection: holding a relayed request", "delay", d)
		own := append([]byte(nil), p...) // p is gnet's buffer: gone after this frame
		time.AfterFunc(d, func() {
			_ = l.ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
				var rq link.Request
				if !l.closed && link.DecodeRequest(own, &rq) == nil {
					s.serveRelayedNow(l, id, &rq)
				}
				return nil
			}))
		})
		return true
	}
	s.serveRelayedNow(l, id, &rq)
	return true
}

// serveRelayedNow serves rq through its route's handler, as if it had
// landed here with the identity the landing member established (D17: the
// owner trusts it, the relay having authenticated the member), on a
// stand-in conn of the link's loop. The answer joins the link's output at
// once, or, for a pop that parks, when it is completed (relayParked).
func (s *Server) serveRelayedNow(l *relayLink, id uint64, rq *link.Request) {
	if s.serveLocal(rq, l.replyLater(id)) {
		return // a member-local reset or delete of another member's fan-out
	}
	s.cell.served.Inc()
	ls := l.ls
	cs := ls.standIn(s)
	cs.relayLink, cs.relayID = l, id
	cs.reqStart = time.Now()
	req := link.ToWire(&ls.relayReq, rq)
	r := relayedRoute(req)
	switch {
	case r == nil:
		cs.refuse(req, errNoRoute)
	case !identity.Level(rq.Access).Allows(r.need):
		cs.refuse(req, identity.ErrLevel)
	default:
		cs.reqRoute = r.id
		cs.tenant, cs.access = s.tenantName(rq.Tenant), identity.Level(rq.Access)
		cs.ts = s.tenantState(cs.tenant)
		r.serve(cs, req, nil)
	}
	l.endStandIn(cs, id)
}

// endStandIn ends the serving of stream id's request on stand-in cs: its
// answer joins the link's output, or, for a pop that parked, it waits in
// the link's streams (answered through relayParked; a cancel frame lets it
// go).
func (l *relayLink) endStandIn(cs *conn, id uint64) {
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

// replyLater returns a reply for stream id that may be called from any
// goroutine: it answers on the link's loop (serveLocal's delete replies
// from a goroutine of its own). For the fan-out's rare requests only.
func (l *relayLink) replyLater(id uint64) func(link.Response) {
	return func(r link.Response) {
		_ = l.ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			l.answer(id, r.Raw)
			return nil
		}))
	}
}

// answer appends the answer of stream id to the link's output.
func (l *relayLink) answer(id uint64, raw []byte) {
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
func (l *relayLink) refuse(id uint64, reason byte) {
	if l.closed {
		return
	}
	l.out = link.AppendHeader(l.out, link.FrameRefuse, id, 1)
	l.out = append(l.out, reason)
	l.markDirty()
}

// relayParked answers a relayed pop that parked on this member, from
// whoever completed it (popSink.Complete): on the link's loop the answer
// joins the link's output, written at the end of that round; from anywhere
// else it is written by the link's AsyncWrite.
func (cs *conn) relayParked(by engine.Origin) {
	k := &cs.sink
	l, id := cs.relayLink, cs.relayID
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

// relayedRoute finds the servedByOwner route of a relayed request; nil for
// anything else (a landing member relays only those).
func relayedRoute(req *wire.Request) *ephemeralRoute {
	if !bytes.HasPrefix(req.Path, []byte(prefix)) {
		return nil
	}
	rest := req.Path[len(prefix):]
	for i := range fixedRoutes {
		r := &fixedRoutes[i]
		if r.cell == servedByOwner && string(rest) == r.path && req.Method == r.method {
			return r
		}
	}
	return nil
}

// standIn lends a conn that stands for a relayed request on this loop:
// no socket (c is nil: a handler that touches it fails loudly in the
// tests), relayed set, the loop's scratch and the loop itself, so that a
// push it serves completes this loop's parked pops in the same round.
func (ls *loopState) standIn(s *Server) *conn {
	if n := len(ls.standIns); n > 0 {
		cs := ls.standIns[n-1]
		ls.standIns = ls.standIns[:n-1]
		return cs
	}
	ls.standInsMade++
	cs := &conn{s: s, loop: ls.loop, ls: ls, standInFields: standInFields{relayed: true}}
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
	cs.relayLink, cs.relayID = nil, 0
	cs.frameLink, cs.frameID = nil, 0
	cs.reqRoute = 0
	cs.closeAfter = false
	cs.state.Store(stIdle)
	ls.standIns = append(ls.standIns, cs)
}

// forgetLinks fails every loop's link to the member at addr (it left the
// cell): its calls end at once rather than at the ping timeout.
func (s *Server) forgetLinks(addr string) {
	s.loops.Range(func(_ gnet.EventLoop, ls *loopState) bool {
		_ = ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			ls.forget(addr)
			return nil
		}))
		return true
	})
}
