package server

import (
	"context"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/wire"
)

// loopState is an event loop's state, in two parts: loopHTTP, what the
// loop's HTTP connections share (loophttp.go), and loopLinks, its links
// (looplinks.go). Every field is touched only on the loop, but for the
// counts the goroutines that tend the loops read.
type loopState struct {
	s    *Server
	loop gnet.EventLoop

	// The connections and client links of this loop stopped for their
	// unread answers (conn.throttle, linkConn.stopReading), looked at
	// every throttleCheck by check (checkThrottled); nThrottled is their
	// number, read by the watcher goroutine.
	nThrottled atomic.Int32
	check      gnet.RunnableFunc

	loopHTTP
	loopLinks
}

// loopStateOf returns the state of loop, making it at its first
// connection.
func (s *Server) loopStateOf(loop gnet.EventLoop) *loopState {
	ls, _ := s.loops.LoadOrCompute(loop, func() (*loopState, bool) {
		ls := &loopState{loop: loop, s: s, loopHTTP: loopHTTP{parsers: wire.ParserPool{Limits: wire.Limits{MaxBody: s.cfg.MaxBodyBytes}}}}
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
// The client links stopped are looked at after them (checkThrottledLinks).
func (ls *loopState) checkThrottled(context.Context) error {
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
