package server

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/wire"
)

// Relaying in a cell (D17; docs/cell.md, "Relaying in the server"). A push,
// pop or ack (the routes whose cellRole is servedByOwner) that lands on a
// member that does not own its (tenant, queue) is relayed to the owner once
// identity, kill switch, grant and shape have been checked here; the
// owner's answer is written back byte for byte. The owner serves a relayed
// request through the same route handler as a local one, on a conn whose
// gnet.Conn is a relayConn (the answer goes back through the relay instead
// of a socket).

// The cell's two refusals (server/codes.go; docs/cell.md says when each is answered).
var (
	errOwnerMoved    = &wire.Error{Status: 503, Code: codeOwnerMoved, Msg: "ownership of the queue moved while the request was in flight; it was not served"}
	errForwardFailed = &wire.Error{Status: 503, Code: codeForwardFailed, Msg: "the broker that owns the queue could not be reached"}
)

// Relay deadlines: a push or an ack is bounded by relayShortDeadline; a
// pop by its wait plus relayMargin, so an owner that never answers still
// ends the call.
const (
	relayShortDeadline = 30 * time.Second
	relayMargin        = 5 * time.Second
)

// cellState is the server's part of the cell: nil in a cell of one.
type cellState struct {
	m     *cell.Membership
	rc    *relay.Client
	delay time.Duration // fault injection (QUEEN_TEST_RELAY_DELAY_MS): the owner waits this long before serving a relayed request
	ls    sync.Pool     // *loopScratch for relayed requests served on relay goroutines

	// Metrics (cell members only): requests this member relayed, relayed
	// requests it served as the owner, and relays whose client connection
	// it closed unanswered because the owner may have acted. The two
	// refusals are counted with every refusal, by code.
	relayed, served, lost *metrics.Counter
}

