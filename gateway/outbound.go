package gateway

// Answers a client has not read (docs/gateway.md, "The front door").
//
// What gnet holds of a client's answers, unsent because the client does
// not read, counts against the bound on request bytes in flight
// (MaxInflightBytes) beside the bodies being read: a gateway full of
// unread answers refuses new bodies on their heads (503). An answer is
// never refused (its request was served), so the bound is kept by reading
// no more requests of a client whose unread answers pass outboundSoft: the
// broker's rule (QUEEN_OUTBOUND_SOFT_BYTES there). gnet says nothing when
// its buffer drains, so such a client is looked at again on the tick.

// outboundSoft: a client whose unread answers pass this has its next
// requests wait, unread, until they drain (the broker's default soft
// limit).
const outboundSoft = 1 << 20

// countOutbound brings the client's share of the in-flight bound up to
// date with what gnet holds of its answers.
func (cc *clientConn) countOutbound() {
	n := int64(cc.c.OutboundBuffered())
	if d := n - cc.queuedOut; d != 0 {
		cc.g.inflight.Add(d)
		cc.queuedOut = n
	}
}

// overOutbound reports whether the client's unread answers pass
// outboundSoft, and marks it stalled if so: its next request is not read.
func (cc *clientConn) overOutbound() bool {
	if cc.c.OutboundBuffered() <= outboundSoft {
		return false
	}
	cc.stalled = true
	return true
}

// recheckOutbound runs on the tick: the count is brought up to date, and a
// stalled client whose answers have drained is served again.
func (cc *clientConn) recheckOutbound() {
	cc.countOutbound()
	if !cc.stalled || cc.c.OutboundBuffered() > outboundSoft {
		return
	}
	cc.stalled = false
	if !cc.busy && !cc.held {
		cc.serve()
		cc.markWrite()
	}
}

// recountOutbound brings the counts of the loop's clients up to date
// before a body is refused for the bound: answers that have left since the
// last count give their room back.
func (ls *loopState) recountOutbound() {
	for cc := range ls.clients {
		cc.countOutbound()
	}
}
