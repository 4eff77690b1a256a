package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/acceptloop"
	"github.com/queenmq/ephemeral/store"
)

// Server is the broker's HTTP/1.1 front: one gnet engine whose loops serve
// every connection.
type Server struct {
	gnet.BuiltinEventEngine

	cfg   Config
	e     *engine.Engine
	st    store.Store
	cli   *gnet.Client // the event loops (listener.go says why a client)
	ln    net.Listener
	conns *xsync.Map[*conn, struct{}]
	loops *xsync.Map[gnet.EventLoop, *loopState] // each loop's state (loop.go)

	booted    chan struct{}
	accepting sync.WaitGroup // the acceptLoop goroutine
	// background: the goroutines that use the store (persistKillSwitch,
	// watchStore, loadWhenReady); Shutdown waits for them, so that the
	// store can be closed after it.
	background sync.WaitGroup
	loaded     atomic.Bool // declarations loaded from the store
	auth       *identity.Auth
	// gatewayMode: QUEEN_AUTH_MODE=gateway, whose pop answers say how many
	// messages they carry (X-Queen-Delivered, popSink.end).
	gatewayMode bool
	m           *serverMetrics

	tenants *xsync.Map[string, *tenantState]
	grantMu sync.Mutex // serializes grant changes (store, then memory)
	// shareMembers is the live member count grants are divided by (share.go):
	// 0 or 1 outside a cell.
	shareMembers atomic.Int64

	// The kill switch (D15): ks is the state in force, ksGen counts the
	// operator's changes, ksDirty wakes the persister; paused and
	// retryAfter are read by every family request.
	ksMu       sync.Mutex
	ks         store.KillSwitch
	ksGen      uint64
	ksWritten  uint64 // the last ksGen the persister wrote
	ksDirty    chan struct{}
	quit       chan struct{} // closed by Shutdown
	paused     atomic.Bool
	retryAfter atomic.Int64
	stopping   atomic.Bool
	started    atomic.Bool  // Start was called: the cell can no longer be attached (cell.go)
	now        atomic.Int64 // unix nanos, refreshed by the tick

	sy syncState // following the store's changes (sync.go)

	views viewWaiters // the parked view reads (cellview.go)
	cors  corsCache   // the view's member origins (cors.go)

	directWrites atomic.Int64 // parked pops answered by writeDirect (read by tests)

	// The cell (cell.go); nil in a cell of one.
	cell         *cellState
	relayFailed  atomic.Int64 // relayed requests answered 503 ephemeral_forward_failed
	relayLost    atomic.Int64 // relayed requests whose client connection was closed unanswered (the owner may have acted)
	gatewayLinks atomic.Int64 // gateway links open (gatewaylink.go)
	clientLinks  atomic.Int64 // client links open (clientlink.go)
	listCounters              // streamed listings (liststream.go)

	tm         transportMetrics
	openConns  atomic.Int64 // connections open now
	nThrottled atomic.Int64 // connections stopped for their unread answers (conn.throttle)
	watching   atomic.Bool  // watchThrottled's goroutine runs
	inflight   atomic.Int64 // request bytes reserved by bodies being read (conn.reserve)
	returning  atomic.Bool  // a returnHeldMemory is pending (links.go)
}

// New returns a server; Start runs it.
func New(cfg Config) *Server {
	cfg.fillDefaults()
	s := &Server{
		cfg:     cfg,
		e:       cfg.Engine,
		st:      cfg.Store,
		conns:   xsync.NewMap[*conn, struct{}](),
		loops:   xsync.NewMap[gnet.EventLoop, *loopState](),
		auth:    cfg.Auth,
		m:       newServerMetrics(),
		tenants: xsync.NewMap[string, *tenantState](),
		ks:      store.KillSwitch{Enabled: true},
		ksDirty: make(chan struct{}, 1),
		quit:    make(chan struct{}),
		booted:  make(chan struct{}),
	}
	s.gatewayMode = cfg.Auth.Mode() == identity.ModeGateway
	s.now.Store(time.Now().UnixNano())
	s.retryAfter.Store(1)
	s.initTransportMetrics()
	return s
}

// Start loads the declarations when the store is ready (waiting for it in
// the background when it is not, D16), then serves on cfg.Addr. It returns
// once the listener is up.
func (s *Server) Start() error {
	if s.started.Swap(true) {
		return errors.New("server: Start called twice")
	}
	if s.cell != nil && s.cell.m == nil {
		return errors.New("server: AttachCell was called without SetMembership: start the membership (cell.Start) and hand it over before Start")
	}
	s.background.Add(2)
	go func() { defer s.background.Done(); s.persistKillSwitch() }()
	go func() { defer s.background.Done(); s.watchStore() }()
	select {
	case <-s.st.Ready():
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.loadDeclarations(ctx)
		cancel()
		if err != nil {
			s.cfg.Logger.Warn("loading declarations failed; retrying in the background", "err", err)
			s.background.Add(1)
			go func() { defer s.background.Done(); s.loadWhenReady() }()
		}
	default:
		s.cfg.Logger.Warn("the store is not ready; serving implicit queues until it is")
		s.background.Add(1)
		go func() { defer s.background.Done(); s.loadWhenReady() }()
	}
	ln, cli, err := acceptloop.Listen(s.cfg.Addr, s, s.cfg.Loops, s.cfg.Logger)
	if err != nil {
		return err
	}
	s.cli, s.ln = cli, ln
	<-s.booted
	if s.cell != nil {
		go s.tendLinks()
	}
	go s.tendClientLinksEverySecond()
	s.accepting.Add(1)
	go func() {
		defer s.accepting.Done()
		s.acceptLoop(ln)
	}()
	return nil
}

