package gateway

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// The connections to the brokers (docs/gateway.md, "Connections to the
// brokers").
//
// Each loop keeps, per broker, shared connections that carry pushes, acks
// and pops that do not wait, pipelined: the requests of every client of the
// loop are written once per poll (one write for all of them) and their
// answers come back in order, so the broker reads and writes once for many
// requests. The first request of a client that may take long (a waiting
// pop, a declaration written to the store, a status read that a cell fans
// out) gives the client a dedicated connection of its own instead, so that
// it never holds up another client's answers; from then on every request of
// that client goes on it, pipelined in the client's own order, as it would
// to the broker directly (a request/reply client sends its push and its
// waiting pop in one write, and they leave in one). A client's own
// connection goes back to a pool of idle ones when the client closes with
// nothing in flight, and is closed when something is (a parked pop ends at
// the broker with it). All of it runs on the loop: no goroutine per request
// and none per parked pop; a dial alone runs off the loop.
//
// A client's requests in flight are all on one connection (clientConn.up),
// so its answers come back in its order without being buffered.

// maxPipeline bounds the requests in flight on one shared connection; past
// it the loop opens another.
const maxPipeline = 1024

// maxIdleDedicated bounds the spare dedicated connections a loop keeps per
// broker.
const maxIdleDedicated = 64

// upstreamIdle: a connection to a broker with nothing in flight for this
// long is closed by the gateway, before the broker's own idle timeout
// (QUEEN_IDLE_TIMEOUT_S, 120 s by default) would close it under a request
// being written to it.
const upstreamIdle = 60 * time.Second

// downFor: after a failed dial, a broker is passed over by new requests of
// the loop for this long, so that a dead broker costs a dial per downFor
// and not one per request.
const downFor = 100 * time.Millisecond

// upstreamAddr is one broker: where to dial and what to say in Host.
type upstreamAddr struct {
	dial string // host:port
	host string // the Host header
}

// parseUpstream reads a broker base URL: http://host:port (a path is not
// allowed: the gateway forwards the client's path as it came).
func parseUpstream(s string) (upstreamAddr, error) {
	u, err := url.Parse(s)
	if err != nil {
		return upstreamAddr{}, err
	}
	if u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return upstreamAddr{}, fmt.Errorf("%q: want http://host:port", s)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	return upstreamAddr{dial: host, host: u.Host}, nil
}

// upConn is one connection to a broker. Touched only on its loop.
type upConn struct {
	ls        *loopState
	up        int         // index in Gateway.upstreams
	dedicated bool        // a client's own (see above); shared ones are pipelined for every client
	owner     *clientConn // the client a dedicated connection is lent to, nil while idle
	c         gnet.Conn
	out       []byte // requests of this round, written by flush
	listed    bool   // in ls.dirty
	dead      bool
	queue     []*exchange // awaiting their answers, in order
	sent      int         // queue[:sent] have been handed to the socket
	lastUsed  int64       // unix nanos of the last request given to it
	rr        respReader
	body      []byte // a pop answer's body, kept only to count its messages when the broker did not
}

// sharedConn returns a shared connection to upstream up with room in its
// pipeline, opening one when there is none.
func (ls *loopState) sharedConn(up int) *upConn {
	for _, u := range ls.shared[up] {
		if len(u.queue) < maxPipeline {
			return u
		}
	}
	u := ls.open(up, false)
	ls.shared[up] = append(ls.shared[up], u)
	return u
}

// dedicatedConn returns an idle dedicated connection to upstream up, or a
// new one.
func (ls *loopState) dedicatedConn(up int) *upConn {
	if n := len(ls.idle[up]); n > 0 {
		u := ls.idle[up][n-1]
		ls.idle[up][n-1] = nil
		ls.idle[up] = ls.idle[up][:n-1]
		return u
	}
	return ls.open(up, true)
}

// open starts dialling a new connection; requests given to it meanwhile
// wait in its output.
func (ls *loopState) open(up int, dedicated bool) *upConn {
	u := &upConn{ls: ls, up: up, dedicated: dedicated}
	ls.g.m.dials.Inc()
	go u.dial(ls.g.upstreams[up].dial, ls.g.cfg.DialTimeout)
	return u
}

// pick is the upstream a client starts with, round robin over those not
// known down; -1 when every one is.
func (ls *loopState) pick(now int64) int {
	n := len(ls.downUntil)
	for i := 0; i < n; i++ {
		up := (ls.next + i) % n
		if ls.downUntil[up] <= now {
			ls.next = (up + 1) % n
			return up
		}
	}
	return -1
}

