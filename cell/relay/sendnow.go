package relay

import (
	"errors"
	"syscall"
)

// sendNow is send, but when nothing is queued or being written it writes f
// on the caller's goroutine with one non-blocking write, saving the wake-up
// of the writer goroutine (and its latency) on a relayed request's path:
// the landing member's event loop writes the request frame itself, an
// owner's loop answering a parked relayed pop writes the answer itself. A
// socket that does not take all of it (EAGAIN or a short write) leaves the
// rest queued for the writer, so the caller never waits (P1). False when
// the link is closed (f is dropped), as send.
func (l *link) sendNow(f outFrame) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	if l.raw == nil || l.writing || l.holding || len(l.q) > 0 {
		l.mu.Unlock()
		return l.send(f)
	}
	l.writing = true
	l.mu.Unlock()

	b := f.p
	if f.withHdr {
		b = append(append(l.wbuf[:0], f.hdr[:]...), f.p...)
		l.wbuf = b[:0]
	}
	n, err := l.writeNonBlocking(b)
	if err != nil {
		l.mu.Lock()
		l.writing = false
		l.mu.Unlock()
		l.close(err)
		return true // it was taken: the link's end fails the calls on it
	}
	l.mu.Lock()
	l.writing = false
	if n < len(b) {
		rest := b[n:]
		if f.withHdr {
			rest = append([]byte(nil), rest...) // b is l.wbuf, reused
		}
		l.q = append(l.q, outFrame{})
		copy(l.q[1:], l.q)
		l.q[0] = outFrame{p: rest}
	}
	wake := len(l.q) > 0 && !l.holding
	l.mu.Unlock()
	if wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// writeNonBlocking writes what the socket takes now; EAGAIN and EINTR are
// a short write, not an error.
func (l *link) writeNonBlocking(b []byte) (int, error) {
	var n int
	var werr error
	err := l.raw.Write(func(fd uintptr) bool {
		n, werr = syscall.Write(int(fd), b)
		return true
	})
	if err != nil {
		return 0, err
	}
	if werr != nil {
		if errors.Is(werr, syscall.EAGAIN) || errors.Is(werr, syscall.EINTR) {
			return 0, nil
		}
		return 0, werr
	}
	return max(n, 0), nil
}
