package relay

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// Handler serves one relayed request on the owner. It is called on the
// connection's reader goroutine, so it must not block: it answers at once
// or arranges for reply to be called later, from any goroutine (a parked
// pop answered by a push). reply takes ownership of the Response bytes; a
// second call, or a call after ctx is done, is ignored. ctx is cancelled
// when the calling member gives up (its client went away, its deadline
// passed) or the connection is lost: a parked handler should then let go
// of the request; it need not reply.
type Handler func(ctx context.Context, req *link.Request, reply func(link.Response))

// ServerConfig configures a Server. Zero values take the defaults.
type ServerConfig struct {
	Secret  []byte  // the cell secret (QUEEN_CELL_SECRET); required
	Handler Handler // required unless Adopt is set
	// Adopt, when set, takes every connection that passed the handshake
	// instead of this server's goroutines (the broker serves the frames on
	// its event loops); Handler, MaxStreamsPerConn and Conns are then not
	// used. Adopt owns the connection.
	Adopt func(net.Conn)
	// MaxFrameBytes bounds one frame read or written (default 80 MiB: the
	// broker's 64 MiB body and its headers). An answer over it is refused
	// with ErrTooLarge on the caller; a peer that sends more is cut off.
	MaxFrameBytes int
	// MaxStreamsPerConn bounds the calls in flight on one connection
	// (default 65536); one more is refused with ErrOverloaded.
	MaxStreamsPerConn int
	// HandshakeTimeout bounds the handshake (default 5 s).
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the handshakes in progress at once (default
	// 128), MaxHandshakesPerAddr those from one source address (default
	// 32): a connection accepted past either is closed at once, so that
	// unauthenticated connections cost at most that many descriptors and
	// goroutines (admit.go).
	MaxHandshakes, MaxHandshakesPerAddr int
	// DescriptorReserve: a connection accepted while fewer than this many
	// descriptors are left under the process's limit is closed at once,
	// leaving them to the public port (default: an eighth of the limit,
	// 16 to 1,024). DescriptorLimit stands for the limit in tests (0: the
	// soft RLIMIT_NOFILE, read at each accept).
	DescriptorReserve, DescriptorLimit int
	// PingTimeout: a connection that has sent nothing, not even a ping,
	// for this long is closed and its calls' contexts cancelled (default
	// 5 s; a Client pings every PingInterval, 1 s by default).
	// FrameTimeout: one whose frame, once begun, does not complete within
	// this long is closed (default 30 s, the broker's body timeout).
	// Neither applies to adopted connections: the adopter keeps its own.
	PingTimeout, FrameTimeout time.Duration
	// OnRefused and OnShed, when set, are called for each connection that
	// failed its handshake (Refused) and each closed before it (Shed): the
	// broker counts them in its metrics.
	OnRefused, OnShed func()
	Logger            *slog.Logger
}

const (
	defaultMaxStreams    = 1 << 16
	defaultHandshakeTime = 5 * time.Second
	defaultFrameTimeout  = 30 * time.Second
)

// fillDefaults sets every field left zero (or negative) to its default.
func (c *ServerConfig) fillDefaults() {
	if c.MaxFrameBytes <= 0 {
		c.MaxFrameBytes = link.MaxFrame
	}
	if c.MaxStreamsPerConn <= 0 {
		c.MaxStreamsPerConn = defaultMaxStreams
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = defaultHandshakeTime
	}
	if c.MaxHandshakes <= 0 {
		c.MaxHandshakes = defaultMaxHandshakes
	}
	if c.MaxHandshakesPerAddr <= 0 {
		c.MaxHandshakesPerAddr = defaultMaxHandshakesPerAddr
	}
	if c.PingTimeout <= 0 {
		c.PingTimeout = defaultPingTimeout
	}
	if c.FrameTimeout <= 0 {
		c.FrameTimeout = defaultFrameTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server accepts member connections and serves relayed requests with the
// Handler.
type Server struct {
	cfg ServerConfig

	mu     sync.Mutex
	lns    map[net.Listener]struct{}
	conns  map[*serverConn]struct{}
	closed bool
	wg     sync.WaitGroup

	adm     admission    // handshakes in progress (admit.go)
	refused atomic.Int64 // connections that failed the handshake
	lastLog atomic.Int64 // unix nanos of the last refusal logged
}

// refusalLogEvery: at most one log line per this for refused handshakes, so
// that a port scanner cannot flood the log (Refused counts them all).
const refusalLogEvery = 10 * time.Second

// NewServer checks cfg and returns a Server; Serve starts it.
func NewServer(cfg ServerConfig) (*Server, error) {
	if len(cfg.Secret) == 0 {
		return nil, errors.New("relay: the cell secret is empty")
	}
	if cfg.Handler == nil && cfg.Adopt == nil {
		return nil, errors.New("relay: no handler")
	}
	cfg.fillDefaults()
	s := &Server{cfg: cfg, lns: map[net.Listener]struct{}{}, conns: map[*serverConn]struct{}{}}
	s.adm = admission{max: cfg.MaxHandshakes, perAddr: cfg.MaxHandshakesPerAddr,
		limit: cfg.DescriptorLimit, reserve: cfg.DescriptorReserve, byAddr: map[netip.Addr]int{}}
	return s, nil
}

// Refused is the number of connections refused at the handshake.
func (s *Server) Refused() int64 { return s.refused.Load() }

// Shed is the number of connections closed as they were accepted, before
// their handshake, because a bound of admit.go was reached.
func (s *Server) Shed() int64 { return s.adm.shed.Load() }

// Handshakes is the number of handshakes in progress.
func (s *Server) Handshakes() int { return s.adm.inProgress() }

// Conns is the number of authenticated connections open now.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Serve accepts on ln until Close; it returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.lns[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// EMFILE and the like: back off, never stop accepting.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.cfg.Logger.Warn("relay accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		ip, reason := s.adm.admit(c)
		if reason != shedNone {
			c.Close()
			s.logShed(c, reason)
			continue
		}
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.serveConn(c, ip) }()
	}
}

