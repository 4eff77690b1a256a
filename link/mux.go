package link

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Caller waits for the end of one stream of a Mux. Exactly one of its
// methods is called, once, unless Cancel took the stream back first.
// Both run on the Mux's reader goroutine (Ended also on whoever closes the
// Mux) and must not block.
type Caller interface {
	// Answered gets the answer frame's payload: the whole HTTP answer. p
	// is valid only during the call: copy what is kept.
	Answered(p []byte)
	// Ended reports a stream that ended without an answer; err is a
	// *StreamError.
	Ended(err error)
}

// StreamError ends a stream without an answer. Served applies the one rule
// (lost.go): the request may have been served, and must not be sent again
// by itself. Busy: the server refused it for its bound on streams in
// flight; it was not served and may be sent again after a pause. Reason
// is the refuse frame's reason byte (0: the stream was not refused, the
// Mux ended).
type StreamError struct {
	Served bool
	Busy   bool
	Reason byte
	Cause  error
}

func (e *StreamError) Error() string {
	if e.Served {
		return "the link lost the answer (the request may have been served): " + e.Cause.Error()
	}
	return "the request was not served: " + e.Cause.Error()
}

func (e *StreamError) Unwrap() error { return e.Cause }

// Why a stream or a Mux ends.
var (
	ErrClosed       = errors.New("link: closed")
	ErrRefused      = errors.New("link: the server refused the stream")
	ErrSilent       = errors.New("link: the server answered no ping within the ping timeout")
	ErrProtocol     = errors.New("link: protocol error")
	ErrFrameTooLong = errors.New("link: frame over the limit")
)

// MuxConfig configures a Mux. Zero values take the defaults.
type MuxConfig struct {
	// MaxFrame bounds a frame read (default MaxFrame).
	MaxFrame int
	// PingInterval: a ping is sent this often (default 30 s, a quarter of
	// the broker's idle timeout); PingTimeout: a Mux that has read nothing
	// for this long is closed (default 65 s: two pings unanswered).
	PingInterval, PingTimeout time.Duration
}

// Mux is the client's end of a link: calls from any goroutine share one
// connection, each on a stream of its own. A writer goroutine takes every
// frame queued since its last write and sends them in one write, so calls
// started together leave together; a reader goroutine hands each answer
// to its Caller. A call in flight costs a map entry, never a goroutine.
//
// Invariants (mu): a stream is in streams from Start until its Caller is
// called or Cancel takes it; streams below written had their frame taken
// by the writer (the server may have them); out holds the frames not yet
// taken; once err is set nothing is queued and streams is empty.
type Mux struct {
	nc  net.Conn
	br  *bufio.Reader
	cfg MuxConfig

	mu      sync.Mutex
	out     []byte
	spare   []byte
	held    int
	streams map[uint64]Caller
	next    uint64
	written uint64
	err     error
	drain   bool // close once streams is empty (CloseWhenIdle)

	wake     chan struct{} // capacity 1
	done     chan struct{}
	lastRecv atomic.Int64
	wg       sync.WaitGroup
}

const (
	defaultPingInterval = 30 * time.Second
	defaultPingTimeout  = 65 * time.Second
	readBufSize         = 64 << 10
	keepBuf             = 1 << 20 // a buffer grown past this is not kept
)

