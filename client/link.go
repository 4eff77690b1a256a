package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// Links (docs/link.md; docs/sdk-transport.md, "Links").
//
// By default each broker URL is reached over links: a connection upgraded
// with "GET /api/v1/ephemeral/link, Upgrade: queen-link/1" that carries
// every call of the client at once, each on a stream of its own (a
// link.Mux). A waiting pop holds only its stream, calls started together
// leave in one write, and a Request's push and waiting pop are started
// under one Hold so they leave together. linksPerURL links spread the
// calls over the broker's event loops.
//
// When the broker refuses the upgrade (any answer but 101: an older
// broker, a proxy that drops upgrades) the URL falls back to the HTTP/1.1
// transport it had before links for unsupportedFor, then one upgrade is
// tried again: a broker upgraded behind the URL (a rolling upgrade) brings
// its clients back to links. A 401 or 403 is an identity refusal, not a
// missing feature: that call goes over HTTP, which answers the same refusal
// in the route's terms, and the upgrade is tried again after refusedFor.
// The system routes (grants) are not the family's and always go over HTTP.
//
// The retry rule is the transport's (transport.go): a stream that ended
// without an answer after its frame was written may have been served, so
// a push or ack is never sent again; one never written, or refused
// "busy", is sent again.

const (
	// linksPerURL: the links kept to one broker URL.
	linksPerURL = 2
	// refusedFor: after an identity refusal of the upgrade, calls go over
	// HTTP this long before the upgrade is tried again; unsupportedFor:
	// after any other refusal (as the JavaScript SDK does).
	refusedFor     = 5 * time.Second
	unsupportedFor = time.Minute
	// busyPause: a stream refused "busy" is sent again after this pause.
	busyPause = 5 * time.Millisecond
	// upgradeTimeout bounds the dial, TLS and the upgrade together.
	upgradeTimeout = dialTimeout
)

// linkEndpoint is one broker URL over links, with the HTTP/1.1 transport
// as its fallback.
type linkEndpoint struct {
	http    endpoint // the fallback, and the system routes' transport
	addr    string
	tls     *tls.Config // nil for http://
	upgrade []byte      // the upgrade request, rendered once
	dialer  net.Dialer

	// With a token source (tokensource.go): the upgrade is rendered at
	// each dial, the token's line between upgradeHead and upgradeTail, and
	// each link keeps its identity fresh with token frames (keepFresh).
	src                      *tokenSource
	upgradeHead, upgradeTail []byte

	// retryAt: after a refused upgrade, unix nanos before which the calls
	// go over HTTP.
	retryAt atomic.Int64
	closing atomic.Bool

	rr    atomic.Uint32
	slots [linksPerURL]linkSlot
}

// linkSlot holds one link, dialled when a call needs it; callers that
// arrive while it is dialled wait for that dial.
type linkSlot struct {
	mu      sync.Mutex
	mux     *link.Mux
	dialing chan struct{} // closed when the dial under way ends
	err     error         // that dial's failure
	// retireAt: unix nanos from which mux takes no new call (its token
	// nears its exp, no fresher one accepted: tokensource.go); 0 never.
	retireAt atomic.Int64
}

func newLinkEndpoint(u *url.URL, head []byte, fallback endpoint, src *tokenSource) *linkEndpoint {
	port := u.Port()
	e := &linkEndpoint{http: fallback, dialer: net.Dialer{Timeout: upgradeTimeout}, src: src}
	if u.Scheme == "https" {
		if port == "" {
			port = "443"
		}
		e.tls = &tls.Config{ServerName: u.Hostname()}
	} else if port == "" {
		port = "80"
	}
	e.addr = net.JoinHostPort(u.Hostname(), port)
	e.upgradeHead = fmt.Appendf(nil, "GET %s%s/link HTTP/1.1\r\n%s", u.EscapedPath(), apiPrefix, head)
	e.upgradeTail = []byte("Connection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n")
	e.upgrade = append(append([]byte(nil), e.upgradeHead...), e.upgradeTail...)
	return e
}

// errUpgradeRefused: the broker answered the upgrade with something other
// than 101; the call goes over HTTP.
var errUpgradeRefused = errors.New("the broker refused the upgrade to a link")

