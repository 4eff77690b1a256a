package server

import (
	"github.com/panjf2000/gnet/v2"
)

// Answers a client has not read (docs/server.md, "Unread answers"): a
// connection whose unsent answers pass the soft limit stops being served
// until its client reads, is closed once it stays over for too long, and
// is closed at once when a write leaves it over the hard limit while
// answers were already waiting.

// writeOut hands this round's answers so far to gnet.
func (cs *conn) writeOut() gnet.Action {
	if len(cs.out) == 0 {
		return gnet.None
	}
	before := cs.c.OutboundBuffered()
	if _, err := cs.c.Write(cs.out); err != nil {
		return gnet.Close
	}
	if cap(cs.out) > 1<<20 {
		cs.out = nil // do not pin a huge answer's buffer on an idle connection
	} else {
		cs.out = cs.out[:0]
	}
	if before > 0 && cs.c.OutboundBuffered() > cs.s.cfg.OutboundHard {
		// Answers were already waiting unread and now pass the hard limit.
		// One large answer to a client that reads is not this.
		cs.s.tm.outboundShed.Inc()
		return gnet.Close
	}
	return gnet.None
}

// throttle stops serving the connection until its client reads: its loop
// looks at it again every throttleCheck (loopState.checkThrottled).
func (cs *conn) throttle() {
	if !cs.overSince.CompareAndSwap(0, cs.s.now.Load()) || cs.listed {
		return
	}
	cs.listed = true
	cs.ls.throttled = append(cs.ls.throttled, cs)
	cs.ls.nThrottled.Add(1)
	cs.s.nThrottled.Add(1)
	cs.s.watchThrottled()
}

// outboundDrained reports whether a connection stopped for its unsent
// answers may be served again, and if so forgets that it was over.
func (cs *conn) outboundDrained() bool {
	if cs.c.OutboundBuffered() > cs.s.cfg.OutboundSoft {
		return false
	}
	cs.overSince.Store(0)
	return true
}

// checkOutbound looks, on its loop, at a connection stopped for its unread
// answers: it closes one that stayed over the soft limit for too long and
// serves one whose client has read (gnet says nothing when its buffer
// drains). It reports whether the connection is still stopped.
func (cs *conn) checkOutbound() (stopped bool) {
	since := cs.overSince.Load()
	if cs.isClosed || since == 0 {
		return false
	}
	if cs.state.Load() != stIdle {
		return true
	}
	if !cs.outboundDrained() {
		if cs.s.now.Load()-since > int64(cs.s.cfg.OutboundSoftTime) {
			cs.s.tm.outboundShed.Inc()
			cs.c.Close()
			return false
		}
		return true
	}
	if cs.serveBuffered() == gnet.Close {
		cs.c.Close()
	}
	return false
}