// NewMux starts a Mux on nc, a connection that speaks frames from now on.
// br, when not nil, is a reader over nc that may already hold bytes read
// past the upgrade's answer.
func NewMux(nc net.Conn, br *bufio.Reader, cfg MuxConfig) *Mux {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = MaxFrame
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = defaultPingInterval
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = defaultPingTimeout
	}
	if br == nil {
		br = bufio.NewReaderSize(nc, readBufSize)
	}
	m := &Mux{nc: nc, br: br, cfg: cfg, streams: map[uint64]Caller{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
	m.lastRecv.Store(time.Now().UnixNano())
	m.wg.Add(3)
	go func() { defer m.wg.Done(); m.readLoop() }()
	go func() { defer m.wg.Done(); m.writeLoop() }()
	go func() { defer m.wg.Done(); m.pingLoop() }()
	return m
}

// Start queues a request frame on a new stream for c and returns the
// stream's id. It fails with ErrClosed, having queued nothing, once the
// Mux has ended: the request was not sent.
func (m *Mux) Start(c Caller, method string, target, body []byte) (uint64, error) {
	r := Request{Method: []byte(method), Target: target, Body: body}
	return m.start(c, FrameRequest, &r, nil)
}

// StartRequest is Start for a whole Request, identity fields included
// (the cell's relay carries the identity the landing member established).
// A request that does not fit in a frame of MuxConfig.MaxFrame
// (Request.Fits) fails with ErrFrameTooLong, having queued nothing: the server would close the link
// on it. r's bytes are copied before it returns.
func (m *Mux) StartRequest(c Caller, r *Request) (uint64, error) {
	return m.start(c, FrameRequest, r, nil)
}

// SendToken queues a token frame (docs/link.md, "Token") on a new stream
// for c.
func (m *Mux) SendToken(c Caller, token []byte) (uint64, error) {
	return m.start(c, FrameToken, nil, token)
}

func (m *Mux) start(c Caller, typ byte, r *Request, p []byte) (uint64, error) {
	if r != nil && !r.Fits(m.cfg.MaxFrame) || len(p) > m.cfg.MaxFrame {
		return 0, ErrFrameTooLong
	}
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return 0, ErrClosed
	}
	id := m.next
	m.next++
	if r != nil {
		var err error
		if m.out, err = AppendRequest(m.out, id, r); err != nil {
			m.mu.Unlock()
			return 0, err
		}
	} else {
		m.out = AppendHeader(m.out, typ, id, len(p))
		m.out = append(m.out, p...)
	}
	m.streams[id] = c
	m.wakeLocked()
	m.mu.Unlock()
	return id, nil
}

// wakeLocked wakes the writer unless a Hold is in force. m.mu is held.
func (m *Mux) wakeLocked() {
	if m.held == 0 {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// Hold keeps the writer from writing until the matching Release, so that
// the frames started in between leave in one write (a request's push and
// its inbox's pop; a batch of replies and the next pop).
func (m *Mux) Hold() {
	m.mu.Lock()
	m.held++
	m.mu.Unlock()
}

// Release ends a Hold.
func (m *Mux) Release() {
	m.mu.Lock()
	m.held--
	if len(m.out) > 0 {
		m.wakeLocked()
	}
	m.mu.Unlock()
}

// Cancel takes stream id back from its Caller, which will not be called,
// and tells the server (a parked pop is let go). It reports false when the
// stream has already ended or is ending: its Caller is called or has been.
func (m *Mux) Cancel(id uint64) bool {
	cancelled, _ := m.CancelStream(id)
	return cancelled
}

// CancelStream is Cancel, and reports too whether the stream's frame had
// left: sent is false when the frame was still waiting for the writer (a
// Hold, or a write in progress), and is then taken out of the output
// rather than followed by a cancel frame, so that the server never sees
// the request: it was not served (lost.go).
func (m *Mux) CancelStream(id uint64) (cancelled, sent bool) {
	m.mu.Lock()
	if _, ok := m.streams[id]; !ok {
		m.mu.Unlock()
		return false, false
	}
	delete(m.streams, id)
	sent = id < m.written
	if sent || !m.unqueueLocked(id) {
		m.out = AppendHeader(m.out, FrameCancel, id, 0)
		m.wakeLocked()
	}
	m.closeIfDrainedLocked()
	m.mu.Unlock()
	return true, sent
}

// unqueueLocked takes the frame that opened stream id out of m.out, where
// the frames not yet written wait whole; false when it is not there. m.mu
// is held.
func (m *Mux) unqueueLocked(id uint64) bool {
	for off := 0; off+HeaderLen <= len(m.out); {
		typ, fid, n := ParseHeader(m.out[off:])
		end := off + HeaderLen + n
		if fid == id && (typ == FrameRequest || typ == FrameToken) {
			m.out = append(m.out[:off], m.out[end:]...)
			return true
		}
		off = end
	}
	return false
}

// Written reports whether stream id's frame was taken by the writer (the
// server may have it). A caller that cancels a stream learns it from
// CancelStream: a frame taken out of the output is never written, though
// Written reports true for it once the frames after it are.
func (m *Mux) Written(id uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return id < m.written
}

// InFlight is the number of streams waiting for their end.
func (m *Mux) InFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.streams)
}

// Err is why the Mux ended; nil while it serves.
func (m *Mux) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Done is closed when the Mux ends.
func (m *Mux) Done() <-chan struct{} { return m.done }

// Close ends the Mux: every stream in flight ends (Served for those whose
// frame was written), and Close waits for the Mux's goroutines.
func (m *Mux) Close() error {
	m.fail(ErrClosed)
	m.wg.Wait()
	return nil
}

