package server

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/queenmq/ephemeral/internal/acceptloop"
)

// Accepting connections (docs/server.md, accepting connections): the
// loop is internal/acceptloop's; here are its counters and log line.

// acceptLogEvery: at most one log line about accept errors per this.
const acceptLogEvery = 10 * time.Second

// transportMetrics are the connection series; they live on the server's
// metrics set so that GET /metrics prints them with the rest.
type transportMetrics struct {
	acceptErrors  *metrics.Counter
	acceptPaused  atomic.Bool
	bodyRefused   *metrics.Counter // bodies refused for the in-flight bound
	outboundShed  *metrics.Counter // connections closed for unread answers
	idleShed      *metrics.Counter // idle connections closed for a new one (shed.go)
	lastAcceptLog atomic.Int64
	errsSinceLog  atomic.Int64
}

func (s *Server) initTransportMetrics() {
	t := &s.tm
	set := s.m.set
	t.acceptErrors = set.NewCounter("queen_ephemeral_accept_errors_total")
	t.bodyRefused = set.NewCounter("queen_ephemeral_inflight_refusals_total")
	t.outboundShed = set.NewCounter("queen_ephemeral_outbound_closed_total")
	t.idleShed = set.NewCounter("queen_ephemeral_idle_shed_total")
	set.NewGauge("queen_ephemeral_accept_paused", func() float64 {
		if t.acceptPaused.Load() {
			return 1
		}
		return 0
	})
	set.NewGauge("queen_ephemeral_connections", func() float64 { return float64(s.openConns.Load()) })
	set.NewGauge("queen_ephemeral_gateway_links", func() float64 { return float64(s.gatewayLinks.Load()) })
	set.NewGauge("queen_ephemeral_client_links", func() float64 { return float64(s.clientLinks.Load()) })
	set.NewGauge("queen_ephemeral_inflight_request_bytes", func() float64 { return float64(s.inflight.Load()) })
}

// OpenConnections is the number of connections open now.
func (s *Server) OpenConnections() int64 { return s.openConns.Load() }

// acceptLoop accepts until the listener is closed (Shutdown).
func (s *Server) acceptLoop(ln net.Listener) {
	l := acceptloop.Loop{
		Listener: ln,
		Enroll:   func(c net.Conn) error { _, err := s.cli.Enroll(c); return err },
		Stopping: s.stopping.Load,
		Quit:     s.quit,
		Failed:   s.acceptFailed,
		Paused:   s.tm.acceptPaused.Store,
		Shed:     s.shedIdle,
	}
	l.Run()
}

// acceptFailed counts an accept error and logs it, at most once every
// acceptLogEvery with the number of errors since the last line.
func (s *Server) acceptFailed(err error) {
	s.tm.acceptErrors.Inc()
	n := s.tm.errsSinceLog.Add(1)
	now := time.Now().UnixNano()
	last := s.tm.lastAcceptLog.Load()
	if now-last < int64(acceptLogEvery) || !s.tm.lastAcceptLog.CompareAndSwap(last, now) {
		return
	}
	s.tm.errsSinceLog.Add(-n)
	s.cfg.Logger.Warn("accepting connections failed; closing the longest-idle connections or pausing, and retrying (connections already open are served)",
		"err", err, "errors", n, "openConnections", s.openConns.Load(), "idleShedTotal", s.tm.idleShed.Get())
}
