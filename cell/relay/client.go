package relay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/link"
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
	// MaxFrameBytes bounds one frame, a request sent or an answer read
	// (default 80 MiB, link.MaxFrame: the broker's 64 MiB body and its
	// head, as the owner's loops bound a relay link's frames). A request
	// over it fails with ErrTooLarge before it is sent; an answer over it
	// ends the connection (its next frame is unknown), and its calls.
	MaxFrameBytes int
	// DialTimeout bounds dial and handshake together (default 2 s).
	DialTimeout time.Duration
	// PingInterval: every connection is pinged this often (default 1 s),
	// so that the owner, which closes a connection silent for its own
	// ping timeout, keeps it. PingTimeout: one that has read nothing for
	// this long is closed and its calls fail with ErrUnreachable (default
	// 5 s, the default member timeout: a paused owner is given up on when
	// the cell would give up on it). An answer that begins and stalls is
	// bounded by it too; one still arriving is not, however long it takes.
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

// fillDefaults sets every field left zero (or negative) to its default.
func (c *ClientConfig) fillDefaults() {
	if c.ConnsPerPeer <= 0 {
		c.ConnsPerPeer = defaultConnsPerPeer
	}
	if c.MaxInFlightPerPeer <= 0 {
		c.MaxInFlightPerPeer = defaultMaxInFlight
	}
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = link.MaxFrame
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = defaultDialTimeout
	}
	if c.PingInterval <= 0 {
		c.PingInterval = defaultPingInterval
	}
	if c.PingTimeout <= 0 {
		c.PingTimeout = defaultPingTimeout
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = defaultCallTimeout
	}
}

// Client relays calls to peers, keeping ConnsPerPeer connections to each,
// dialled on first use and redialled after a loss. Each connection, once
// past the handshake, is a link.Mux: it coalesces the frames of concurrent
// calls into one write, hands each answer to its call, pings, and ends
// its calls by the one rule for a lost answer (package link).
type Client struct {
	cfg ClientConfig

	mu     sync.Mutex
	peers  map[string]*peer
	conns  map[*link.Mux]struct{} // every open connection, forgotten peers' too
	closed bool
	wg     sync.WaitGroup
	dials  atomic.Int64
}

// NewClient checks cfg and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if len(cfg.Secret) == 0 {
		return nil, errors.New("relay: the cell secret is empty")
	}
	cfg.fillDefaults()
	return &Client{cfg: cfg, peers: map[string]*peer{}, conns: map[*link.Mux]struct{}{}}, nil
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
		if s.live() != nil {
			n++
		}
	}
	return n
}

// Close closes every connection, failing the calls in flight with
// ErrClosed, and waits for the client's goroutines.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.peers = map[string]*peer{}
	conns := make([]*link.Mux, 0, len(c.conns))
	for m := range c.conns {
		conns = append(conns, m)
	}
	c.mu.Unlock()
	for _, m := range conns {
		m.Close()
	}
	c.wg.Wait()
	return nil
}

// isClosed reports whether Close was called: a call ended by it fails
// with ErrClosed rather than ErrUnreachable.
func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

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
		if m := s.live(); m != nil {
			m.Close()
		}
	}
}

// Do relays req to the member at addr and waits for its answer. req's
// bytes are copied before Do returns control to the network.
func (c *Client) Do(ctx context.Context, addr string, req *link.Request) (link.Response, error) {
	type result struct {
		r   link.Response
		err error
	}
	ch := make(chan result, 1)
	if err := c.Go(ctx, addr, req, func(r link.Response, err error) { ch <- result{r, err} }); err != nil {
		return link.Response{}, err
	}
	res := <-ch
	return res.r, res.err
}

// Go relays req to the member at addr without waiting: done is called once
// with the answer or the failure, from one of the client's goroutines (or
// the context's), and must not block; the answer's bytes are the call's
// own. A non-nil return means the call was not started (and done will not
// be called). req's bytes are copied before Go returns. Cancelling ctx
// ends the call with ErrCanceled (ErrTimeout for its deadline) and tells
// the owner to stop.
func (c *Client) Go(ctx context.Context, addr string, req *link.Request, done func(link.Response, error)) error {
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
	if !req.Fits(c.cfg.MaxFrameBytes) {
		return &Error{Addr: addr, Kind: ErrTooLarge}
	}
	if p.inflight.Add(1) > int64(c.cfg.MaxInFlightPerPeer) {
		p.inflight.Add(-1)
		return &Error{Addr: addr, Kind: ErrOverloaded}
	}
	cl := &call{peer: p, done: done}
	// Either may fire at once (a context already done): cancelled waits
	// for cl.mu, so that finish sees both set.
	cl.mu.Lock()
	if ctx.Done() != nil {
		cl.stopCtx = context.AfterFunc(ctx, func() { cl.cancelled(ctx.Err()) })
	}
	if _, ok := ctx.Deadline(); !ok {
		cl.timer = time.AfterFunc(c.cfg.CallTimeout, func() { cl.cancelled(context.DeadlineExceeded) })
	}
	cl.mu.Unlock()
	p.slots[p.rr.Add(1)%uint32(len(p.slots))].submit(cl, req)
	return nil
}
