package relay

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ServerConfig configures a Server. Zero values take the defaults.
type ServerConfig struct {
	Secret []byte // the cell secret (QUEEN_CELL_SECRET); required
	// Adopt takes every connection that passed the handshake, and owns
	// it: the broker serves its frames on its event loops
	// (server.AdoptRelayConn), with the bounds of docs/cell-relay.md
	// (frame size, ping and frame timeouts). Required.
	Adopt func(net.Conn)
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
	// OnRefused and OnShed, when set, are called for each connection that
	// failed its handshake (Refused) and each closed before it (Shed): the
	// broker counts them in its metrics.
	OnRefused, OnShed func()
	Logger            *slog.Logger
}

const defaultHandshakeTime = 5 * time.Second

// fillDefaults sets every field left zero (or negative) to its default.
func (c *ServerConfig) fillDefaults() {
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = defaultHandshakeTime
	}
	if c.MaxHandshakes <= 0 {
		c.MaxHandshakes = defaultMaxHandshakes
	}
	if c.MaxHandshakesPerAddr <= 0 {
		c.MaxHandshakesPerAddr = defaultMaxHandshakesPerAddr
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server accepts member connections on the relay port: it admits them
// (admit.go), runs the handshake, and hands those that pass it to Adopt.
type Server struct {
	cfg ServerConfig

	mu     sync.Mutex
	lns    map[net.Listener]struct{}
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
	if cfg.Adopt == nil {
		return nil, errors.New("relay: no Adopt for the authenticated connections")
	}
	cfg.fillDefaults()
	s := &Server{cfg: cfg, lns: map[net.Listener]struct{}{}}
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

// Close stops accepting and waits for the handshakes in progress (each
// bounded by HandshakeTimeout). The adopted connections are Adopt's.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.lns {
		ln.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// serveConn authenticates c, giving back its handshake slot (ip's) when
// that is done, and then hands it to Adopt.
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
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		c.Close() // passed its handshake as the server closed
		return
	}
	s.cfg.Adopt(c)
}
