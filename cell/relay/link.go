package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// link is one authenticated connection as both ends use it: a reader
// goroutine that hands every frame to dispatch, and a writer goroutine
// that takes everything queued since its last write and sends it with one
// writev, small frames copied together, large payloads referenced.
//
// While the reader dispatches frames it already holds in its buffer
// (holding), what is queued waits; once its buffer holds no whole frame the
// reader writes the queue itself when nobody is writing. On the owner the
// handler answers on the reader, so a batch of relayed requests read with
// one read is answered with one writev and no wake-up of the writer
// goroutine (docs/cell-relay.md, "Performance"); the writer stays for what
// is queued from elsewhere (parked pops answered later, the landing
// member's event loops).
type link struct {
	nc       net.Conn
	raw      syscall.RawConn // nc's, for sendNow's non-blocking write; nil when nc has none
	maxFrame int
	dispatch func(typ byte, id uint64, p []byte)
	onClose  func(error)

	mu      sync.Mutex
	q       []outFrame // frames waiting for the writer
	spare   []outFrame // the writer's previous batch, reused
	closed  bool
	err     error
	writing bool // a batch is being written (by the writer or the reader)
	holding bool // the reader is dispatching buffered frames: it flushes after

	// The buffers of whoever is writing (writing is set).
	wbuf []byte
	bufs net.Buffers

	wake     chan struct{} // capacity 1: "the queue is not empty"
	done     chan struct{} // closed by close
	lastRecv atomic.Int64  // unix nanos of the last frame read
}

// outFrame is a frame to write: hdr (when withHdr) followed by p. A request
// is encoded whole into p; an answer is a header and the handler's bytes,
// never copied when large.
type outFrame struct {
	hdr     [hdrLen]byte
	withHdr bool
	p       []byte
}

const (
	readBufSize = 64 << 10
	copyMax     = 16 << 10 // payloads up to this are copied into the write buffer
	keepWBuf    = 1 << 20  // a write buffer grown past this is not kept
)

var (
	errFrameTooLarge = errors.New("relay: frame over the limit")
	errProtocol      = errors.New("relay: protocol error")
)

func newLink(nc net.Conn, maxFrame int) *link {
	l := &link{nc: nc, maxFrame: maxFrame, wake: make(chan struct{}, 1), done: make(chan struct{})}
	l.lastRecv.Store(time.Now().UnixNano())
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			l.raw = raw
		}
	}
	return l
}

// run starts the reader and the writer on wg.
func (l *link) run(wg *sync.WaitGroup) {
	wg.Add(2)
	go func() { defer wg.Done(); l.readLoop() }()
	go func() { defer wg.Done(); l.writeLoop() }()
}

// send queues f; false when the link is closed (f is dropped).
func (l *link) send(f outFrame) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.q = append(l.q, f)
	wake := len(l.q) == 1 && !l.writing && !l.holding
	l.mu.Unlock()
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// sendCtl queues a frame without payload.
func (l *link) sendCtl(typ byte, id uint64, p []byte) bool {
	f := outFrame{withHdr: true, p: p}
	putHdr(f.hdr[:], typ, id, len(p))
	return l.send(f)
}

func (l *link) writeLoop() {
	for {
		select {
		case <-l.wake:
		case <-l.done:
			return
		}
		l.mu.Lock()
		if l.writing || l.holding || len(l.q) == 0 {
			// The reader writes (or will): it wakes us if more is left.
			l.mu.Unlock()
			continue
		}
		q := l.take()
		l.mu.Unlock()
		if !l.writeBatch(q) {
			return
		}
	}
}

// take hands the queue to the caller, who becomes the writer; l.mu held.
func (l *link) take() []outFrame {
	q := l.q
	l.q, l.spare = l.spare[:0], nil
	l.writing = true
	return q
}

// writeBatch writes q with one writev and gives up the writer's role,
// waking the writer goroutine for what was queued meanwhile; false when
// the write failed (the link is closed).
func (l *link) writeBatch(q []outFrame) bool {
	wbuf, bufs := l.wbuf[:0], l.bufs[:0]
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
	l.wbuf, l.bufs = wbuf, bufs[:0]
	l.mu.Lock()
	l.writing = false
	if l.spare == nil {
		l.spare = q[:0]
	}
	wake := len(l.q) > 0 && !l.holding
	l.mu.Unlock()
	if err != nil {
		l.close(err)
		return false
	}
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// hold makes sends wait for the reader's flush.
func (l *link) hold() {
	l.mu.Lock()
	l.holding = true
	l.mu.Unlock()
}

// flush ends holding: the reader writes what was queued meanwhile itself,
// unless a write is under way (whose end wakes the writer for it). False
// when the write failed.
func (l *link) flush() bool {
	l.mu.Lock()
	l.holding = false
	if l.writing || l.closed || len(l.q) == 0 {
		l.mu.Unlock()
		return true
	}
	q := l.take()
	l.mu.Unlock()
	return l.writeBatch(q)
}

// wholeFrameBuffered reports whether br holds a whole frame, so that
// reading it will not block.
func wholeFrameBuffered(br *bufio.Reader) bool {
	if br.Buffered() < hdrLen {
		return false
	}
	h, _ := br.Peek(hdrLen)
	return br.Buffered()-hdrLen >= int(binary.BigEndian.Uint32(h[0:4]))
}

func (l *link) readLoop() {
	br := bufio.NewReaderSize(l.nc, readBufSize)
	var h [hdrLen]byte
	holding := false
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			l.close(err)
			return
		}
		n := binary.BigEndian.Uint32(h[0:4])
		if uint64(n) > uint64(l.maxFrame) {
			l.close(errFrameTooLarge)
			return
		}
		var p []byte
		if n > 0 {
			p = make([]byte, n)
			if _, err := io.ReadFull(br, p); err != nil {
				l.close(err)
				return
			}
		}
		l.lastRecv.Store(time.Now().UnixNano())
		if !holding {
			l.hold()
			holding = true
		}
		l.dispatch(h[4], binary.BigEndian.Uint64(h[5:13]), p)
		if !wholeFrameBuffered(br) {
			holding = false
			if !l.flush() {
				return
			}
		}
	}
}

// close ends the link once: queued frames are dropped, both goroutines
// stop, and onClose learns why.
func (l *link) close(err error) {
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

func (l *link) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