// dial connects off the loop, then enrolls the connection on the loop
// (OnOpen: opened) or fails it there.
func (u *upConn) dial(addr string, timeout time.Duration) {
	d := net.Dialer{Timeout: timeout, KeepAlive: 15 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err == nil {
		var ch <-chan gnet.RegisteredResult
		ch, err = u.ls.loop.Enroll(gnet.NewContext(context.Background(), u), nc)
		if err == nil {
			if r := <-ch; r.Err == nil {
				return // opened has run on the loop
			} else {
				err = r.Err
			}
		} else {
			nc.Close()
		}
	}
	_ = u.ls.loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		u.ls.downUntil[u.up] = time.Now().Add(downFor).UnixNano()
		u.failed(err)
		return nil
	}))
}

// opened runs on the loop when the connection is there: what was given to
// it while it was dialled leaves now.
func (u *upConn) opened(c gnet.Conn) {
	u.c = c
	if u.dead {
		_ = c.Close()
		return
	}
	if len(u.out) > 0 {
		u.markDirty()
		u.ls.flushOwn()
	}
}

// send appends a request for ex (already in out) and queues ex for its
// answer.
func (u *upConn) send(ex *exchange) {
	u.queue = append(u.queue, ex)
	u.lastUsed = u.ls.g.now.Load()
	u.markDirty()
}

// markDirty lists the connection to be written once the loop has served
// every connection that was ready in this poll: the first listed schedules
// the loop's flush as a task, which gnet runs after the poll's events. So
// the requests a loop forwards to one broker in one poll leave in one
// write (the cell relay's rule, docs/cell-relay.md).
func (u *upConn) markDirty() {
	if u.listed {
		return
	}
	u.listed = true
	ls := u.ls
	if u.dedicated {
		// One client's: nothing to gather from other clients, so it is
		// written at the end of the event being handled (flushOwn), which
		// spares the task's wake-up.
		ls.dirtyOwn = append(ls.dirtyOwn, u)
		return
	}
	ls.scheduleFlush()
	ls.dirty = append(ls.dirty, u)
}

// scheduleFlush has the loop run flush after the events of this poll,
// once however many connections and links are listed for it.
func (ls *loopState) scheduleFlush() {
	if !ls.flushPending {
		ls.flushPending = true
		_ = ls.loop.Execute(context.Background(), ls.flushTask)
	}
}

// resume reads again the held requests of the clients whose last answer in
// flight was given, then writes what every client of the loop was given.
func (ls *loopState) resume(clients []*clientConn) {
	for _, cc := range clients {
		cc.answeredAll()
	}
	ls.writeListed()
	ls.flushOwn()
}

// flush writes every listed shared connection's output: one write each.
func (ls *loopState) flush(context.Context) error {
	ls.flushPending = false
	ls.dirty = writeAll(ls.dirty)
	for i, l := range ls.dirtyLinks {
		ls.dirtyLinks[i] = nil
		l.listed = false
		l.write()
	}
	ls.dirtyLinks = ls.dirtyLinks[:0]
	return nil
}

// flushOwn writes the clients' own connections given requests during the
// event being handled; every event handler of the loop ends with it.
func (ls *loopState) flushOwn() {
	if len(ls.dirtyOwn) > 0 {
		ls.dirtyOwn = writeAll(ls.dirtyOwn)
	}
}

// writeAll writes each listed connection's output and empties the list.
func writeAll(list []*upConn) []*upConn {
	for i, u := range list {
		list[i] = nil
		u.listed = false
		u.write()
	}
	return list[:0]
}

// write hands the connection's output to the socket in one write.
func (u *upConn) write() {
	if u.c == nil || u.dead || len(u.out) == 0 {
		return // one being dialled keeps its output until opened
	}
	_, err := u.c.Write(u.out)
	u.sent = len(u.queue)
	u.out = reuse(u.out)
	if err != nil {
		_ = u.c.Close() // OnClose: failed
	}
}

// reuse empties a written output buffer for the next round, or lets it go
// when a burst grew it past 1 MiB.
func reuse(b []byte) []byte {
	if cap(b) > 1<<20 {
		return nil
	}
	return b[:0]
}

// onTraffic reads the broker's answers and hands each to its client.
func (u *upConn) onTraffic() gnet.Action {
	buf, _ := u.c.Peek(-1)
	off := 0
	var resume []*clientConn
	closeAfter := false
	for off < len(buf) && !closeAfter {
		if len(u.queue) == 0 || u.sent == 0 {
			// An answer nobody asked for: the stream cannot be trusted.
			u.c.Discard(off)
			return gnet.Close
		}
		ex := u.queue[0]
		n, done, err := u.rr.feed(buf[off:])
		if err != nil {
			u.c.Discard(off)
			return gnet.Close
		}
		if ex.cc != nil && n > 0 {
			ex.cc.give(buf[off : off+n])
		} else if ex.cl != nil && n > 0 {
			ex.resp = append(ex.resp, buf[off:off+n]...) // a stream's answer goes in one frame, once whole
		}
		if ex.kind == exPop && u.rr.delivered < 0 && u.rr.status == 200 {
			u.body = append(u.body, buf[off+u.rr.bodyFrom:off+n]...)
		}
		off += n
		if !done {
			break
		}
		closeAfter = u.rr.close
		delivered := u.rr.delivered
		if ex.kind == exPop && delivered < 0 && u.rr.status == 200 {
			delivered = max(0, countMessages(u.body))
		}
		u.body = u.body[:0]
		u.queue[0] = nil
		u.queue = u.queue[1:]
		u.sent--
		if ex.cl != nil {
			raw := ex.resp
			if u.rr.chunked {
				raw = dechunk(raw) // as the broker answers on a link: whole, with its length
			}
			ex.streamEnd(u.rr.status, delivered, raw, 0)
		} else if cc := ex.answered(u.rr.status, delivered); cc != nil {
			resume = append(resume, cc)
		}
		u.ls.recycle(ex)
	}
	u.c.Discard(off)
	if len(u.queue) == 0 {
		u.queue = u.queue[:0:0] // let the old array go
	}
	u.ls.resume(resume)
	if closeAfter {
		return gnet.Close
	}
	return gnet.None
}

