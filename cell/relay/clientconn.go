package relay

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// The client's connections: a peer's slots, each dialling its connection on
// demand, and the calls waiting on each connection.

// peer is one member's address and its connection slots.
type peer struct {
	c        *Client
	addr     string
	slots    []*slot
	rr       atomic.Uint32
	inflight atomic.Int64
}

func (c *Client) newPeer(addr string) *peer {
	p := &peer{c: c, addr: addr}
	for range c.cfg.ConnsPerPeer {
		p.slots = append(p.slots, &slot{p: p})
	}
	return p
}

// slot holds one connection, dialled when a call needs it; calls that
// arrive while it is being dialled wait in the slot (no goroutine each).
type slot struct {
	p       *peer
	mu      sync.Mutex
	cc      *clientConn
	dialing bool
	waiters []*call
}

func (s *slot) submit(cl *call) {
	s.mu.Lock()
	if cc := s.cc; cc != nil {
		s.mu.Unlock()
		cc.start(cl)
		return
	}
	s.waiters = append(s.waiters, cl)
	if !s.dialing {
		s.dialing = true
		c := s.p.c
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			s.dialing = false
			ws := s.waiters
			s.waiters = nil
			s.mu.Unlock()
			for _, w := range ws {
				w.finish(link.Response{}, &Error{Addr: s.p.addr, Kind: ErrClosed})
			}
			return
		}
		c.wg.Add(1)
		c.mu.Unlock()
		go func() { defer c.wg.Done(); s.dial() }()
	}
	s.mu.Unlock()
}

func (s *slot) dial() {
	c := s.p.c
	cc, err := c.dial(s)
	s.mu.Lock()
	ws := s.waiters
	s.waiters, s.dialing = nil, false
	if err == nil {
		s.cc = cc
	}
	s.mu.Unlock()
	for _, w := range ws {
		if err != nil {
			w.finish(link.Response{}, err)
		} else {
			cc.start(w)
		}
	}
}

