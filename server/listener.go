package server

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Accepting connections (docs/server.md, accepting connections).
//
// gnet's own acceptor gives up on the first accept error it does not know
// (EMFILE when the process is out of descriptors): its main reactor exits
// and the port stops answering while the process lives on. So the broker
// accepts in a goroutine of its own from a net.Listener and hands every
// connection to the event loops of a gnet.Client, an engine with loops and
// no listener (Client.Enroll duplicates the descriptor into a loop). An
// accept error pauses accepting with a backoff, never ends it.

// Accept backoff, as net/http's Server.Serve: 5 ms doubling to 1 s.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
	acceptLogEvery   = 10 * time.Second // at most one log line per this
)

// transportMetrics are the connection series; they live on the server's
// metrics set so that GET /metrics prints them with the rest.
type transportMetrics struct {
	acceptErrors  *metrics.Counter
	acceptPaused  atomic.Bool
	bodyRefused   *metrics.Counter // bodies refused for the in-flight bound
	outboundShed  *metrics.Counter // connections closed for unread answers
	lastAcceptLog atomic.Int64
	errsSinceLog  atomic.Int64
}

func (s *Server) initTransportMetrics() {
	t := &s.tm
	set := s.m.set
	t.acceptErrors = set.NewCounter("queen_ephemeral_accept_errors_total")
	t.bodyRefused = set.NewCounter("queen_ephemeral_inflight_refusals_total")
	t.outboundShed = set.NewCounter("queen_ephemeral_outbound_closed_total")
	set.NewGauge("queen_ephemeral_accept_paused", func() float64 {
		if t.acceptPaused.Load() {
			return 1
		}
		return 0
	})
	set.NewGauge("queen_ephemeral_connections", func() float64 { return float64(s.openConns.Load()) })
	set.NewGauge("queen_ephemeral_inflight_request_bytes", func() float64 { return float64(s.inflight.Load()) })
}

// OpenConnections is the number of connections open now.
func (s *Server) OpenConnections() int64 { return s.openConns.Load() }

// acceptLoop accepts until the listener is closed (Shutdown).
func (s *Server) acceptLoop(ln net.Listener) {
	reserve, _ := os.Open(os.DevNull)
	defer func() {
		if reserve != nil {
			reserve.Close()
		}
	}()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err == nil {
			if _, err = s.cli.Enroll(c); err == nil { // Enroll closes c: the loop holds a duplicate
				delay = 0
				continue
			}
			// The duplicate could not be made (out of descriptors too) or
			// the loops are stopping; c is closed, the client sees it.
		}
		if s.stopping.Load() || errors.Is(err, net.ErrClosed) {
			return
		}
		s.acceptFailed(err)
		if outOfDescriptors(err) && reserve != nil {
			// The spare-descriptor trick: give back the reserve, take the
			// connection waiting in the backlog and close it, so that its
			// client learns at once instead of hanging until we resume.
			reserve.Close()
			shedPending(ln)
			reserve, _ = os.Open(os.DevNull)
		}
		delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
		s.tm.acceptPaused.Store(true)
		select {
		case <-time.After(delay):
		case <-s.quit:
		}
		s.tm.acceptPaused.Store(false)
	}
}

// shedPending accepts one waiting connection, if any comes within a
// millisecond, and closes it.
func shedPending(ln net.Listener) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return
	}
	_ = tl.SetDeadline(time.Now().Add(time.Millisecond))
	if c, err := tl.Accept(); err == nil {
		c.Close()
	}
	_ = tl.SetDeadline(time.Time{})
}

// outOfDescriptors reports the errors that mean "no descriptor or buffer
// for a new socket now": the process's or the system's limit, or memory.
func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
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
	s.cfg.Logger.Warn("accepting connections failed; pausing and retrying (connections already open are served)",
		"err", err, "errors", n, "openConnections", s.openConns.Load())
}
