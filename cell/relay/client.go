package relay

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ClientConfig configures a Client. Zero values take the defaults.
type ClientConfig struct {
	Secret []byte // the cell secret (QUEEN_CELL_SECRET); required
	// ConnsPerPeer is the number of connections kept to each peer (default
	// 2): calls go round robin, so a huge frame holds up only its own.
	ConnsPerPeer int
	// MaxInFlightPerPeer bounds the calls waiting on one peer (default
	// 65536); one more fails at once with ErrOverloaded.
	MaxInFlightPerPeer int
	// MaxFrameBytes bounds one frame (default 80 MiB), as ServerConfig's.
	MaxFrameBytes int
	// DialTimeout bounds dial and handshake together (default 2 s).
	DialTimeout time.Duration
	// PingInterval: a connection that has read nothing for this long is
	// pinged (default 1 s). PingTimeout: one that has read nothing for this
	// long is closed and its calls fail with ErrUnreachable (default 5 s,
	// the default member timeout: a paused owner is given up on when the
	// cell would give up on it).
	PingInterval, PingTimeout time.Duration
	// CallTimeout bounds a call whose context has no deadline (default
	// 6 min: a pop waits at most 5).
	CallTimeout time.Duration
}

const (
	defaultConnsPerPeer = 2
	defaultMaxInFlight  = 1 << 16
	defaultDialTimeout  = 2 * time.Second
	defaultPingInterval = time.Second
	defaultPingTimeout  = 5 * time.Second
	defaultCallTimeout  = 6 * time.Minute
)

func (c *ClientConfig) withDefaults() ClientConfig {
	d := *c
	if d.ConnsPerPeer <= 0 {
		d.ConnsPerPeer = defaultConnsPerPeer
	}
	if d.MaxInFlightPerPeer <= 0 {
		d.MaxInFlightPerPeer = defaultMaxInFlight
	}
	if d.MaxFrameBytes <= 0 {
		d.MaxFrameBytes = defaultMaxFrame
	}
	if d.DialTimeout <= 0 {
		d.DialTimeout = defaultDialTimeout
	}
	if d.PingInterval <= 0 {
		d.PingInterval = defaultPingInterval
	}
	if d.PingTimeout <= 0 {
		d.PingTimeout = defaultPingTimeout
	}
	if d.CallTimeout <= 0 {
		d.CallTimeout = defaultCallTimeout
	}
	return d
}

// Client relays calls to peers, keeping ConnsPerPeer connections to each,
// dialled on first use and redialled after a loss.
type Client struct {
	cfg ClientConfig

	mu     sync.Mutex
	peers  map[string]*peer
	conns  map[*clientConn]struct{} // every open connection, forgotten peers' too
	closed bool
	wg     sync.WaitGroup
	dials  atomic.Int64
}

// NewClient checks cfg and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if len(cfg.Secret) == 0 {
		return nil, errors.New("relay: the cell secret is empty")
	}
	return &Client{cfg: cfg.withDefaults(), peers: map[string]*peer{}, conns: map[*clientConn]struct{}{}}, nil
}

// Dials is the number of connections dialled so far (handshake included).
func (c *Client) Dials() int64 { return c.dials.Load() }

// Conns is the number of connections open now to addr.
func (c *Client) Conns(addr string) int {
	c.mu.Lock()
	p := c.peers[addr]
	c.mu.Unlock()
	if p == nil {
		return 0
	}
	n := 0
	for _, s := range p.slots {
		s.mu.Lock()
		if s.cc != nil {
			n++
		}
		s.mu.Unlock()
	}
	return n
}

// Close closes every connection, failing the calls in flight with
// ErrClosed, and waits for the client's goroutines.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.peers = map[string]*peer{}
	conns := make([]*clientConn, 0, len(c.conns))
	for cc := range c.conns {
		conns = append(conns, cc)
	}
	c.mu.Unlock()
	for _, cc := range conns {
		cc.close(errClientClosed)
	}
	c.wg.Wait()
	return nil
}

var (
	errClientClosed = errors.New("relay: client closed")
	errForgotten    = errors.New("relay: peer forgotten (it left the cell)")
)

// Forget closes the connections to addr (a member that left the cell): its
// calls in flight fail with ErrUnreachable now rather than at the ping
// timeout. A later call to addr dials afresh.
func (c *Client) Forget(addr string) {
	c.mu.Lock()
	p := c.peers[addr]
	delete(c.peers, addr)
	c.mu.Unlock()
	if p == nil {
		return
	}
	for _, s := range p.slots {
		s.mu.Lock()
		cc := s.cc
		s.mu.Unlock()
		if cc != nil {
			cc.close(errForgotten)
		}
	}
}

// Do relays req to the member at addr and waits for its answer. req's
// bytes are copied before Do returns control to the network.
func (c *Client) Do(ctx context.Context, addr string, req *Request) (Response, error) {
	type result struct {
		r   Response
		err error
	}
	ch := make(chan result, 1)
	if err := c.Go(ctx, addr, req, func(r Response, err error) { ch <- result{r, err} }); err != nil {
		return Response{}, err
	}
	res := <-ch
	return res.r, res.err
}

