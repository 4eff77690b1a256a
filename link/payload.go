package link

import (
	"io"
	"slices"
)

// payloadStep: a payload up to this is read into a buffer of its whole
// length at once; a longer one into a buffer that grows as its bytes
// arrive (readPayload).
const payloadStep = 1 << 20

// readPayload reads an n-byte payload from r into buf's array when it is
// large enough, else into a new one, and returns it. A payload over
// payloadStep grows its buffer from payloadStep, doubling as its bytes
// arrive, so that a peer declaring a long frame and sending little makes
// the reader hold at most about twice what it sent, not the declared
// length. arrived, when not nil, is called after each read that brought
// bytes: a long payload still arriving is a peer still heard (Mux's ping
// timeout).
func readPayload(r io.Reader, n int, buf []byte, arrived func()) ([]byte, error) {
	p := buf[:0]
	if cap(p) < min(n, payloadStep) {
		p = make([]byte, 0, min(n, payloadStep))
	}
	for len(p) < n {
		if len(p) == cap(p) {
			p = slices.Grow(p, min(len(p), n-len(p)))
		}
		k, err := r.Read(p[len(p):min(cap(p), n)])
		p = p[:len(p)+k]
		if k > 0 && arrived != nil {
			arrived()
		}
		if err != nil && len(p) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return p, nil
}
