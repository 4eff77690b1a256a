package gateway

import (
	"bytes"
	"context"
	"net"
	"time"

	"github.com/queenmq/ephemeral/link"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/wire"
)

// The link to a broker (docs/gateway.md, "The link to a broker").
//
// Each loop keeps, per broker, one link: a connection upgraded to the cell
// relay's frames (GET /api/v1/system/gateway-link with the gateway secret),
// on which a push, pop or ack is a request frame carrying the tenant and
// access level and the broker's HTTP answer comes back in an answer frame
// of the same stream, in any order. A waiting pop then shares the link
// with every other request of the loop's clients instead of taking a
// broker connection of its own, and the requests of one poll leave in one
// write. The other routes, and every request while the link is being
// opened or after a broker refused it (an older broker, not in gateway mode),
// go over HTTP.
//
// Order: a client's requests in flight are all on links (in front of a
// cell, on the links to their queues' owners: owners.go) or all on HTTP
// connections, never both. The client's next request waits unread behind a
// waiting pop until it is answered, as it does at the broker itself. An
// answer that arrives before an earlier one of its client (a pop that
// parked, or another member's answer) is kept until that one has been
// given.

// linkRetry: after a broker refused the link, its loop asks again only
// after this long (the broker may be upgraded meanwhile).
const linkRetry = time.Minute

// linkState is where a link is in its life.
type linkState uint8

const (
	linkDialling  linkState = iota // the TCP dial, off the loop
	linkUpgrading                  // the upgrade sent, its answer awaited
	linkOpen                       // frames flow
	linkDead                       // failed or refused: forgotten by the loop
)

type linkConn struct {
	ls     *loopState
	up     int
	c      gnet.Conn
	state  linkState
	in     link.FrameReader // the broker's answers: a big one is read aside
	out    []byte           // frames of this round, written by flush
	listed bool             // in ls.dirtyLinks

	calls link.Streams[*exchange]
}

// linkFor returns the loop's open link to upstream up, nil when there is
// none: one is then dialled unless the broker refused it lately.
func (ls *loopState) linkFor(up int, now int64) *linkConn {
	if l := ls.links[up]; l != nil {
		if l.state == linkOpen {
			return l
		}
		return nil
	}
	if ls.g.cfg.NoLink || ls.linkRetryAt[up] > now {
		return nil
	}
	l := &linkConn{ls: ls, up: up}
	ls.links[up] = l
	ls.g.m.dials.Inc()
	go l.dial(ls.g.upstreams[up], ls.g.cfg.DialTimeout)
	return nil
}

// dial connects off the loop and enrolls the connection on the loop
// (OnOpen: opened), or forgets the link there.
func (l *linkConn) dial(addr upstreamAddr, timeout time.Duration) {
	d := net.Dialer{Timeout: timeout, KeepAlive: 15 * time.Second}
	nc, err := d.Dial("tcp", addr.dial)
	if err == nil {
		var ch <-chan gnet.RegisteredResult
		if ch, err = l.ls.loop.Enroll(gnet.NewContext(context.Background(), l), nc); err == nil {
			if r := <-ch; r.Err == nil {
				return
			}
		} else {
			nc.Close()
		}
	}
	_ = l.ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		retry := downFor
		if l.up >= l.ls.g.nConfigured {
			retry = learnedDownFor
		}
		l.ls.linkRetryAt[l.up] = time.Now().Add(retry).UnixNano()
		l.failed()
		return nil
	}))
}

// learnedDownFor: after a failed dial, a member learned from the cell's
// view (owners.go) is not dialled again by the loop for this long; its
// queues meanwhile go through the configured members, which relay them. A
// public URL the gateway cannot reach so costs a dial a second per loop.
const learnedDownFor = time.Second

// opened runs on the loop when the connection is there: it asks for the
// upgrade.
func (l *linkConn) opened(c gnet.Conn) {
	l.c = c
	if l.state == linkDead {
		_ = c.Close()
		return
	}
	l.state = linkUpgrading
	g := l.ls.g
	req := "GET /api/v1/system/gateway-link HTTP/1.1\r\nHost: " + g.upstreams[l.up].host +
		"\r\nConnection: Upgrade\r\nUpgrade: queen-link/1\r\nX-Queen-Gateway-Secret: " + g.cfg.Secret + "\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		_ = c.Close()
	}
}

