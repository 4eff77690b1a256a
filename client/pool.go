package client

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// Pool limits (docs/sdk-transport.md, "Go client"; measured with
// bench_test.go on a 2-core machine).
const (
	// maxShared bounds the pipelined connections per broker URL.
	maxShared = 4
	// sharedBusy is how many calls a shared connection carries before
	// another is opened (up to maxShared), so concurrent callers spread
	// over the broker's event loops rather than queue on one.
	sharedBusy = 8
	// maxPipeline bounds the calls in flight on one shared connection;
	// when every shared connection carries that many, a call takes an
	// exclusive connection instead of queueing deeper.
	maxPipeline = 128
	// maxIdle bounds the exclusive connections kept at rest.
	maxIdle = 64
	// idleTimeout closes a connection unused this long (the broker closes
	// them at 120 s).
	idleTimeout = 90 * time.Second
	dialTimeout = 5 * time.Second
	// checkAfter: a connection that rested at least this long is checked
	// (alive, one system call) before it is leased again. Under load a
	// connection rests for a millisecond or two between leases, and the
	// check was 3% of a requester's CPU; a connection the broker closed
	// within that time (it restarted) fails its call as any call in
	// flight at that moment does.
	checkAfter = 100 * time.Millisecond
)

// pool is one http:// broker URL's connections: up to maxShared shared
// connections, each pipelining calls under its own reader goroutine, and
// exclusive connections leased whole to one call (a waiting pop, a
// Request's push and pop, an overflow) and kept at rest, without any
// goroutine, between leases.
//
// Invariants: a connection is in at most one of shared and idle; a leased
// connection is in neither; a connection in idle has no request in flight
// and nothing unread; sharedConn.pending is only raised under mu, so no
// shared connection ever holds more than maxPipeline calls.
type pool struct {
	addr   string // host:port dialled
	prefix string // the URL's path prefix ("" or "/proxy")
	head   []byte // Host and the constant headers, each ending in CRLF
	dialer net.Dialer

	// closing is set by Close: from then on a connection is closed as soon
	// as it carries nothing, rather than kept at rest.
	closing atomic.Bool

	mu      sync.Mutex
	shared  []*sharedConn
	dialing int // shared connections being dialled
	idle    []idleConn
}

type idleConn struct {
	w     *wireConn
	since time.Time
}

func newPool(u *url.URL, head []byte) *pool {
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return &pool{
		addr:   net.JoinHostPort(u.Hostname(), port),
		prefix: u.EscapedPath(),
		head:   head,
		dialer: net.Dialer{Timeout: dialTimeout},
	}
}

func (p *pool) dial(ctx context.Context) (*wireConn, error) {
	nc, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, &connError{err: err, dial: true}
	}
	return newWireConn(nc), nil
}

// do sends a short call on a shared connection, or a waiting pop (or an
// overflow) on an exclusive one.
func (p *pool) do(ctx context.Context, c *call) error {
	if !c.exclusive {
		s, err := p.pickShared(ctx)
		if err != nil {
			return err
		}
		if s != nil {
			if c.timeout > 0 {
				c.deadline = time.Now().Add(c.timeout)
			}
			c.state.Store(callWaiting)
			if !s.send(p, c) {
				return &connError{err: errors.New("the connection failed before the call was written"), retry: true, unsent: true}
			}
			return await(ctx, c)
		}
	}
	w, reused, err := p.lease(ctx)
	if err != nil {
		return err
	}
	buf := appendRequest(w.wbuf[:0], c.method, p.prefix, c.target, p.head, c.authLine(), c.body, c.hasBody)
	w.wbuf = buf
	return p.exchange(ctx, w, reused, buf, c, nil)
}

// pair writes push and pop in one write on an exclusive connection and
// reads both answers in order.
func (p *pool) pair(ctx context.Context, push, pop *call) error {
	w, reused, err := p.lease(ctx)
	if err != nil {
		return err
	}
	buf := appendRequest(w.wbuf[:0], push.method, p.prefix, push.target, p.head, push.authLine(), push.body, push.hasBody)
	buf = appendRequest(buf, pop.method, p.prefix, pop.target, p.head, pop.authLine(), pop.body, pop.hasBody)
	w.wbuf = buf
	return p.exchange(ctx, w, reused, buf, push, pop)
}

