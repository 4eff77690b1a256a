package server

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/wire"
)

// loopLinks is the links' part of a loop's state (loop.go): the cell's
// relay links (relaylink.go), dialled and accepted, the client links
// (clientlink.go), the links with frames to write, and the stand-ins that
// serve the requests links carry (standin.go). A gateway link is written
// like the others; the loop keeps no list of them.
type loopLinks struct {
	// The relay links this loop dialled, by peer address (nLinks their
	// number, read by the tending goroutine), and the unix nanos of each
	// peer's last failed dial (redialAfter).
	links      map[string]*linkConn
	dialFailed map[string]int64
	nLinks     atomic.Int32
	// The relay links other members dialled (nAccepted their number).
	accepted  map[*linkConn]struct{}
	nAccepted atomic.Int32
	// tendTask tends the relay links every ping interval (tend).
	tendTask gnet.RunnableFunc

	// The client links on this loop, tended every second by
	// tendClientTask (tendClientLinks); nClientLinks is their number, read
	// by the tending goroutine. throttledLinks: those stopped for their
	// unread answers (linkbounds.go), looked at with the connections
	// (loopState.checkThrottled).
	clientLinks    map[*linkConn]struct{}
	nClientLinks   atomic.Int32
	tendClientTask gnet.RunnableFunc
	throttledLinks []*linkConn
	spareLinks     []*linkConn

	// The links with frames to write this round (markDirty), written by
	// flushTask (flushLinks) unless a link's read is being served
	// (gatewayRead), which writes them at its end.
	dirty        []*linkConn
	flushPending bool
	gatewayRead  bool
	flushTask    gnet.RunnableFunc

	// The stand-in conns for the requests links carry (standin.go), how
	// many were allocated since boot (reuse keeps it flat), and the request
	// a link's frame is decoded into.
	standIns     []*conn
	standInsMade int
	relayReq     wire.Request
}

// flushLinksTask is flushLinks as the loop's task (markDirty).
func (ls *loopLinks) flushLinksTask(context.Context) error {
	ls.flushPending = false
	ls.flushLinks()
	return nil
}

// flushLinks writes the frames given to the loop's links since the last
// flush: one write per link, however many requests or answers it carries.
func (ls *loopLinks) flushLinks() {
	for i, l := range ls.dirty {
		ls.dirty[i] = nil
		l.listed = false
		if l.c == nil || l.closed || len(l.out) == 0 {
			continue // a dialled link keeps its frames until it is open
		}
		before := l.c.OutboundBuffered()
		_, err := l.c.Write(l.out)
		l.calls.Flushed()
		if cap(l.out) > 1<<20 {
			l.out = nil
		} else {
			l.out = l.out[:0]
		}
		if err != nil || l.role == linkClient && !l.underHard(before) {
			_ = l.c.Close()
		}
	}
	ls.dirty = ls.dirty[:0]
}

// endGatewayRead writes the links a gateway link's read gave frames to
// (its answers, and in a cell the requests it relayed), one write each.
func (ls *loopLinks) endGatewayRead() {
	ls.gatewayRead = false
	ls.flushLinks()
}

// tendAccepted lists (or unlists) an accepted link for tend.
func (ls *loopLinks) tendAccepted(l *linkConn, open bool) {
	if open {
		if ls.accepted == nil {
			ls.accepted = map[*linkConn]struct{}{}
		}
		ls.accepted[l] = struct{}{}
	} else {
		delete(ls.accepted, l)
	}
	ls.nAccepted.Store(int32(len(ls.accepted)))
}

// forget fails this loop's link to addr (the member left the cell): its
// calls end at once rather than at the ping timeout.
func (ls *loopLinks) forget(addr string) {
	if l := ls.links[addr]; l != nil {
		l.fail(errors.New("the member left the cell"))
	}
}

// tendClient lists (or unlists) a client link for tendClientLinks.
func (ls *loopLinks) tendClient(l *linkConn, open bool) {
	if open {
		if ls.clientLinks == nil {
			ls.clientLinks = map[*linkConn]struct{}{}
		}
		ls.clientLinks[l] = struct{}{}
	} else {
		delete(ls.clientLinks, l)
	}
	ls.nClientLinks.Store(int32(len(ls.clientLinks)))
}