var switchingProtocols = []byte("HTTP/1.1 101 ")

// onTraffic reads the upgrade's answer, then the answer frames.
func (l *linkConn) onTraffic() gnet.Action {
	c := l.c
	if l.state == linkUpgrading {
		buf, _ := c.Peek(-1)
		end := bytes.Index(buf, []byte("\r\n\r\n"))
		if end < 0 {
			if len(buf) > maxRespHead {
				return gnet.Close
			}
			return gnet.None
		}
		if !bytes.HasPrefix(buf, switchingProtocols) {
			// Refused: an older broker, not in gateway mode, or a wrong secret
			// (which the HTTP path will answer the client for).
			l.ls.linkRetryAt[l.up] = time.Now().Add(linkRetry).UnixNano()
			l.ls.g.cfg.Logger.Debug("gateway: the broker refused the link", "broker", l.ls.g.upstreams[l.up].host)
			return gnet.Close
		}
		_, _ = c.Discard(end + 4)
		l.state = linkOpen
		l.ls.g.links.Add(1)
	}
	var resume []*clientConn
	for {
		typ, id, p, ok, err := l.in.Next(c, link.MaxFrame)
		if err != nil {
			return gnet.Close
		}
		if !ok {
			break
		}
		switch typ {
		case link.FrameAnswer:
			if cc := l.answered(id, p); cc != nil {
				resume = append(resume, cc)
			}
		case link.FrameRefuse:
			if ex := l.take(id); ex != nil {
				var cc *clientConn
				if link.RefusalServed(p) {
					// Served, or maybe (a cell member relayed it), but
					// its answer could not come back.
					cc = ex.linkLose()
				} else {
					cc = ex.linkFail(errForwardFailed) // the broker did not serve it
				}
				if cc != nil {
					resume = append(resume, cc)
				}
			}
		case link.FramePong:
		default:
			return gnet.Close
		}
		l.in.Done(c)
	}
	l.ls.resume(resume)
	return gnet.None
}

// take removes the exchange of stream id; nil when there is none.
func (l *linkConn) take(id uint64) *exchange {
	ex, _ := l.calls.Take(id)
	return ex
}

// answered hands the broker's answer of stream id to its client, in the
// client's order. It returns the client when nothing of it is in flight
// any more.
func (l *linkConn) answered(id uint64, raw []byte) *clientConn {
	ex := l.take(id)
	if ex == nil {
		return nil // cancelled: its client went away
	}
	var rr respReader
	_, done, err := rr.feed(raw)
	if err != nil || !done {
		return ex.linkLose()
	}
	if rr.status == 503 && ownershipMoved(raw[rr.bodyFrom:]) {
		l.ls.g.refreshView()
	}
	delivered := rr.delivered
	if ex.kind == exPop && delivered < 0 && rr.status == 200 {
		delivered = max(0, countMessages(raw[rr.bodyFrom:]))
	}
	if ex.cl != nil {
		ex.streamEnd(rr.status, delivered, raw, 0) // a link's answer is whole, never chunked
		l.ls.recycle(ex)
		return nil
	}
	ex.status, ex.delivered, ex.closes = rr.status, delivered, rr.close
	ex.resp = append(ex.resp[:0], raw...)
	return ex.cc.giveInOrder(ex)
}

// send appends req's frame for ex to the link's output.
func (l *linkConn) send(ex *exchange, req *wire.Request, tenant string, level identity.Level) {
	rq := link.Request{Tenant: []byte(tenant), Access: uint8(level), Method: req.MethodName, Target: req.Target, Body: req.Body}
	// It cannot fail: a tenant is a name (at most 255 bytes), and the
	// method one of a route's.
	ex.linkID = l.calls.Add(ex)
	l.out, _ = link.AppendRequest(l.out, ex.linkID, &rq)
	l.markDirty()
}

// cancel tells the broker that the client of stream id went away, so that
// a pop parked there lets go as a closed connection's does.
func (l *linkConn) cancel(id uint64) {
	l.calls.Take(id)
	if l.state != linkOpen {
		return
	}
	l.out = link.AppendHeader(l.out, link.FrameCancel, id, 0)
	l.markDirty()
}

