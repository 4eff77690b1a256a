package gateway

import (
	"context"
	"time"
)

// Answers a client has not read (docs/gateway.md, "The front door").
//
// What gnet holds of a client's answers, unsent because the client does
// not read, counts against the bound on request bytes in flight
// (MaxInflightBytes) beside the bodies being read: a gateway full of
// unread answers refuses new bodies on their heads (503). An answer is
// never refused (its request was served), so the bound is kept by reading
// no more requests of a client whose unread answers pass outboundSoft: the
// broker's rule (QUEEN_OUTBOUND_SOFT_BYTES there). gnet says nothing when
// its buffer drains, so such a client's loop looks at it again every
// stallCheck while it stays stalled, and every client is counted again on
// the tick.

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
// outboundSoft, and stalls it if so: its next request is not read until
// they drain (its loop looks again every stallCheck).
func (cc *clientConn) overOutbound() bool {
	if cc.c.OutboundBuffered() <= outboundSoft {
		cc.stalled = false
		return false
	}
	if !cc.stalled {
		cc.stalled = true
		cc.ls.stalled = append(cc.ls.stalled, cc)
		cc.ls.watchStalled()
	}
	return true
}

// stallCheck is how often a loop looks again at its stalled clients: gnet
// reports no drained outbound buffer, and the 1 s tick would make a client
// that reads promptly wait up to a second behind a large answer (the
// broker's throttleCheck).
const stallCheck = 5 * time.Millisecond

// watchStalled has the loop look at its stalled clients after stallCheck,
// unless it is to already.
func (ls *loopState) watchStalled() {
	if ls.stallArmed {
		return
	}
	ls.stallArmed = true
	time.AfterFunc(stallCheck, func() {
		_ = ls.loop.Execute(context.Background(), ls.stallTask)
	})
}

// checkStalled runs on the loop: stalled clients whose answers drained are
// served again; while any is left, it looks again after stallCheck.
func (ls *loopState) checkStalled(context.Context) error {
	ls.stallArmed = false
	kept := ls.stalled[:0]
	for _, cc := range ls.stalled {
		if !cc.isClosed {
			cc.recheckOutbound()
		}
		if cc.stalled && !cc.isClosed {
			kept = append(kept, cc)
		}
	}
	clear(ls.stalled[len(kept):])
	ls.stalled = kept
	keptLinks := ls.stalledLinks[:0]
	for _, l := range ls.stalledLinks {
		if !l.closed {
			l.recheckOutbound()
		}
		if l.stalled && !l.closed {
			keptLinks = append(keptLinks, l)
		}
	}
	clear(ls.stalledLinks[len(keptLinks):])
	ls.stalledLinks = keptLinks
	ls.writeListed()
	ls.flushOwn()
	if len(ls.stalled) > 0 || len(ls.stalledLinks) > 0 {
		ls.watchStalled()
	}
	return nil
}

// recheckOutbound brings the client's count up to date, and serves a
// stalled client whose answers have drained.
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
	for l := range ls.clientLinks {
		l.countOutbound()
	}
}