// Shutdown answers every parked pop with an empty batch, lets those answers
// leave, and stops the loops (SIGTERM).
func (s *Server) Shutdown(ctx context.Context) error {
	if s.stopping.Swap(true) {
		return nil
	}
	close(s.quit)
	s.e.ReleaseWaiters()
	s.views.wake(s, true) // parked view reads answered with the view, as pops are
	if s.ln == nil {
		return nil // never started
	}
	s.ln.Close()
	// The acceptor ends before the loops stop: inside Client.Enroll it
	// waits for a loop to register its connection.
	s.accepting.Wait()
	s.drainLoops(ctx) // the answers of the pops released above are written
	done := make(chan error, 1)
	go func() {
		// The store's watchers end before the caller closes the store.
		s.background.Wait()
		done <- s.cli.Stop()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drainLoops waits until every loop has run the tasks queued before it
// was called (the AsyncWrites of answers made off the loops; gnet runs
// them before later tasks), or until ctx ends.
func (s *Server) drainLoops(ctx context.Context) {
	var wg sync.WaitGroup
	s.loops.Range(func(_ gnet.EventLoop, ls *loopState) bool {
		wg.Add(1)
		task := gnet.RunnableFunc(func(context.Context) error { wg.Done(); return nil })
		if ls.loop.Execute(context.Background(), task) != nil {
			wg.Done() // the loop is stopping
		}
		return true
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// OnBoot reports the event loops up.
func (s *Server) OnBoot(gnet.Engine) gnet.Action {
	close(s.booted)
	return gnet.None
}

// OnOpen gives the connection its state and charges it to the budget.
func (s *Server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if l, ok := c.Context().(*linkConn); ok {
		l.opened(c, s)
		return nil, gnet.None
	}
	cs := newConn(s, c)
	c.SetContext(cs)
	s.conns.Store(cs, struct{}{})
	s.openConns.Add(1)
	s.e.Charge(s.cfg.ConnCharge) // given back in OnClose
	return nil, gnet.None
}

// OnClose cancels a parked pop at once (D13) and forgets the connection.
func (s *Server) OnClose(c gnet.Conn, _ error) gnet.Action {
	if cs, ok := c.Context().(*conn); ok {
		cs.closed()
		s.conns.Delete(cs)
		s.openConns.Add(-1)
		s.e.Release(s.cfg.ConnCharge)
	} else if l, ok := c.Context().(*linkConn); ok {
		l.fail(errLinkClosedByPeer)
	}
	return gnet.None
}

// OnTraffic serves what arrived.
func (s *Server) OnTraffic(c gnet.Conn) gnet.Action {
	cs, ok := c.Context().(*conn)
	if !ok {
		if l, ok := c.Context().(*linkConn); ok {
			return l.onTraffic()
		}
		return gnet.Close
	}
	return cs.onTraffic()
}

// OnTick enforces the connection timeouts gnet has no deadlines for, and
// looks again at connections stopped for their unread answers.
func (s *Server) OnTick() (time.Duration, gnet.Action) {
	now := time.Now().UnixNano()
	s.now.Store(now)
	headLimit, bodyLimit, idleLimit := int64(s.cfg.HeaderTimeout), int64(s.cfg.BodyTimeout), int64(s.cfg.IdleTimeout)
	s.conns.Range(func(cs *conn, _ struct{}) bool {
		if cs.state.Load() != stIdle {
			return true // a parked pop or a store call has its own bound
		}
		switch {
		case cs.overSince.Load() != 0:
			// Stopped for its unread answers: the watcher's (throttleCheck).
		case since(cs.headSince.Load(), now) > headLimit,
			since(cs.bodySince.Load(), now) > bodyLimit,
			now-cs.lastActive.Load() > idleLimit:
			cs.c.Close()
		}
		return true
	})
	return time.Second, gnet.None
}

// throttleCheck is how often a connection stopped for its unread answers
// is looked at again: gnet reports no drained outbound buffer, and the 1 s
// tick would make a client that reads slowly wait a second per soft limit.
const throttleCheck = 5 * time.Millisecond

// watchThrottled starts, unless it runs, the goroutine that has each loop
// look at its stopped connections every throttleCheck (one task per loop,
// whatever their number); it ends when there are none.
func (s *Server) watchThrottled() {
	if !s.watching.CompareAndSwap(false, true) {
		return
	}
	go s.tickLoops(throttleCheck, func(ls *loopState) gnet.RunnableFunc {
		if ls.nThrottled.Load() > 0 {
			return ls.check
		}
		return nil
	}, func() bool {
		if s.nThrottled.Load() != 0 {
			return false
		}
		s.watching.Store(false)
		// A connection stopped since the load above started no watcher
		// (this one still ran): take the job back.
		return s.nThrottled.Load() == 0 || !s.watching.CompareAndSwap(false, true)
	})
}

// tickLoops, every interval until the server stops (or until done, when
// given, says so after a round), has every loop run the task pick gives it.
func (s *Server) tickLoops(every time.Duration, pick func(*loopState) gnet.RunnableFunc, done func() bool) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.quit:
			return
		}
		s.onLoops(pick)
		if done != nil && done() {
			return
		}
	}
}

// onLoops has every loop run the task pick gives it, if any, as a task of
// the loop (from a goroutine that watches the loops).
func (s *Server) onLoops(pick func(*loopState) gnet.RunnableFunc) {
	s.loops.Range(func(_ gnet.EventLoop, ls *loopState) bool {
		if task := pick(ls); task != nil {
			_ = ls.loop.Execute(context.Background(), task)
		}
		return true
	})
}

// since is how long ago start was, 0 when it is not set.
func since(start, now int64) int64 {
	if start == 0 {
		return 0
	}
	return now - start
}
