package client

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// sharedConn pipelines short calls (never a waiting pop) on one
// connection. Callers append their request to wbuf and wake the writer
// goroutine, which writes everything appended until it finds wbuf empty:
// calls issued together (a responder's replies to a batch) leave in one
// write. Writing from the caller's goroutine instead cost a write per call
// there, because each caller found the previous write already done (the
// pattern nats.go's flusher avoids the same way). One reader goroutine
// reads the answers and matches them to the calls in FIFO order (ring).
//
// Invariants: ring holds exactly the calls written or being written and
// not yet answered, in write order; a call enters ring in the same
// critical section that appends its bytes to wbuf; only the reader
// completes calls; once dead is set no call enters, and the reader fails
// every call still in ring. The read deadline is the oldest call's
// deadline, or idleTimeout from now when nothing is in flight.
type sharedConn struct {
	w *wireConn
	// pending counts calls reserved on or in flight on the connection;
	// pool.pickShared raises it (under pool.mu), the reader lowers it.
	pending atomic.Int32

	mu          sync.Mutex
	ring        [maxPipeline]*call
	head, n     int
	wbuf, spare []byte
	writing     bool          // the writer was woken and has not yet found wbuf empty
	dead        bool          // set once, with kick closed (markDead)
	kick        chan struct{} // wakes the writer; closed when the connection dies
}

func newSharedConn(w *wireConn) *sharedConn {
	s := &sharedConn{w: w, kick: make(chan struct{}, 1)}
	_ = w.nc.SetReadDeadline(time.Now().Add(idleTimeout))
	return s
}

// send queues c (a slot was reserved by pickShared) and makes sure it is
// written. It answers false when the connection is dead: c was not
// written, the caller still owns it.
func (s *sharedConn) send(p *pool, c *call) bool {
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		s.pending.Add(-1)
		return false
	}
	s.ring[(s.head+s.n)%maxPipeline] = c
	s.n++
	if s.n == 1 {
		_ = s.w.nc.SetReadDeadline(c.deadline)
	}
	s.wbuf = appendRequest(s.wbuf, c.method, p.prefix, c.target, p.head, c.authLine(), c.body, c.hasBody)
	if !s.writing {
		s.writing = true
		s.kick <- struct{}{} // never blocks: only a writing=false -> true change sends
	}
	s.mu.Unlock()
	return true
}

// writeLoop writes what callers append until the connection dies.
func (s *sharedConn) writeLoop() {
	for range s.kick {
		// Let the callers that are ready to run append first: the replies
		// to a batch are issued by goroutines started together, and one
		// yield lets them leave in one write rather than one each.
		runtime.Gosched()
		s.mu.Lock()
		for len(s.wbuf) > 0 && !s.dead {
			buf := s.wbuf
			s.wbuf = s.spare[:0]
			s.mu.Unlock()
			_, err := s.w.nc.Write(buf)
			s.mu.Lock()
			s.spare = buf[:0]
			if err != nil {
				s.wbuf = s.wbuf[:0]
				s.markDead()
			}
		}
		s.writing = false
		dead := s.dead
		s.mu.Unlock()
		if dead {
			_ = s.w.nc.Close() // the reader fails every call in ring
		}
	}
}

// markDead (under mu) ends the connection for callers: no call enters it
// any more, and the writer stops.
func (s *sharedConn) markDead() {
	if !s.dead {
		s.dead = true
		close(s.kick)
	}
}

// readLoop reads answers until the connection fails, is closed by the
// server, or idles out.
func (s *sharedConn) readLoop(p *pool) {
	for {
		if _, err := s.w.br.Peek(1); err != nil {
			if isTimeout(err) {
				s.mu.Lock()
				if s.n == 0 {
					s.markDead() // idle too long
					s.mu.Unlock()
					s.fail(p, err, false)
					return
				}
				if d := s.ring[s.head].deadline; !d.IsZero() && time.Now().Before(d) {
					// The deadline was the idle one, moved by a send
					// just after it fired.
					_ = s.w.nc.SetReadDeadline(d)
					s.mu.Unlock()
					continue
				}
				s.mu.Unlock()
				err = fmt.Errorf("no answer within the timeout: %w", err)
			}
			s.fail(p, err, false)
			return
		}
		s.mu.Lock()
		if s.n == 0 {
			s.mu.Unlock()
			s.fail(p, fmt.Errorf("%w: an answer to no request", errFraming), false)
			return
		}
		c := s.ring[s.head]
		s.mu.Unlock()
		ans, body, err := s.w.readAnswer(c.resp)
		c.resp = body
		if err != nil {
			s.fail(p, err, true)
			return
		}
		c.ans = ans
		s.mu.Lock()
		s.ring[s.head] = nil
		s.head = (s.head + 1) % maxPipeline
		s.n--
		if ans.close {
			s.markDead()
		} else if s.n > 0 {
			_ = s.w.nc.SetReadDeadline(s.ring[s.head].deadline)
		} else {
			_ = s.w.nc.SetReadDeadline(time.Now().Add(idleTimeout))
		}
		s.mu.Unlock()
		s.pending.Add(-1)
		complete(c, nil)
		if ans.close {
			s.fail(p, errServerClosed, false)
			return
		}
		if p.closing.Load() && s.quiesce(p) {
			return
		}
	}
}

// fail ends the connection: it leaves the pool, and every call in flight
// is completed with err classified by the retry rule (headStarted: some of
// the oldest call's answer had arrived).
func (s *sharedConn) fail(p *pool, err error, headStarted bool) {
	s.mu.Lock()
	s.markDead()
	calls := make([]*call, 0, s.n)
	for s.n > 0 {
		calls = append(calls, s.ring[s.head])
		s.ring[s.head] = nil
		s.head = (s.head + 1) % maxPipeline
		s.n--
	}
	s.mu.Unlock()
	p.removeShared(s)
	_ = s.w.nc.Close()
	for i, c := range calls {
		s.pending.Add(-1)
		if errors.Is(err, errServerClosed) {
			complete(c, &connError{err: err, retry: true, unsent: true})
			continue
		}
		complete(c, ioFailure(c, err, i == 0 && headStarted))
	}
}

// quiesce ends the connection if nothing is reserved on or in flight on it
// (after Close), answering whether it did. Holding pool.mu keeps pickShared
// from reserving on it meanwhile.
func (s *sharedConn) quiesce(p *pool) bool {
	p.mu.Lock()
	if s.pending.Load() != 0 {
		p.mu.Unlock()
		return false
	}
	for i, x := range p.shared {
		if x == s {
			p.shared = append(p.shared[:i], p.shared[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	s.shut()
	return true
}

// shut closes a connection nothing is using (Close, closeIdle).
func (s *sharedConn) shut() {
	s.mu.Lock()
	s.markDead()
	s.mu.Unlock()
	_ = s.w.nc.Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