// release takes back a dedicated connection from a client that closed
// with nothing in flight on it, for the next client that needs one.
func (u *upConn) release() {
	ls := u.ls
	u.owner = nil
	if u.dead {
		return
	}
	if len(ls.idle[u.up]) >= maxIdleDedicated || u.c == nil {
		u.dead = true // a dial in flight closes it when it opens
		ls.forget(u)
		if u.c != nil {
			_ = u.c.Close()
		}
		return
	}
	ls.idle[u.up] = append(ls.idle[u.up], u)
}

// failed ends the connection (a failed dial, or gnet's OnClose): it is
// forgotten by the loop; requests it had sent are lost (the broker may or
// may not have served them: their clients' connections close, lose), and
// those it had not sent move to another broker, or are answered 503 when
// none is up.
func (u *upConn) failed(error) {
	if u.dead {
		return
	}
	u.dead = true
	ls := u.ls
	ls.forget(u)
	owner := u.owner
	if owner != nil && owner.own == u {
		owner.own = nil
	}
	u.owner = nil
	queue, sent, out := u.queue, u.sent, u.out
	u.queue, u.out, u.sent = nil, nil, 0
	var resume []*clientConn
	for i, ex := range queue {
		if i < sent {
			if cc := ex.lose(); cc != nil {
				resume = append(resume, cc)
			}
			ls.recycle(ex)
		}
	}
	unsent := queue[min(sent, len(queue)):]
	for i := 0; i < len(unsent); i++ {
		if ex := unsent[i]; ex.cl != nil && ex.cancelled && ex.wait {
			// A client link's waiting pop given up on before it left:
			// settled here, not moved to another broker (letGo). It is
			// alone on its own connection, so out holds nothing else.
			ex.streamEnd(0, 0, nil, 0)
			ls.recycle(ex)
			unsent = append(unsent[:i], unsent[i+1:]...)
			i--
		}
	}
	if len(unsent) > 0 {
		now := time.Now().UnixNano()
		if up := ls.pick(now); up >= 0 {
			var to *upConn
			if u.dedicated {
				to = ls.dedicatedConn(up)
				if owner != nil && !owner.isClosed {
					to.owner, owner.own, owner.upIdx = owner, to, up
				}
			} else {
				to = ls.sharedConn(up)
			}
			to.out = append(to.out, out...)
			for _, ex := range unsent {
				if ex.cc != nil && ex.cc.up == u {
					ex.cc.up = to
				}
				if ex.own == u {
					ex.own = to // a client link's stream's own connection
				}
				to.send(ex)
			}
		} else {
			for _, ex := range unsent {
				if cc := ex.fail(errForwardFailed); cc != nil {
					resume = append(resume, cc)
				}
				ls.recycle(ex)
			}
		}
	}
	ls.resume(resume)
}

// closeIdleUpstreams closes the loop's broker connections that have had
// nothing in flight for upstreamIdle: shared, idle and clients' own.
func (ls *loopState) closeIdleUpstreams(now int64) {
	closeIfIdle := func(u *upConn) {
		if u != nil && len(u.queue) == 0 && u.c != nil && now-u.lastUsed > int64(upstreamIdle) {
			_ = u.c.Close() // OnClose: failed, which forgets it
		}
	}
	for _, lists := range [][][]*upConn{ls.shared, ls.idle} {
		for _, list := range lists {
			for _, u := range list {
				closeIfIdle(u)
			}
		}
	}
	for cc := range ls.clients {
		closeIfIdle(cc.own)
	}
}

// forget takes u out of the loop's lists.
func (ls *loopState) forget(u *upConn) {
	remove := func(list []*upConn) []*upConn {
		for i, x := range list {
			if x == u {
				return append(list[:i], list[i+1:]...)
			}
		}
		return list
	}
	ls.shared[u.up] = remove(ls.shared[u.up])
	ls.idle[u.up] = remove(ls.idle[u.up])
}