// markDirty lists the link to be written by the loop's flush, after every
// connection that was ready in this poll has been served.
func (l *linkConn) markDirty() {
	if l.listed {
		return
	}
	l.listed = true
	l.ls.scheduleFlush()
	l.ls.dirtyLinks = append(l.ls.dirtyLinks, l)
}

// write hands the link's output to the socket in one write.
func (l *linkConn) write() {
	if l.state != linkOpen || len(l.out) == 0 {
		return
	}
	_, err := l.c.Write(l.out)
	l.calls.Flushed()
	l.out = reuse(l.out)
	if err != nil {
		_ = l.c.Close() // OnClose: failed
	}
}

// failed ends the link (a failed dial, a refused upgrade, or gnet's
// OnClose): requests it had sent are lost (the broker may or may not have
// served them: their clients' connections close, exchange.lose), those it
// had not are answered 503 ephemeral_forward_failed, nothing done. The
// next request for that broker dials a new link.
func (l *linkConn) failed() {
	if l.state == linkDead {
		return
	}
	if l.state == linkOpen {
		l.ls.g.links.Add(-1)
	}
	l.state = linkDead
	ls := l.ls
	if ls.links[l.up] == l {
		ls.links[l.up] = nil
	}
	var resume []*clientConn
	settle := func(cc *clientConn) {
		if cc != nil {
			resume = append(resume, cc)
		}
	}
	l.calls.Fail(
		func(ex *exchange) { settle(ex.linkLose()) },                 // written: the broker may have served it
		func(ex *exchange) { settle(ex.linkFail(errForwardFailed)) }, // never left: nothing was done
	)
	l.out = nil
	ls.resume(resume)
}

// linkLose settles ex as lost (exchange.lose), in its client's order.
func (ex *exchange) linkLose() *clientConn {
	if l := ex.cl; l != nil {
		ex.streamLost()
		l.ls.recycle(ex)
		return nil
	}
	// Status 0 meters nothing and gives back what a push's admission held.
	ex.status, ex.delivered, ex.closes = 0, 0, false
	ex.resp, ex.lost = ex.resp[:0], true
	return ex.cc.giveInOrder(ex)
}

// linkFail settles ex with refusal e, in its client's order.
func (ex *exchange) linkFail(e *wire.Error) *clientConn {
	if l := ex.cl; l != nil {
		ex.streamFail(e)
		l.ls.recycle(ex)
		return nil
	}
	// Status 0 meters nothing and gives back what a push's admission held.
	ex.status, ex.delivered, ex.closes = 0, 0, false
	ex.resp = appendFailure(ex.resp[:0], e, ex.close)
	ex.refusal = e.Code
	return ex.cc.giveInOrder(ex)
}

// giveInOrder gives ex's answer to the client once every answer before it
// has been given, then any that were waiting behind it; cc may be nil (the
// client went away: the exchange is only settled). It returns the client
// when nothing of it is in flight any more.
func (cc *clientConn) giveInOrder(ex *exchange) *clientConn {
	ex.done = true
	if cc == nil {
		ex.answered(ex.status, ex.delivered) // meters what the broker did
		return nil
	}
	var last *clientConn
	for len(cc.onLink) > 0 && cc.onLink[0].done {
		head := cc.onLink[0]
		cc.onLink[0] = nil
		cc.onLink = cc.onLink[1:]
		switch {
		case head.lost:
			cc.lose()
		case head.refusal != "":
			cc.g.m.refused(head.refusal)
			fallthrough
		default:
			cc.give(head.resp)
		}
		if head.closes {
			cc.closeAfter = true
		}
		if head.wait {
			cc.linkWaiting = false
		}
		if c := head.answered(head.status, head.delivered); c != nil {
			last = c
		}
		cc.ls.recycle(head)
	}
	if len(cc.onLink) == 0 {
		cc.onLink = cc.onLink[:0:0]
		cc.link = nil
	}
	return last
}

// ownershipMoved reports whether a 503's body is a member's owner_moved or
// ephemeral_forward_failed: the gateway's view of the cell may be behind
// (owners.go), so it is read again. The answer itself goes to the client
// as it came (the SDKs send such a request again: nothing was applied).
func ownershipMoved(body []byte) bool {
	return bytes.Contains(body, []byte(`"owner_moved"`)) || bytes.Contains(body, []byte(`"ephemeral_forward_failed"`))
}