// AttachCell makes the server a member of a cell: requests for queues it
// does not own in the membership's current view are relayed through rc.
// It is called before the membership starts (whose OnChange is
// CellChanged), SetMembership after, and both before Start and before the
// relay server serves RelayHandler. delay is a test hook (zero in
// production): the owner waits that long before serving each relayed
// request, so a test can move ownership while one is in flight
// (owner_moved).
func (s *Server) AttachCell(rc *relay.Client, delay time.Duration) {
	s.cell = &cellState{rc: rc, delay: delay}
	s.cell.ls.New = func() any { return &loopScratch{} }
	set := s.m.set
	s.cell.relayed = set.NewCounter("queen_ephemeral_relayed_total")
	s.cell.served = set.NewCounter("queen_ephemeral_relay_served_total")
	s.cell.lost = set.NewCounter("queen_ephemeral_relay_closed_unanswered_total")
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

// RelayHandler is the relay server's handler: it serves requests relayed
// to this member by the others.
func (s *Server) RelayHandler() relay.Handler { return s.serveRelayed }

// RelayCounts reports the relayed requests answered 503
// ephemeral_forward_failed and those whose client connection was closed
// unanswered because the owner may have acted.
func (s *Server) RelayCounts() (forwardFailed, lost int64) {
	return s.relayFailed.Load(), s.relayLost.Load()
}

// CellChanged is the membership's OnChange: the queues this member no
// longer owns in next are dropped (D17: a move empties what moved), and the
// relay forgets members that left. A member coming back from fencing drops
// everything it held: a request checked just before the fence may have
// added contents after the fenced view's drop (docs/engine.md). The walk
// runs on the membership goroutine; it allocates nothing and costs about
// 0.2 µs a queue (docs/engine.md), which the next heartbeat waits for.
func (s *Server) CellChanged(prev, next *cell.View) {
	rejoined := prev != nil && prev.Fenced() && !next.Fenced()
	s.e.DropMoved(func(tenant, queue string) bool {
		return !rejoined && next.Owns(tenant, queue)
	})
	s.redivide(next)
	if prev == nil || s.cell == nil {
		return
	}
	for _, old := range prev.Members {
		if old.ID == next.Self {
			continue
		}
		if !hasMember(next.Members, old.ID) {
			s.cell.rc.Forget(old.ID)
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
	if cs.relayed {
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

// relay sends req to the member at addr and makes the connection busy
// until its answer is written (P1: nothing here waits).
func (cs *conn) relay(req *wire.Request, addr string, wait time.Duration) {
	deadline := relayShortDeadline
	if wait > 0 {
		deadline = wait + relayMargin
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	cs.relayCancel = cancel
	head := req.Head(0)
	rr := relay.Request{
		Tenant: []byte(cs.tenant),
		Access: uint8(cs.access),
		Method: req.MethodName,
		Target: req.Target,
		Body:   req.Body,
	}
	cs.goBusy()
	cs.s.cell.relayed.Inc()
	err := cs.s.cell.rc.Go(ctx, addr, &rr, func(r relay.Response, err error) {
		cancel()
		cs.relayDone(head, r, err)
	})
	if err != nil {
		// Not started: nothing reached the owner.
		cancel()
		cs.state.Store(stIdle)
		cs.refuse(req, errForwardFailed)
	}
}

// relayDone writes a relayed request's outcome (on a relay goroutine): the
// owner's answer as it is, but for the connection fields of this client's
// request; 503 ephemeral_forward_failed when the owner provably never got
// the request; otherwise (it may have acted, or the client went away) the
// client's connection is closed without an answer, exactly as a lost answer
// looks without a cell (docs/cell.md, "SDKs").
func (cs *conn) relayDone(head wire.Head, r relay.Response, err error) {
	switch {
	case err == nil:
		raw, closeAfter := connectionFields(r.Raw, head)
		cs.s.m.observe(cs.reqRoute, cs.reqStart)
		cb := cs.onWritten
		if closeAfter {
			cb = cs.closeAfterAsync
		}
		_ = cs.c.AsyncWrite(raw, cb)
	case relay.ForwardFailed(err) && !relay.MaybeDelivered(err):
		cs.s.relayFailed.Add(1)
		cs.answerAsync(cs.s.appendError(nil, head, errForwardFailed))
	default:
		cs.s.relayLost.Add(1)
		cs.s.cell.lost.Inc()
		_ = cs.c.Close()
	}
}

// closeAfterAsync runs on the loop after a relayed answer that ends the
// connection was written.
func (cs *conn) closeAfterAsync(c gnet.Conn, err error) error {
	cs.state.Store(stIdle)
	return c.Close()
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

// serveRelayed is the relay server's handler: the owner's side of a
// relayed request.
func (s *Server) serveRelayed(ctx context.Context, rq *relay.Request, reply func(relay.Response)) {
	if d := s.cell.delay; d > 0 {
		time.AfterFunc(d, func() { s.serveRelayedNow(ctx, rq, reply) })
		return
	}
	s.serveRelayedNow(ctx, rq, reply)
}

// serveRelayedNow serves rq through its route's handler, as if it had
// landed here with the identity the landing member established (D17: the
// owner trusts it, the relay having authenticated the member), on the
// relay's goroutine. The handler answers into the conn's output (written
// back at once) or, for a pop that parks, later through relayConn's
// AsyncWrite; the caller giving up (its client closed) cancels the parked
// pop as a closed connection does.
func (s *Server) serveRelayedNow(ctx context.Context, rq *relay.Request, reply func(relay.Response)) {
	if ctx.Err() != nil {
		return // the caller gave up while the request waited
	}
	if s.serveLocal(rq, reply) {
		return // a member-local reset or delete of another member's fan-out
	}
	s.cell.served.Inc()
	vc := &relayConn{reply: reply}
	cs := &conn{s: s, c: vc, relayed: true}
	cs.sink = popSink{cs: cs, e: s.e}
	cs.reqStart = time.Now()
	ls := s.cell.ls.Get().(*loopScratch)
	cs.ls = ls
	req := relayedRequest(rq)
	r := relayedRoute(req)
	switch {
	case r == nil:
		cs.refuse(req, errNoRoute)
	case Access(rq.Access)&r.need != r.need:
		cs.refuse(req, errLevel)
	default:
		cs.reqRoute = r.id
		cs.tenant, cs.access = string(rq.Tenant), Access(rq.Access)
		cs.ts = s.tenantState(cs.tenant)
		r.serve(cs, req, nil)
	}
	cs.ls = nil
	s.cell.ls.Put(ls)
	if cs.state.Load() != stBusy {
		s.m.observe(cs.reqRoute, cs.reqStart)
		reply(relay.Response{Raw: cs.out})
		return
	}
	// Parked. Its answer comes through vc.AsyncWrite; Cancel on a pop that
	// has been completed meanwhile does nothing.
	parked := cs.sink.parked
	context.AfterFunc(ctx, func() {
		if !vc.answered.Load() {
			s.e.Cancel(parked)
		}
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

// relayedRequest makes a wire.Request of a relayed one: HTTP/1.1,
// keep-alive, so the owner's answer carries no connection fields of its own.
func relayedRequest(rq *relay.Request) *wire.Request {
	req := &wire.Request{
		MethodName: rq.Method,
		Target:     rq.Target,
		Path:       rq.Target,
		Minor:      1,
		Body:       rq.Body,
		KeepAlive:  true,
	}
	switch string(rq.Method) {
	case "GET":
		req.Method = wire.MethodGet
	case "POST":
		req.Method = wire.MethodPost
	case "DELETE":
		req.Method = wire.MethodDelete
	}
	if i := bytes.IndexByte(rq.Target, '?'); i >= 0 {
		req.Path, req.RawQuery = rq.Target[:i], rq.Target[i+1:]
	}
	return req
}

// relayConn stands in for the socket of a relayed request on the owner:
// the only calls a route handler makes on its connection are an async
// write of a parked pop's answer (popSink.Complete, through answerAsync)
// and, never for these, Close. Every other gnet.Conn method is left to the
// nil embedded interface: calling one is a bug and panics.
type relayConn struct {
	gnet.Conn
	reply    func(relay.Response)
	answered atomic.Bool
}

// AsyncWrite sends a parked pop's answer back through the relay. The
// sink's buffer is reused by nobody (the conn is used once), so it is
// handed over as is.
func (rc *relayConn) AsyncWrite(b []byte, _ gnet.AsyncCallback) error {
	rc.answered.Store(true)
	rc.reply(relay.Response{Raw: b})
	return nil
}

func (rc *relayConn) Close() error { return nil }
