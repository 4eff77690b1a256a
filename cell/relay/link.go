package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// frameConn is one authenticated connection as both ends use it: a reader
// goroutine that hands every frame to dispatch, and a writer goroutine
// that takes everything queued since its last write and sends it with one
// writev, small frames copied together, large payloads referenced.
type frameConn struct {
	nc       net.Conn
	maxFrame int
	// silence: the link is closed when nothing has arrived for this long
	// (0: never, the client's pinger watches instead); frameTimeout: when a
	// frame, once its first bytes are in, is not whole within this long.
	silence, frameTimeout time.Duration
	dispatch              func(typ byte, id uint64, p []byte)
	onClose               func(error)

	mu     sync.Mutex
	q      []outFrame // frames waiting for the writer
	spare  []outFrame // the writer's previous batch, reused
	closed bool
	err    error

	wake     chan struct{} // capacity 1: "the queue is not empty"
	done     chan struct{} // closed by close
	lastRecv atomic.Int64  // unix nanos of the last frame read
}

// outFrame is a frame to write: hdr (when withHdr) followed by p. A request
// is encoded whole into p; an answer is a header and the handler's bytes,
// never copied when large.
type outFrame struct {
	hdr     [link.HeaderLen]byte
	withHdr bool
	p       []byte
}

const (
	readBufSize = 64 << 10
	copyMax     = 16 << 10 // payloads up to this are copied into the write buffer
	keepWBuf    = 1 << 20  // a write buffer grown past this is not kept
	// payloadStep: a payload up to this is allocated whole when its header
	// arrives; a larger one grows as its bytes arrive (readPayload).
	payloadStep = 1 << 20
)

var (
	errFrameTooLarge = errors.New("relay: frame over the limit")
	errProtocol      = errors.New("relay: protocol error")
	errSilent        = errors.New("relay: the peer sent nothing for the ping timeout")
	errFrameTimeout  = errors.New("relay: a frame did not complete within the frame timeout")
)

func newLink(nc net.Conn, maxFrame int, frameTimeout time.Duration) *frameConn {
	l := &frameConn{nc: nc, maxFrame: maxFrame, frameTimeout: frameTimeout, wake: make(chan struct{}, 1), done: make(chan struct{})}
	l.lastRecv.Store(time.Now().UnixNano())
	return l
}

// run starts the reader and the writer on wg.
func (l *frameConn) run(wg *sync.WaitGroup) {
	wg.Add(2)
	go func() { defer wg.Done(); l.readLoop() }()
	go func() { defer wg.Done(); l.writeLoop() }()
}

// send queues f; false when the link is closed (f is dropped).
func (l *frameConn) send(f outFrame) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.q = append(l.q, f)
	first := len(l.q) == 1
	l.mu.Unlock()
	if first {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// sendCtl queues a frame without payload.
func (l *frameConn) sendCtl(typ byte, id uint64, p []byte) bool {
	f := outFrame{withHdr: true, p: p}
	link.PutHeader(f.hdr[:], typ, id, len(p))
	return l.send(f)
}

func (l *frameConn) writeLoop() {
	var wbuf []byte
	var bufs net.Buffers
	for {
		select {
		case <-l.wake:
		case <-l.done:
			return
		}
		l.mu.Lock()
		q := l.q
		l.q, l.spare = l.spare[:0], nil
		l.mu.Unlock()

		wbuf, bufs = wbuf[:0], bufs[:0]
		start := 0
		for i := range q {
			f := &q[i]
			if f.withHdr {
				wbuf = append(wbuf, f.hdr[:]...)
			}
			if len(f.p) <= copyMax {
				wbuf = append(wbuf, f.p...)
				continue
			}
			// A slice taken before wbuf grows keeps the old array, which
			// still holds those bytes: appending never rewrites them.
			bufs = append(bufs, wbuf[start:], f.p)
			start = len(wbuf)
		}
		if start < len(wbuf) {
			bufs = append(bufs, wbuf[start:])
		}
		w := bufs
		_, err := w.WriteTo(l.nc)
		clear(q)
		clear(bufs)
		if cap(wbuf) > keepWBuf {
			wbuf = nil
		}
		l.mu.Lock()
		if l.spare == nil {
			l.spare = q[:0]
		}
		l.mu.Unlock()
		if err != nil {
			l.close(err)
			return
		}
	}
}

// readLoop reads frames until the link fails. Before a read that may
// block it sets the deadline that applies: the silence bound while waiting
// for a frame to begin, the frame timeout from then on (a peer that starts
// a frame and stalls is cut off, holding no more than it sent). A frame
// already buffered is read without touching the deadline.
func (l *frameConn) readLoop() {
	br := bufio.NewReaderSize(l.nc, readBufSize)
	var h [link.HeaderLen]byte
	deadline := false // a read deadline is set on nc
	for {
		if br.Buffered() == 0 {
			switch {
			case l.silence > 0:
				l.nc.SetReadDeadline(time.Now().Add(l.silence))
				deadline = true
			case deadline:
				l.nc.SetReadDeadline(time.Time{})
				deadline = false
			}
			if _, err := br.Peek(1); err != nil {
				l.close(timeoutAs(err, errSilent))
				return
			}
		}
		// The frame has begun: it must be whole within frameTimeout.
		framed := false
		if br.Buffered() < link.HeaderLen {
			l.nc.SetReadDeadline(time.Now().Add(l.frameTimeout))
			deadline, framed = true, true
		}
		if _, err := io.ReadFull(br, h[:]); err != nil {
			l.close(timeoutAs(err, errFrameTimeout))
			return
		}
		n := int(binary.BigEndian.Uint32(h[0:4]))
		if n > l.maxFrame {
			l.close(errFrameTooLarge)
			return
		}
		var p []byte
		if n > 0 {
			if !framed && br.Buffered() < n {
				l.nc.SetReadDeadline(time.Now().Add(l.frameTimeout))
				deadline = true
			}
			var err error
			if p, err = readPayload(br, n); err != nil {
				l.close(timeoutAs(err, errFrameTimeout))
				return
			}
		}
		l.lastRecv.Store(time.Now().UnixNano())
		l.dispatch(h[4], binary.BigEndian.Uint64(h[5:13]), p)
	}
}

// readPayload reads an n-byte payload into a buffer of its own. One up to
// payloadStep is allocated whole; a larger one starts at payloadStep and
// doubles as its bytes arrive, so that a peer declaring a large frame and
// sending little makes the link hold at most twice what it sent, not the
// declared length.
func readPayload(r io.Reader, n int) ([]byte, error) {
	if n <= payloadStep {
		p := make([]byte, n)
		_, err := io.ReadFull(r, p)
		return p, err
	}
	p := make([]byte, 0, payloadStep)
	for len(p) < n {
		if len(p) == cap(p) {
			p = slices.Grow(p, min(len(p), n-len(p)))
		}
		m, err := r.Read(p[len(p):min(cap(p), n)])
		p = p[:len(p)+m]
		if err != nil && len(p) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return p, nil
}

// timeoutAs names a read deadline's expiry as what it means here.
func timeoutAs(err, as error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return as
	}
	return err
}

// close ends the link once: queued frames are dropped, both goroutines
// stop, and onClose learns why.
func (l *frameConn) close(err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed, l.err = true, err
	clear(l.q)
	l.q = nil
	l.mu.Unlock()
	close(l.done)
	l.nc.Close()
	if l.onClose != nil {
		l.onClose(err)
	}
}

func (l *frameConn) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
