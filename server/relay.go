package server

import (
	"time"

	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire"
)

// The landing side of the relay (D17; docs/cell.md, "Relaying in the
// server"): a push, pop or ack of a queue another member owns is sent to
// it on this loop's dialled link (relaylink.go), and its answer, or the
// relay's refusal, ends the waiting connection's busy spell, or the
// request of a link frame's stand-in.

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
	if cs.isStandIn && cs.frameLink == nil {
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
		cs.answerFrame(raw) // a link frame's answer carries no connection fields
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
		cs.answerFrame(cs.out)
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
		// A refuse frame "lost": a gateway closes its client's connection
		// for it, as this member closes a client's own, and a client link's
		// SDK reports the call "may have been applied" (docs/link.md).
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

// answerFrame gives a link frame's stand-in (a gateway's or a client's)
// its answer, raw, once the request's relay to its owner has ended (on the
// loop), and takes the stand-in back.
func (cs *conn) answerFrame(raw []byte) {
	g, id := cs.frameLink, cs.frameID
	delete(g.streams, id)
	g.answer(id, raw) // copied into the link's output
	cs.ls.putStandIn(cs)
}