// Go relays req to the member at addr without waiting: done is called once
// with the answer or the failure, from one of the client's goroutines (or
// the context's), and must not block. A non-nil return means the call was
// not started (and done will not be called). req's bytes are copied before
// Go returns. Cancelling ctx ends the call with ErrCanceled (ErrTimeout for
// its deadline) and tells the owner to stop.
func (c *Client) Go(ctx context.Context, addr string, req *Request, done func(Response, error)) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return &Error{Addr: addr, Kind: ErrClosed}
	}
	p := c.peers[addr]
	if p == nil {
		p = c.newPeer(addr)
		c.peers[addr] = p
	}
	c.mu.Unlock()
	if req.encodedLen() > c.cfg.MaxFrameBytes {
		return &Error{Addr: addr, Kind: ErrTooLarge}
	}
	if p.inflight.Add(1) > int64(c.cfg.MaxInFlightPerPeer) {
		p.inflight.Add(-1)
		return &Error{Addr: addr, Kind: ErrOverloaded}
	}
	frame, err := appendRequest(make([]byte, 0, hdrLen+req.encodedLen()), 0, req)
	if err != nil {
		p.inflight.Add(-1)
		return &Error{Addr: addr, Kind: ErrTooLarge, Cause: err}
	}
	cl := &call{peer: p, done: done, frame: frame}
	if ctx.Done() != nil {
		cl.stopCtx = context.AfterFunc(ctx, func() { cl.cancelled(ctx.Err()) })
	}
	if _, ok := ctx.Deadline(); !ok {
		cl.timer = time.AfterFunc(c.cfg.CallTimeout, func() { cl.cancelled(context.DeadlineExceeded) })
	}
	p.slots[p.rr.Add(1)%uint32(len(p.slots))].submit(cl)
	return nil
}

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
				w.finish(Response{}, &Error{Addr: s.p.addr, Kind: ErrClosed})
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
			w.finish(Response{}, err)
		} else {
			cc.start(w)
		}
	}
}

func (c *Client) dial(s *slot) (*clientConn, error) {
	addr := s.p.addr
	c.dials.Add(1)
	d := net.Dialer{Timeout: c.cfg.DialTimeout}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, &Error{Addr: addr, Kind: ErrUnreachable, Cause: err}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if err := clientHandshake(nc, c.cfg.Secret, c.cfg.DialTimeout); err != nil {
		nc.Close()
		kind := ErrUnreachable
		if errors.Is(err, ErrAuth) {
			kind = ErrAuth
		}
		return nil, &Error{Addr: addr, Kind: kind, Cause: err}
	}
	cc := &clientConn{slot: s, calls: map[uint64]*call{}}
	cc.link = newLink(nc, c.cfg.MaxFrameBytes)
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
	*link
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
	done    func(Response, error)
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
		cl.finish(Response{}, cc.lostErr())
		return
	}
	cc.next++
	cl.id = cc.next
	cc.calls[cl.id] = cl
	cc.cmu.Unlock()
	cl.cc.Store(cc)
	frame := cl.frame
	cl.frame = nil
	putHdr(frame[:hdrLen], fReq, cl.id, len(frame)-hdrLen)
	if !cc.send(outFrame{p: frame}) {
		cc.forget(cl.id)
		cl.finish(Response{}, cc.lostErr())
		return
	}
	// A cancel that ran before cc was stored saw no connection to tell.
	if cl.state.Load() != 0 && cc.forget(cl.id) {
		cc.sendCtl(fCancel, cl.id, nil)
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
	case fResp, fRefuse:
		cc.cmu.Lock()
		cl := cc.calls[id]
		delete(cc.calls, id)
		cc.cmu.Unlock()
		if cl == nil {
			return // cancelled meanwhile
		}
		if typ == fResp {
			cl.finish(Response{Raw: p}, nil)
			return
		}
		kind := ErrUnreachable
		switch {
		case len(p) == 1 && p[0] == refuseBusy:
			kind = ErrOverloaded
		case len(p) == 1 && p[0] == refuseTooLarge:
			kind = ErrTooLarge
		}
		cl.finish(Response{}, &Error{Addr: cc.slot.p.addr, Kind: kind, Cause: errors.New("refused by the peer")})
	case fPong:
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
	for _, cl := range calls {
		cl.finish(Response{}, err)
	}
}

// pinger pings a quiet connection and closes one that stays silent.
func (cc *clientConn) pinger(interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-cc.done:
			return
		case now := <-t.C:
			quiet := now.Sub(time.Unix(0, cc.lastRecv.Load()))
			if quiet >= timeout {
				cc.close(errPingTimeout)
				return
			}
			if quiet >= interval {
				cc.sendCtl(fPing, 0, nil)
			}
		}
	}
}

var errPingTimeout = errors.New("relay: the peer stopped answering pings")

func (cl *call) finish(r Response, err error) {
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
	if cc := cl.cc.Load(); cc != nil && cc.forget(cl.id) {
		cc.sendCtl(fCancel, cl.id, nil)
	}
	cl.peer.inflight.Add(-1)
	cl.done(Response{}, &Error{Addr: cl.peer.addr, Kind: kind, Cause: cause})
}