// batch writes calls in one write on an exclusive connection and reads
// every answer in order (Serve: a batch's replies and the next waiting
// pop).
func (p *pool) batch(ctx context.Context, calls []*call, answered func(*call)) error {
	// The replies go even when ctx ends meanwhile (Serve stopping): only
	// the pop's wait is cut short by it.
	w, reused, err := p.lease(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	buf := w.wbuf[:0]
	for _, c := range calls {
		buf = appendRequest(buf, c.method, p.prefix, c.target, p.head, c.authLine(), c.body, c.hasBody)
	}
	w.wbuf = buf
	return p.exchangeAll(ctx, w, reused, buf, calls, false, len(calls)-1, answered)
}

// exchange is exchangeAll for one call, or for a push and the pop behind
// it, the pop read only when the push succeeded.
func (p *pool) exchange(ctx context.Context, w *wireConn, reused bool, buf []byte, first, second *call) error {
	if second == nil {
		return p.exchangeAll(ctx, w, reused, buf, []*call{first}, true, 0, nil)
	}
	return p.exchangeAll(ctx, w, reused, buf, []*call{first, second}, true, 0, nil)
}

// exchangeAll writes buf (the calls' requests) on the leased connection w
// and reads the calls' answers in order; with stopOnRefusal, a call
// answered with other than a 2xx leaves the calls behind it unread. ctx
// ending interrupts the reading of calls[interruptFrom] and those after it:
// a batch's replies, answered at once, are read whatever ctx does, and only
// the waiting pop behind them is cut short. answered (when not nil) is
// called with each call whose answer was read, at once. It
// gives w back to the pool, or closes it when it cannot be reused: an
// error, a "Connection: close", ctx ended, a call left unread (a refused
// push in front of a pop that is now parked on the broker), or bytes read
// behind the last answer.
func (p *pool) exchangeAll(ctx context.Context, w *wireConn, reused bool, buf []byte, calls []*call, stopOnRefusal bool, interruptFrom int, answered func(*call)) error {
	var stop func() bool
	arm := func() {
		if stop == nil && ctx.Done() != nil {
			stop = context.AfterFunc(ctx, func() { _ = w.nc.SetDeadline(aLongTimeAgo) })
		}
	}
	if interruptFrom == 0 {
		arm()
	}
	ok := false
	defer func() {
		interrupted := stop != nil && !stop()
		// Bytes read past the last answer are an answer nobody asked for:
		// at rest, the connection would hand it to the next call leased
		// (alive looks at the socket only, and only after checkAfter).
		if ok && !interrupted && w.br.Buffered() == 0 {
			p.giveBack(w)
		} else {
			_ = w.nc.Close()
		}
	}()
	first := calls[0]
	setDeadline(w, first)
	if _, err := w.nc.Write(buf); err != nil {
		return ctxOr(ctx, &connError{err: err, retry: reused && first.safe && len(calls) == 1, maybeApplied: !first.safe || len(calls) > 1})
	}
	for i, c := range calls {
		if i > 0 {
			setDeadline(w, c)
		}
		if i == interruptFrom {
			arm()
		}
		if err := readInto(w, c); err != nil {
			return ctxOr(ctx, err)
		}
		if answered != nil {
			answered(c)
		}
		if c.ans.close {
			return nil // the calls behind it were not read by the server
		}
		if stopOnRefusal && i < len(calls)-1 && (c.ans.status < 200 || c.ans.status > 299) {
			return nil // the call behind it is parked: the connection goes
		}
	}
	ok = true
	return nil
}

func setDeadline(w *wireConn, c *call) {
	var d time.Time
	if c.timeout > 0 {
		d = time.Now().Add(c.timeout)
	}
	_ = w.nc.SetDeadline(d)
}

func readInto(w *wireConn, c *call) error {
	mark := w.mark()
	var err error
	c.ans, c.resp, err = w.readAnswer(c.resp)
	if err != nil {
		return ioFailure(c, err, w.started(mark))
	}
	return nil
}

// ctxOr answers ctx's error when ctx ended (the deadline that interrupted
// the read was ours), else err.
func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// lease takes an idle exclusive connection that is still open, or dials.
func (p *pool) lease(ctx context.Context) (w *wireConn, reused bool, err error) {
	now := time.Now()
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		ic := p.idle[n-1]
		p.idle[n-1] = idleConn{}
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		rested := now.Sub(ic.since)
		if rested < idleTimeout && (rested < checkAfter || alive(ic.w.nc)) {
			return ic.w, true, nil
		}
		_ = ic.w.nc.Close()
	}
	w, err = p.dial(ctx)
	return w, false, err
}