// CloseWhenIdle closes the Mux now if no stream is in flight, else once
// the last one ends; nothing new may be started meanwhile.
func (m *Mux) CloseWhenIdle() {
	m.mu.Lock()
	m.drain = true
	idle := len(m.streams) == 0
	m.mu.Unlock()
	if idle {
		m.fail(ErrClosed)
	}
}

// closeIfDrainedLocked closes a draining Mux whose last stream ended (off
// the lock: fail takes it). m.mu is held.
func (m *Mux) closeIfDrainedLocked() {
	if m.drain && len(m.streams) == 0 && m.err == nil {
		go m.fail(ErrClosed)
	}
}

// fail ends the Mux once, and every stream in flight with it.
func (m *Mux) fail(err error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return
	}
	m.err = err
	streams, written := m.streams, m.written
	m.streams = map[uint64]Caller{}
	m.out = nil
	m.mu.Unlock()
	close(m.done)
	m.nc.Close()
	for id, c := range streams {
		c.Ended(&StreamError{Served: id < written, Cause: err})
	}
}

func (m *Mux) writeLoop() {
	for {
		select {
		case <-m.wake:
		case <-m.done:
			return
		}
		m.mu.Lock()
		if m.held > 0 || len(m.out) == 0 {
			m.mu.Unlock()
			continue // Release wakes it
		}
		buf := m.out
		m.out, m.spare = m.spare[:0], nil
		m.written = m.next
		m.mu.Unlock()
		_, err := m.nc.Write(buf)
		if cap(buf) > keepBuf {
			buf = nil
		}
		m.mu.Lock()
		m.spare = buf[:0]
		m.mu.Unlock()
		if err != nil {
			m.fail(err)
			return
		}
	}
}

// heard records that bytes arrived now: the ping timeout counts from the
// last, so a long frame still arriving keeps the link however long it
// takes, and one that stalls does not.
func (m *Mux) heard() { m.lastRecv.Store(time.Now().UnixNano()) }

// readLoop reads frames until the Mux ends. A payload that fits in the
// read buffer is handed out in place; a longer one is read into a buffer
// of the Mux's own, reused, grown as its bytes arrive (readPayload).
func (m *Mux) readLoop() {
	var h [HeaderLen]byte
	var big []byte
	for {
		if _, err := io.ReadFull(m.br, h[:]); err != nil {
			m.fail(err)
			return
		}
		typ, id, n := h[4], binary.BigEndian.Uint64(h[5:13]), int(binary.BigEndian.Uint32(h[0:4]))
		if n > m.cfg.MaxFrame {
			m.fail(ErrFrameTooLong)
			return
		}
		var p []byte
		inPlace := n <= m.br.Size()
		var err error
		if inPlace {
			p, err = m.br.Peek(n)
		} else {
			p, err = readPayload(m.br, n, big, m.heard)
			big = p
		}
		if err != nil {
			m.fail(err)
			return
		}
		m.heard()
		if !m.dispatch(typ, id, p) {
			m.fail(ErrProtocol)
			return
		}
		if inPlace {
			_, _ = m.br.Discard(n)
		} else if cap(big) > keepBuf {
			big = nil
		}
	}
}

// dispatch hands one frame to its stream's Caller; false for a frame a
// server does not send.
func (m *Mux) dispatch(typ byte, id uint64, p []byte) bool {
	switch typ {
	case FrameAnswer, FrameRefuse:
		m.mu.Lock()
		c, ok := m.streams[id]
		delete(m.streams, id)
		m.closeIfDrainedLocked()
		m.mu.Unlock()
		if !ok {
			return true // cancelled meanwhile
		}
		if typ == FrameAnswer {
			c.Answered(p)
		} else {
			var reason byte
			if len(p) == 1 {
				reason = p[0]
			}
			c.Ended(&StreamError{Served: RefusalServed(p), Busy: reason == RefuseBusy, Reason: reason, Cause: ErrRefused})
		}
	case FramePong:
	default:
		return false
	}
	return true
}

// pingLoop pings every PingInterval and ends the Mux when nothing has been
// read for PingTimeout.
func (m *Mux) pingLoop() {
	t := time.NewTicker(m.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-m.done:
			return
		case now := <-t.C:
			if now.UnixNano()-m.lastRecv.Load() > int64(m.cfg.PingTimeout) {
				m.fail(ErrSilent)
				return
			}
			m.mu.Lock()
			if m.err == nil {
				m.out = AppendHeader(m.out, FramePing, 0, 0)
				m.wakeLocked()
			}
			m.mu.Unlock()
		}
	}
}
