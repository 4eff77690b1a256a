package server

import (
	"context"
	"errors"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/link"
	"github.com/queenmq/ephemeral/wire"
)

// The relay on the event loops (docs/cell-relay.md, "On the event loops").
//
// A relay connection is served by the same gnet loops as the clients'
// connections, speaking the relay's frames (cell/relay: the handshake runs
// off the loops, then the connection is enrolled on one).
//
//   - Dialled links: on the landing member, each loop keeps one link per
//     peer. A request relayed from a connection of that loop is a frame
//     appended to the link's output, written once the loop has served
//     every connection that was ready (flushLinks); the owner's answer
//     arrives on the same loop, is appended to the client connection's
//     output and written in that round (relay.go). No goroutine, no
//     cross-loop wake-up.
//   - Accepted links: on the owner, the links the other members dialled.
//     The requests of one read are served in order through the route
//     handlers (relayowner.go, on a stand-in conn) and their answers leave
//     in one write. A pop that parks is answered later: on the link's loop
//     (a push served there) by appending to its output, from anywhere else
//     by the link's AsyncWrite.
//
// What every link shares, whatever its role, is in links.go.

// maxRelayCalls bounds the calls waiting on one dialled link; one more is
// refused 503 ephemeral_forward_failed at once (nothing was sent).
const maxRelayCalls = 1 << 16

// redialAfter: after a failed dial to a peer, a loop answers its calls to
// that peer 503 ephemeral_forward_failed at once for this long rather than
// dialling again for each, so that a dead or misconfigured owner under load
// costs a dial every redialAfter per loop, not one per request.
const redialAfter = 100 * time.Millisecond

// link returns this loop's link to the peer at addr, dialling it (off the
// loop) when there is none; nil within redialAfter of a failed dial.
func (ls *loopState) link(s *Server, addr string) *linkConn {
	if l := ls.links[addr]; l != nil {
		return l
	}
	if at, ok := ls.dialFailed[addr]; ok {
		if time.Now().UnixNano()-at < int64(redialAfter) {
			return nil
		}
		delete(ls.dialFailed, addr)
	}
	if ls.links == nil {
		ls.links = map[string]*linkConn{}
	}
	l := &linkConn{s: s, role: linkDialled, addr: addr, ls: ls}
	ls.links[addr] = l
	ls.nLinks.Store(int32(len(ls.links)))
	s.cell.linkCount.Add(1)
	go l.dial()
	return l
}

// dial connects and authenticates off the loop, then enrolls the
// connection on the link's loop (OnOpen: opened), or fails the link there.
func (l *linkConn) dial() {
	c := l.s.cell
	c.dials.Inc()
	nc, err := relay.Dial(l.addr, c.Secret, c.DialTimeout)
	if err == nil {
		var ch <-chan gnet.RegisteredResult
		ch, err = l.ls.loop.Enroll(gnet.NewContext(context.Background(), l), nc)
		if err == nil {
			if r := <-ch; r.Err != nil {
				err = r.Err
			} else {
				return // OnOpen has run on the loop
			}
		} else {
			nc.Close()
		}
	}
	failed := func(context.Context) error {
		if l.ls.dialFailed == nil {
			l.ls.dialFailed = map[string]int64{}
		}
		l.ls.dialFailed[l.addr] = time.Now().UnixNano()
		l.fail(err)
		return nil
	}
	if l.ls.loop.Execute(context.Background(), gnet.RunnableFunc(failed)) != nil {
		return // the loops are stopping: their connections are closing
	}
}

// call relays req for cs over the link: the connection goes busy until the
// answer comes back on this loop (answered) or the link fails.
func (l *linkConn) call(cs *conn, req *wire.Request, deadline time.Duration) bool {
	if l.closed || l.calls.Len() >= maxRelayCalls {
		return false
	}
	rr := link.Request{
		Tenant: []byte(cs.tenant),
		Access: uint8(cs.access),
		Method: req.MethodName,
		Target: req.Target,
		Body:   req.Body,
	}
	out, err := link.AppendRequest(l.out, l.calls.Next(), &rr)
	if err != nil {
		return false
	}
	l.out = out
	cs.callLink, cs.callID, cs.relayHead = l, l.calls.Add(cs), req.Head(0)
	cs.relayUntil = time.Now().UnixNano() + int64(deadline) // Server.now may be a second old
	l.markDirty()
	return true
}

// cancel forgets cs's call (its client went away) and tells the owner, so
// a relayed parked pop is let go there as a closed connection's is.
func (l *linkConn) cancel(cs *conn) {
	id := cs.callID
	cs.callLink = nil
	l.calls.Take(id)
	if l.closed {
		return
	}
	l.out = link.AppendHeader(l.out, link.FrameCancel, id, 0)
	l.markDirty()
}

// take removes the call of stream id, nil when it is not waited for (its
// client went away).
func (l *linkConn) take(id uint64) *conn {
	cs, _ := l.calls.Take(id)
	if cs != nil {
		cs.callLink = nil
	}
	return cs
}

// Why tend fails a link.
var (
	errOwnerSilent  = errors.New("the owner sent nothing for the ping timeout")
	errMemberSilent = errors.New("the member sent nothing, not even a ping, for the ping timeout")
	errFrameStalled = errors.New("a frame did not complete within the frame timeout")
)

// tend runs on the loop every ping interval. Every dialled link is pinged
// at each (so that its owner, which fails an accepted link silent for the ping
// timeout, keeps it even while only answers flow), and one silent for the
// ping timeout fails (a paused or cut-off owner); an accepted link silent
// for the ping timeout fails too (a paused or cut-off caller: its parked
// pops are let go); a link whose frame has not completed within the frame
// timeout fails, whichever side dialled it, and gnet frees the bytes it
// held; and calls past their deadline end (the owner may have acted: their
// client's connection closes).
func (ls *loopState) tend(context.Context) error {
	s := ls.s
	now := time.Now().UnixNano()
	limit, frame := int64(s.cell.PingTimeout), int64(s.cell.FrameTimeout)
	for l := range ls.accepted {
		var err error
		switch {
		case now-l.lastRead > limit:
			err = errMemberSilent
		case l.partialSince != 0 && now-l.partialSince > frame:
			err = errFrameStalled
		default:
			continue
		}
		s.cfg.Logger.Info("cell: relay link from another member closed", "peer", l.c.RemoteAddr().String(), "why", err)
		l.failHolding(err)
	}
	for _, l := range ls.links {
		if l.c == nil {
			continue // being dialled: bounded by the dial timeout
		}
		if now-l.lastRead > limit {
			l.fail(errOwnerSilent)
			continue
		}
		if l.partialSince != 0 && now-l.partialSince > frame {
			l.failHolding(errFrameStalled)
			continue
		}
		// Once a tend, that is once a ping interval.
		l.out = link.AppendHeader(l.out, link.FramePing, 0, 0)
		l.markDirty()
		l.calls.Each(func(id uint64, cs *conn) {
			if now > cs.relayUntil {
				l.calls.Take(id)
				cs.callLink = nil
				l.out = link.AppendHeader(l.out, link.FrameCancel, id, 0)
				l.markDirty()
				cs.relayLost()
			}
		})
	}
	ls.flushLinks()
	return nil
}

// tendLinks has every loop with relay links tend them, every ping
// interval, until the server stops.
func (s *Server) tendLinks() {
	s.tickLoops(s.cell.PingInterval, func(ls *loopState) gnet.RunnableFunc {
		if ls.nLinks.Load() > 0 || ls.nAccepted.Load() > 0 {
			return ls.tendTask
		}
		return nil
	}, nil)
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