// giveBack puts w at rest. The oldest connection at rest (the bottom of
// the stack) is closed when it has rested past idleTimeout, so that
// connections a burst left behind do not stay open for ever.
func (p *pool) giveBack(w *wireConn) {
	now := time.Now()
	var stale *wireConn
	p.mu.Lock()
	if len(p.idle) > 0 && now.Sub(p.idle[0].since) > idleTimeout {
		stale = p.idle[0].w
		n := copy(p.idle, p.idle[1:])
		p.idle[n] = idleConn{}
		p.idle = p.idle[:n]
	}
	if len(p.idle) < maxIdle && !p.closing.Load() {
		p.idle = append(p.idle, idleConn{w, now})
		w = nil
	}
	p.mu.Unlock()
	if stale != nil {
		_ = stale.nc.Close()
	}
	if w != nil {
		_ = w.nc.Close()
	}
}

// pickShared answers the least loaded shared connection with a slot
// reserved on it, dialling another when all carry sharedBusy calls and
// there are fewer than maxShared; nil (and no error) when every one is
// full, or all are still being dialled: the call then goes exclusive.
func (p *pool) pickShared(ctx context.Context) (*sharedConn, error) {
	p.mu.Lock()
	var best *sharedConn
	var load int32
	for _, s := range p.shared {
		if n := s.pending.Load(); best == nil || n < load {
			best, load = s, n
		}
	}
	full := len(p.shared)+p.dialing >= maxShared
	if best == nil && full {
		// Every shared connection is still being dialled (a burst of
		// first calls): this one goes exclusive rather than dial a fifth.
		p.mu.Unlock()
		return nil, nil
	}
	if best != nil && (load < sharedBusy || full) {
		if load >= maxPipeline {
			best = nil
		} else {
			best.pending.Add(1)
		}
		p.mu.Unlock()
		return best, nil
	}
	p.dialing++
	p.mu.Unlock()
	w, err := p.dial(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dialing--
	if err != nil {
		if best != nil && best.pending.Load() < maxPipeline {
			best.pending.Add(1) // a busy connection beats none
			return best, nil
		}
		return nil, err
	}
	s := newSharedConn(w)
	p.shared = append(p.shared, s)
	s.pending.Add(1)
	go s.readLoop(p)
	go s.writeLoop()
	return s, nil
}

func (p *pool) removeShared(s *sharedConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.shared {
		if x == s {
			p.shared = append(p.shared[:i], p.shared[i+1:]...)
			return
		}
	}
}

// closeIdle (Close) closes the exclusive connections at rest and the
// shared ones carrying nothing; the others close when their calls are
// answered. The pool stays usable (calls made after Close dial again, and
// their connections close after them).
func (p *pool) closeIdle() {
	p.closing.Store(true)
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	var quiet []*sharedConn
	kept := p.shared[:0:0]
	for _, s := range p.shared {
		if s.pending.Load() == 0 {
			quiet = append(quiet, s)
		} else {
			kept = append(kept, s)
		}
	}
	p.shared = kept
	p.mu.Unlock()
	for _, ic := range idle {
		_ = ic.w.nc.Close()
	}
	for _, s := range quiet {
		s.shut()
	}
}