// Close stops accepting, closes every connection (cancelling the contexts
// of the calls in flight) and waits for the server's goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.lns {
		ln.Close()
	}
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(net.ErrClosed)
	}
	s.wg.Wait()
	return nil
}

// serveConn authenticates c, giving back its handshake slot (ip's) when
// that is done, and then serves it on this goroutine (the reader) and one
// writer.
func (s *Server) serveConn(c net.Conn, ip netip.Addr) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	err := serverHandshake(c, s.cfg.Secret, s.cfg.HandshakeTimeout)
	s.adm.release(ip)
	if err != nil {
		total := s.refused.Add(1)
		if s.cfg.OnRefused != nil {
			s.cfg.OnRefused()
		}
		now := time.Now().UnixNano()
		if last := s.lastLog.Load(); now-last >= int64(refusalLogEvery) && s.lastLog.CompareAndSwap(last, now) {
			s.cfg.Logger.Warn("relay handshake refused", "peer", c.RemoteAddr().String(), "err", err, "refused_total", total)
		}
		c.Close()
		return
	}
	if s.cfg.Adopt != nil {
		s.cfg.Adopt(c)
		return
	}
	sc := &serverConn{srv: s, streams: map[uint64]*stream{}}
	sc.frameConn = newLink(c, s.cfg.MaxFrameBytes, s.cfg.FrameTimeout)
	sc.silence = s.cfg.PingTimeout
	sc.ctx, sc.cancel = context.WithCancel(context.Background())
	sc.dispatch = sc.onFrame
	sc.onClose = sc.closed
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.conns[sc] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() { defer s.wg.Done(); sc.writeLoop() }()
	sc.readLoop()
}

// serverConn is one member's connection to this server.
type serverConn struct {
	*frameConn
	srv    *Server
	ctx    context.Context
	cancel context.CancelFunc

	smu     sync.Mutex
	streams map[uint64]*stream
}

// stream is one call being served.
type stream struct {
	sc     *serverConn
	id     uint64
	cancel context.CancelFunc
	done   atomic.Bool
}

func (sc *serverConn) onFrame(typ byte, id uint64, p []byte) {
	switch typ {
	case link.FrameRequest:
		sc.onRequest(id, p)
	case link.FrameCancel:
		sc.smu.Lock()
		st := sc.streams[id]
		delete(sc.streams, id)
		sc.smu.Unlock()
		if st != nil && st.done.CompareAndSwap(false, true) {
			st.cancel()
		}
	case link.FramePing:
		sc.sendCtl(link.FramePong, id, nil)
	default:
		sc.close(errProtocol)
	}
}

func (sc *serverConn) onRequest(id uint64, p []byte) {
	req := new(link.Request)
	if err := link.DecodeRequest(p, req); err != nil {
		sc.close(err)
		return
	}
	sc.smu.Lock()
	if len(sc.streams) >= sc.srv.cfg.MaxStreamsPerConn {
		sc.smu.Unlock()
		sc.sendCtl(link.FrameRefuse, id, []byte{link.RefuseBusy})
		return
	}
	if _, dup := sc.streams[id]; dup {
		sc.smu.Unlock()
		sc.close(errProtocol)
		return
	}
	ctx, cancel := context.WithCancel(sc.ctx)
	st := &stream{sc: sc, id: id, cancel: cancel}
	sc.streams[id] = st
	sc.smu.Unlock()
	sc.srv.cfg.Handler(ctx, req, st.reply)
}

// reply sends the answer once, unless the call was cancelled meanwhile.
func (st *stream) reply(r link.Response) {
	if !st.done.CompareAndSwap(false, true) {
		return
	}
	sc := st.sc
	sc.smu.Lock()
	delete(sc.streams, st.id)
	sc.smu.Unlock()
	st.cancel()
	if len(r.Raw) > sc.maxFrame {
		sc.sendCtl(link.FrameRefuse, st.id, []byte{link.RefuseTooLarge})
		return
	}
	f := outFrame{withHdr: true, p: r.Raw}
	link.PutHeader(f.hdr[:], link.FrameAnswer, st.id, len(r.Raw))
	sc.send(f)
}

// closed runs once when the link ends: every call's context is cancelled.
func (sc *serverConn) closed(error) {
	sc.cancel()
	sc.smu.Lock()
	for id, st := range sc.streams {
		st.done.Store(true)
		delete(sc.streams, id)
	}
	sc.smu.Unlock()
	s := sc.srv
	s.mu.Lock()
	delete(s.conns, sc)
	s.mu.Unlock()
}