// mux returns a link to the broker for c, dialling one when its slot has
// none, or has one whose token nears its exp (retired: it closes once its
// calls end); c's timeout, when not 0, bounds the dial and upgrade (a
// broker that accepts and never answers costs the call no more than its
// own timeout, as over HTTP), and c's token is the upgrade's.
func (e *linkEndpoint) mux(ctx context.Context, c *call) (*link.Mux, error) {
	s := &e.slots[e.rr.Add(1)%linksPerURL]
	for {
		s.mu.Lock()
		if m := s.mux; m != nil && m.Err() == nil {
			if at := s.retireAt.Load(); at == 0 || time.Now().UnixNano() < at {
				s.mu.Unlock()
				return m, nil
			}
			m.CloseWhenIdle()
			s.mux = nil
		}
		if ch := s.dialing; ch != nil {
			s.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			s.mu.Lock()
			err := s.err
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		ch := make(chan struct{})
		s.dialing, s.mux = ch, nil
		s.mu.Unlock()
		m, err := e.dial(ctx, c.timeout, c.tok)
		s.mu.Lock()
		s.mux, s.err, s.dialing = m, err, nil
		s.retireAt.Store(0)
		if err == nil && c.tok != nil && c.tok.exp != 0 {
			s.retireAt.Store(c.tok.retireAt)
			go e.keepFresh(s, m, c.tok)
		}
		s.mu.Unlock()
		close(ch)
		if err != nil {
			return nil, err
		}
		if e.closing.Load() {
			m.CloseWhenIdle()
		}
		return m, nil
	}
}

// dial connects, upgrades (with tok's Authorization line, when not nil)
// and starts a Mux. A refused upgrade is remembered (retryAt) and reported
// as errUpgradeRefused.
func (e *linkEndpoint) dial(ctx context.Context, bound time.Duration, tok *bearer) (*link.Mux, error) {
	if bound <= 0 || bound > upgradeTimeout {
		bound = upgradeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	nc, err := e.dialer.DialContext(ctx, "tcp", e.addr)
	if err != nil {
		return nil, &connError{err: err, dial: true}
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if e.tls != nil {
		tc := tls.Client(nc, e.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, &connError{err: err, dial: true}
		}
		nc = tc
	}
	if d, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(d)
	}
	w := newWireConn(nc)
	upgrade := e.upgrade
	if tok != nil {
		upgrade = append(append(append(make([]byte, 0, len(e.upgrade)+len(tok.line)), e.upgradeHead...), tok.line...), e.upgradeTail...)
	}
	if _, err := nc.Write(upgrade); err != nil {
		nc.Close()
		return nil, &connError{err: err, dial: true}
	}
	a, _, _, err := w.readHead()
	if err != nil {
		nc.Close()
		// Connected, and no answer: not a failed dial (the next URL would
		// be tried), and nothing was sent but the upgrade.
		return nil, &connError{err: fmt.Errorf("reading the answer to the upgrade: %w", err)}
	}
	if a.status != 101 {
		nc.Close()
		wait := unsupportedFor
		if a.status == 401 || a.status == 403 {
			wait = refusedFor
		}
		e.retryAt.Store(time.Now().Add(wait).UnixNano())
		return nil, errUpgradeRefused
	}
	_ = nc.SetDeadline(time.Time{})
	return link.NewMux(nc, w.br, link.MuxConfig{}), nil
}

// overHTTP reports whether c goes over the fallback transport.
func (e *linkEndpoint) overHTTP(c *call) bool {
	if c.prefix != apiPrefix {
		return true
	}
	at := e.retryAt.Load()
	return at != 0 && time.Now().UnixNano() < at
}

func (e *linkEndpoint) do(ctx context.Context, c *call) error {
	if e.overHTTP(c) {
		return e.http.do(ctx, c)
	}
	m, err := e.mux(ctx, c)
	if err != nil {
		if errors.Is(err, errUpgradeRefused) {
			return e.http.do(ctx, c)
		}
		return err
	}
	if err := c.startOn(m); err != nil {
		return err
	}
	return c.awaitOn(ctx, m)
}

func (e *linkEndpoint) pair(ctx context.Context, push, pop *call) error {
	if e.overHTTP(push) {
		return e.http.pair(ctx, push, pop)
	}
	m, err := e.mux(ctx, push)
	if err != nil {
		if errors.Is(err, errUpgradeRefused) {
			return e.http.pair(ctx, push, pop)
		}
		return err
	}
	m.Hold()
	err = push.startOn(m)
	if err == nil {
		if err = pop.startOn(m); err != nil {
			// Not sent either, as Hold keeps the push back: take it back.
			m.Cancel(push.stream)
		}
	}
	m.Release()
	if err != nil {
		return err
	}
	if err := push.awaitOn(ctx, m); err != nil {
		pop.abandonOn(m)
		return err
	}
	if push.ans.status < 200 || push.ans.status > 299 {
		pop.abandonOn(m) // the pop parked for nothing: let it go
		return nil
	}
	return pop.awaitOn(ctx, m)
}

func (e *linkEndpoint) batch(ctx context.Context, calls []*call, answered func(*call)) error {
	if e.overHTTP(calls[0]) {
		return e.http.batch(ctx, calls, answered)
	}
	m, err := e.mux(ctx, calls[0])
	if err != nil {
		if errors.Is(err, errUpgradeRefused) {
			return e.http.batch(ctx, calls, answered)
		}
		return err
	}
	m.Hold()
	started := 0
	for _, c := range calls {
		if err = c.startOn(m); err != nil {
			break
		}
		started++
	}
	m.Release()
	if err != nil {
		for _, c := range calls[:started] {
			c.abandonOn(m)
		}
		return err
	}
	// The replies are awaited whatever ctx does (Serve stopping): only the
	// pop behind them, the last call, is cut short by it.
	last := len(calls) - 1
	for i, c := range calls {
		wctx := context.WithoutCancel(ctx)
		if i == last {
			wctx = ctx
		}
		if err := c.awaitOn(wctx, m); err != nil {
			for _, rest := range calls[i+1:] {
				rest.abandonOn(m)
			}
			return err
		}
		if answered != nil {
			answered(c)
		}
	}
	return nil
}

func (e *linkEndpoint) closeIdle() {
	e.closing.Store(true)
	for i := range e.slots {
		s := &e.slots[i]
		s.mu.Lock()
		m := s.mux
		s.mu.Unlock()
		if m != nil {
			m.CloseWhenIdle()
		}
	}
	e.http.closeIdle()
}
