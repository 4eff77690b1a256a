package server

import (
	"context"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// loopScratch holds the decoders and buffers a request borrows while it is
// served (P3). A loop serves one request at a time, and nothing served off
// the loop keeps any of them (the async paths copy what they need), so one
// set per loop is enough: a connection does not carry its own, and a large
// ack or listing does not leave its grown buffers on an idle connection.
type loopScratch struct {
	push     wire.PushBody
	ack      wire.AckBody
	conf     wire.ConfigureBody
	ackItems []engine.AckItem
	outcomes []engine.Outcome
	depth    engine.DepthInfo
	queues   []engine.QueueInfo
	scratch  []byte

	// The cell (relaylink.go): this loop's dialled links by peer address
	// (nLinks their number, read by the tending goroutine), the links other
	// members dialled (nAccepted their number), the links with frames to
	// write this round, the stand-in conns for relayed requests and the
	// request they are served from.
	s            *Server
	links        map[string]*relayLink
	dialFailed   map[string]int64 // unix nanos of each peer's last failed dial (relaylink.go, redialAfter)
	nLinks       atomic.Int32
	accepted     map[*relayLink]struct{}
	nAccepted    atomic.Int32
	dirty        []*relayLink
	standIns     []*conn
	standInsMade int // stand-ins allocated since boot: reuse keeps it flat (standIn)
	relayReq     wire.Request
	tendTask     gnet.RunnableFunc
	flushPending bool
	gatewayRead  bool // a gateway or client link's read is being served: it writes the links at its end
	flushTask    gnet.RunnableFunc

	// The client links on this loop (clientlink.go), tended every second;
	// nClientLinks is their number, read by the tending goroutine.
	clientLinks    map[*relayLink]struct{}
	nClientLinks   atomic.Int32
	tendClientTask gnet.RunnableFunc

	// parsers lends parsers to this loop's connections (wire.ParserPool).
	parsers wire.ParserPool

	// The connections of this loop stopped for their unread answers
	// (conn.throttle), looked at every throttleCheck; nThrottled is their
	// number, read by the watcher goroutine.
	loop       gnet.EventLoop
	throttled  []*conn
	spare      []*conn
	nThrottled atomic.Int32 // the connections and client links stopped
	check      gnet.RunnableFunc
	// The client links of this loop stopped for their unread answers
	// (linkbounds.go), looked at with the connections.
	throttledLinks []*relayLink
	spareLinks     []*relayLink
}

// scratchOf returns the scratch of loop, making it at its first connection.
func (s *Server) scratchOf(loop gnet.EventLoop) *loopScratch {
	ls, _ := s.scratch.LoadOrCompute(loop, func() (*loopScratch, bool) {
		ls := &loopScratch{loop: loop, s: s, parsers: wire.ParserPool{Limits: wire.Limits{MaxBody: s.cfg.MaxBodyBytes}}}
		ls.check = ls.checkThrottled
		ls.tendTask = ls.tend
		ls.flushTask = ls.flushLinksTask
		ls.tendClientTask = ls.tendClientLinks
		return ls, false
	})
	return ls
}

// checkThrottled runs on the loop: every connection stopped for its unread
// answers is looked at once (conn.checkOutbound); those still stopped stay
// listed. One served here that stops again lists (and counts) itself anew.
func (ls *loopScratch) checkThrottled(context.Context) error {
	list := ls.throttled
	ls.throttled, ls.spare = ls.spare[:0], nil
	for i, cs := range list {
		list[i] = nil
		cs.listed = false
		if cs.checkOutbound() {
			cs.listed = true
			ls.throttled = append(ls.throttled, cs)
			continue
		}
		ls.nThrottled.Add(-1)
		cs.s.nThrottled.Add(-1)
	}
	ls.spare = list[:0]
	ls.checkThrottledLinks()
	return nil
}
