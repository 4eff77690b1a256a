package link

import "errors"

// Buffered is a connection's inbound buffer as an event loop offers it
// (gnet.Conn has these methods): the broker's links and the gateway's read
// frames out of it in place.
type Buffered interface {
	Peek(n int) ([]byte, error)
	Discard(n int) (int, error)
	InboundBuffered() int
}

// BigFrame: a frame declared longer than this whose bytes are still
// arriving is read into a buffer of its own, of exactly its length, as an
// HTTP body that long is (docs/server.md, request bodies). Left in the
// event loop's inbound buffer, it would grow that buffer by steps, each
// step a new allocation and a copy of all that arrived so far, on the loop
// every other connection of it waits on: three 60 MiB frames arriving at
// once held 384 MiB of buffers and stalled the loops' other requests by up
// to 300 ms (reliability/TestRelayPartialFrames). Read aside, each byte is
// copied once, and the memory is the frame's length.
const BigFrame = 64 << 10

// ErrNotHeld: FrameReader.Hold refused a big frame's length.
var ErrNotHeld = errors.New("link: the frame's length cannot be held")

// FrameReader reads one link's frames out of its event loop's buffer: a
// frame that is whole there is read in place (no allocation: the hot path
// of small frames), a big one still arriving is moved aside (BigFrame).
// Its zero value is ready; it belongs to one connection and one goroutine
// (the connection's loop).
type FrameReader struct {
	// Hold, if set, is asked before a big frame is read aside, with its
	// whole length: false refuses the frame (Next's ErrNotHeld). A link
	// whose memory is charged to a bound reserves it here, before anything
	// is allocated for it, as an HTTP body's length is held on its head.
	Hold func(n int) bool

	big  []byte // the start of a big frame read aside, header included; nil if none
	size int    // the buffered bytes the frame Next returned occupies (0: read aside)
}

// Next finds the next whole frame of c: its type, stream id and payload,
// valid until Done, which must be called once the frame has been acted on.
// ok is false while the frame is not whole yet. err is ErrFrameTooLong for
// a frame declared longer than limit, and ErrNotHeld, with the frame's type
// and stream, for a big one Hold refused: nothing of it has been read, and
// the connection must be closed or the frame's bytes skipped (its next
// frame is unknown otherwise).
func (r *FrameReader) Next(c Buffered, limit int) (typ byte, id uint64, p []byte, ok bool, err error) {
	if r.big != nil {
		if !r.fill(c) {
			return 0, 0, nil, false, nil
		}
		typ, id, _ = ParseHeader(r.big)
		r.size = 0
		return typ, id, r.big[HeaderLen:], true, nil
	}
	hdr, _ := c.Peek(HeaderLen)
	if len(hdr) < HeaderLen {
		return 0, 0, nil, false, nil
	}
	typ, id, n := ParseHeader(hdr)
	if n > limit {
		return 0, 0, nil, false, ErrFrameTooLong
	}
	buffered := c.InboundBuffered()
	if buffered < HeaderLen+n {
		if n > BigFrame {
			if r.Hold != nil && !r.Hold(HeaderLen+n) {
				return typ, id, nil, false, ErrNotHeld
			}
			r.big = make([]byte, 0, HeaderLen+n)
			r.fill(c)
		}
		return 0, 0, nil, false, nil
	}
	frame, _ := c.Peek(HeaderLen + n)
	r.size = HeaderLen + n
	return typ, id, frame[HeaderLen:], true, nil
}

// fill moves what c holds of the big frame into it; true once it is whole.
func (r *FrameReader) fill(c Buffered) bool {
	want := min(cap(r.big)-len(r.big), c.InboundBuffered())
	if want > 0 {
		b, _ := c.Peek(want)
		r.big = append(r.big, b...)
		_, _ = c.Discard(len(b))
	}
	return len(r.big) == cap(r.big)
}

// Done drops the frame Next returned from c: its payload is no longer valid.
func (r *FrameReader) Done(c Buffered) {
	if r.size == 0 {
		r.big = nil
		return
	}
	_, _ = c.Discard(r.size)
	r.size = 0
}

// Begun reports whether a frame is begun that is not whole yet: part of it
// buffered in c, or read aside.
func (r *FrameReader) Begun(c Buffered) bool {
	return r.big != nil || c.InboundBuffered() > 0
}

// Aside is the memory a big frame read aside holds (its whole length,
// allocated when it began), 0 if none.
func (r *FrameReader) Aside() int { return cap(r.big) }
