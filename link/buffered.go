package link

// Buffered is a connection's inbound buffer as an event loop offers it
// (gnet.Conn has both methods): the broker's links and the gateway's read
// frames out of it in place.
type Buffered interface {
	Peek(n int) ([]byte, error)
	InboundBuffered() int
}

// NextFrame finds the next whole frame buffered in c: its type, stream id
// and payload (a view of c's buffer, valid until discarded) and size, the
// bytes to discard once it has been acted on. ok is false while the frame
// is not whole yet. err is ErrFrameTooLong for a frame declared longer
// than limit: the connection must be closed (its next frame is unknown).
func NextFrame(c Buffered, limit int) (typ byte, id uint64, p []byte, size int, ok bool, err error) {
	hdr, _ := c.Peek(HeaderLen)
	if len(hdr) < HeaderLen {
		return 0, 0, nil, 0, false, nil
	}
	typ, id, n := ParseHeader(hdr)
	if n > limit {
		return 0, 0, nil, 0, false, ErrFrameTooLong
	}
	if c.InboundBuffered() < HeaderLen+n {
		return 0, 0, nil, 0, false, nil
	}
	frame, _ := c.Peek(HeaderLen + n)
	return typ, id, frame[HeaderLen:], HeaderLen + n, true, nil
}