// Dial connects to the relay at addr and passes the handshake: the
// connection that it returns speaks frames (package link). timeout bounds dial
// and handshake together. Errors are *Error with ErrUnreachable or ErrAuth.
func Dial(addr string, secret []byte, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, &Error{Addr: addr, Kind: ErrUnreachable, Cause: err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if err := clientHandshake(nc, secret, timeout); err != nil {
		nc.Close()
		kind := ErrUnreachable
		if errors.Is(err, ErrAuth) {
			kind = ErrAuth
		}
		return nil, &Error{Addr: addr, Kind: kind, Cause: err}
	}
	return nc, nil
}

func (c *Client) dial(s *slot) (*clientConn, error) {
	addr := s.p.addr
	c.dials.Add(1)
	nc, err := Dial(addr, c.cfg.Secret, c.cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	cc := &clientConn{slot: s, calls: map[uint64]*call{}}
	cc.frameConn = newLink(nc, c.cfg.MaxFrameBytes, c.cfg.FrameTimeout)
	cc.dispatch = cc.onFrame
	cc.onClose = cc.closed
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return nil, &Error{Addr: addr, Kind: ErrClosed}
	}
	c.conns[cc] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()
	cc.run(&c.wg)
	go func() { defer c.wg.Done(); cc.pinger(c.cfg.PingInterval, c.cfg.PingTimeout) }()
	return cc, nil
}

// clientConn is one connection to a peer and the calls waiting on it.
type clientConn struct {
	*frameConn
	slot *slot

	cmu   sync.Mutex
	calls map[uint64]*call
	next  uint64
}

// call is one relayed request until its answer or failure.
type call struct {
	state   atomic.Uint32 // 0 waiting, 1 finished
	id      uint64
	cc      atomic.Pointer[clientConn]
	peer    *peer
	done    func(link.Response, error)
	frame   []byte // the encoded request, until it is queued
	stopCtx func() bool
	timer   *time.Timer
}

// start registers cl on cc and queues its frame.
func (cc *clientConn) start(cl *call) {
	cc.cmu.Lock()
	if cl.state.Load() != 0 {
		cc.cmu.Unlock()
		return
	}
	if cc.isClosed() {
		cc.cmu.Unlock()
		cl.finish(link.Response{}, cc.lostErr())
		return
	}
	cc.next++
	cl.id = cc.next
	cc.calls[cl.id] = cl
	cc.cmu.Unlock()
	cl.cc.Store(cc)
	frame := cl.frame
	cl.frame = nil
	link.PutHeader(frame[:link.HeaderLen], link.FrameRequest, cl.id, len(frame)-link.HeaderLen)
	if !cc.send(outFrame{p: frame}) {
		cc.forget(cl.id)
		cl.finish(link.Response{}, cc.lostErr())
		return
	}
	// A cancel that ran before cc was stored saw no connection to tell.
	if cl.state.Load() != 0 && cc.forget(cl.id) {
		cc.sendCtl(link.FrameCancel, cl.id, nil)
	}
}

// forget removes call id; false when it was already gone.
func (cc *clientConn) forget(id uint64) bool {
	cc.cmu.Lock()
	_, ok := cc.calls[id]
	delete(cc.calls, id)
	cc.cmu.Unlock()
	return ok
}

func (cc *clientConn) lostErr() error {
	cc.mu.Lock()
	err := cc.err
	cc.mu.Unlock()
	if errors.Is(err, errClientClosed) {
		return &Error{Addr: cc.slot.p.addr, Kind: ErrClosed}
	}
	return &Error{Addr: cc.slot.p.addr, Kind: ErrUnreachable, Cause: err}
}

func (cc *clientConn) onFrame(typ byte, id uint64, p []byte) {
	switch typ {
	case link.FrameAnswer, link.FrameRefuse:
		cc.cmu.Lock()
		cl := cc.calls[id]
		delete(cc.calls, id)
		cc.cmu.Unlock()
		if cl == nil {
			return // cancelled meanwhile
		}
		if typ == link.FrameAnswer {
			cl.finish(link.Response{Raw: p}, nil)
			return
		}
		kind := ErrUnreachable
		switch {
		case len(p) == 1 && p[0] == link.RefuseBusy:
			kind = ErrOverloaded
		case len(p) == 1 && p[0] == link.RefuseTooLarge:
			kind = ErrTooLarge
		}
		sent := link.RefusalServed(p)
		cl.finish(link.Response{}, &Error{Addr: cc.slot.p.addr, Kind: kind, Cause: errors.New("refused by the peer"), Sent: sent})
	case link.FramePong:
	default:
		cc.close(errProtocol)
	}
}

// closed runs once when the link ends: the slot forgets cc and every call
// in flight on it fails.
func (cc *clientConn) closed(error) {
	c := cc.slot.p.c
	c.mu.Lock()
	delete(c.conns, cc)
	c.mu.Unlock()
	s := cc.slot
	s.mu.Lock()
	if s.cc == cc {
		s.cc = nil
	}
	s.mu.Unlock()
	cc.cmu.Lock()
	calls := cc.calls
	cc.calls = map[uint64]*call{}
	cc.cmu.Unlock()
	err := cc.lostErr()
	if e, ok := err.(*Error); ok {
		sent := *e
		sent.Sent = true // these calls' frames were queued: the peer may have them
		err = &sent
	}
	for _, cl := range calls {
		cl.finish(link.Response{}, err)
	}
}

// pinger pings the connection every interval and closes it when it stays
// silent for timeout. It pings even while answers arrive: the server
// closes a connection that has sent it nothing for its own ping timeout
// (ServerConfig.PingTimeout), and a caller whose calls are all parked
// sends nothing else.
func (cc *clientConn) pinger(interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-cc.done:
			return
		case now := <-t.C:
			if now.Sub(time.Unix(0, cc.lastRecv.Load())) >= timeout {
				cc.close(errPingTimeout)
				return
			}
			cc.sendCtl(link.FramePing, 0, nil)
		}
	}
}

var errPingTimeout = errors.New("relay: the peer stopped answering pings")

func (cl *call) finish(r link.Response, err error) {
	if !cl.state.CompareAndSwap(0, 1) {
		return
	}
	if cl.stopCtx != nil {
		cl.stopCtx()
	}
	if cl.timer != nil {
		cl.timer.Stop()
	}
	cl.peer.inflight.Add(-1)
	cl.done(r, err)
}

// cancelled ends the call for its context (or CallTimeout) and tells the
// owner, when the request already went out.
func (cl *call) cancelled(cause error) {
	kind := ErrCanceled
	if errors.Is(cause, context.DeadlineExceeded) {
		kind = ErrTimeout
	}
	if !cl.state.CompareAndSwap(0, 1) {
		return
	}
	if cl.timer != nil {
		cl.timer.Stop()
	}
	cc := cl.cc.Load()
	if cc != nil && cc.forget(cl.id) {
		cc.sendCtl(link.FrameCancel, cl.id, nil)
	}
	cl.peer.inflight.Add(-1)
	cl.done(link.Response{}, &Error{Addr: cl.peer.addr, Kind: kind, Cause: cause, Sent: cc != nil})
}
