package relay

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// The client's connections: a peer's slots, each dialling its link on
// demand, and the calls waiting on each.

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

// slot holds one link, dialled when a call needs it; calls that arrive
// while it is being dialled wait in the slot (no goroutine each), each
// with a copy of its request.
type slot struct {
	p       *peer
	mu      sync.Mutex
	m       *link.Mux // nil until dialled; ended ones are cleared by their watcher
	dialing bool
	waiters []waiter
}

type waiter struct {
	cl  *call
	req *link.Request
}

// live is the slot's link, nil when it has none or it has ended.
func (s *slot) live() *link.Mux {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m != nil && s.m.Err() == nil {
		return s.m
	}
	return nil
}

func (s *slot) submit(cl *call, req *link.Request) {
	s.mu.Lock()
	if m := s.m; m != nil && m.Err() == nil {
		s.mu.Unlock()
		cl.start(m, req)
		return
	}
	s.waiters = append(s.waiters, waiter{cl, cloneRequest(req)})
	if s.dialing {
		s.mu.Unlock()
		return
	}
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
			w.cl.finish(link.Response{}, &Error{Addr: s.p.addr, Kind: ErrClosed})
		}
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	s.mu.Unlock()
	go func() { defer c.wg.Done(); s.dial() }()
}

func (s *slot) dial() {
	m, err := s.p.c.dial(s)
	s.mu.Lock()
	ws := s.waiters
	s.waiters, s.dialing = nil, false
	if err == nil {
		s.m = m
	}
	s.mu.Unlock()
	for _, w := range ws {
		if err != nil {
			w.cl.finish(link.Response{}, err)
		} else {
			w.cl.start(m, w.req)
		}
	}
}

// cloneRequest copies r, whose bytes are the caller's, for a call that
// waits for its link: encoded into one buffer and sliced back out of it.
func cloneRequest(r *link.Request) *link.Request {
	f, _ := link.AppendRequest(make([]byte, 0, link.HeaderLen+r.EncodedLen()), 0, r) // Go checked r.Fits
	c := new(link.Request)
	_ = link.DecodeRequest(f[link.HeaderLen:], c)
	return c
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

// dial connects slot s's link and starts its watcher, which forgets the
// link when it ends, however it ends.
func (c *Client) dial(s *slot) (*link.Mux, error) {
	addr := s.p.addr
	c.dials.Add(1)
	nc, err := Dial(addr, c.cfg.Secret, c.cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	m := link.NewMux(nc, nil, link.MuxConfig{MaxFrame: c.cfg.MaxFrameBytes, PingInterval: c.cfg.PingInterval, PingTimeout: c.cfg.PingTimeout})
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		m.Close()
		return nil, &Error{Addr: addr, Kind: ErrClosed}
	}
	c.conns[m] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		<-m.Done()
		m.Close() // waits for the Mux's goroutines: Close's wait covers them
		c.mu.Lock()
		delete(c.conns, m)
		c.mu.Unlock()
		s.mu.Lock()
		if s.m == m {
			s.m = nil
		}
		s.mu.Unlock()
	}()
	return m, nil
}

// call is one relayed request until its answer or failure: the Caller of
// its stream (link.Caller).
type call struct {
	state   atomic.Uint32 // 0 waiting, 1 finished
	peer    *peer
	done    func(link.Response, error)
	stopCtx func() bool
	timer   *time.Timer

	mu   sync.Mutex
	m    *link.Mux // the link its frame was queued on; nil before
	id   uint64    // its stream on m
	gone bool      // cancelled before it was started: start does nothing
}

// start queues cl's frame on m.
func (cl *call) start(m *link.Mux, req *link.Request) {
	cl.mu.Lock()
	if cl.gone {
		cl.mu.Unlock()
		return
	}
	id, err := m.StartRequest(cl, req)
	if err == nil {
		cl.m, cl.id = m, id
	}
	cl.mu.Unlock()
	if err != nil {
		cl.fail(ErrUnreachable, err, false) // the link ended: nothing was queued
	}
}

// Answered takes the owner's answer (link.Caller); p is the Mux's buffer.
func (cl *call) Answered(p []byte) {
	cl.finish(link.Response{Raw: bytes.Clone(p)}, nil)
}

// Ended takes the stream's end without an answer (link.Caller): a refusal
// or the link's end. Sent is the one rule's "may have been served".
func (cl *call) Ended(err error) {
	kind, sent := ErrUnreachable, true
	var se *link.StreamError
	if errors.As(err, &se) {
		sent = se.Served
		switch {
		case se.Busy:
			kind = ErrOverloaded
		case se.Reason == link.RefuseTooLarge:
			kind = ErrTooLarge
		}
	}
	cl.fail(kind, err, sent)
}

// fail ends the call with kind, or ErrClosed when the Client's Close
// ended it.
func (cl *call) fail(kind, cause error, sent bool) {
	if kind == ErrUnreachable && cl.peer.c.isClosed() {
		kind = ErrClosed
	}
	cl.finish(link.Response{}, &Error{Addr: cl.peer.addr, Kind: kind, Cause: cause, Sent: sent})
}

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
// owner, when the request already went out. A request still waiting for
// its link, or for the link's writer, never leaves: not sent.
func (cl *call) cancelled(cause error) {
	kind := ErrCanceled
	if errors.Is(cause, context.DeadlineExceeded) {
		kind = ErrTimeout
	}
	cl.mu.Lock()
	m, id := cl.m, cl.id
	if m == nil {
		cl.gone = true
	}
	cl.mu.Unlock()
	sent := false
	if m != nil {
		var ok bool
		if ok, sent = m.CancelStream(id); !ok {
			return // its answer or its end is on its way to Answered or Ended
		}
	}
	cl.finish(link.Response{}, &Error{Addr: cl.peer.addr, Kind: kind, Cause: cause, Sent: sent})
}
