package wire

// scratch is an append-only byte arena for decoded strings (percent-decoded
// query values, JSON strings with escapes). A slice it hands out never moves:
// when the arena is full a new backing array is started and the old one
// stays alive for as long as earlier slices point into it. After a warm-up
// the arena is big enough and nothing allocates.
type scratch struct{ buf []byte }

// retainScratch is the largest arena kept between requests; a bigger one
// (a single huge escaped body) is dropped so that an idle connection does
// not pin it.
const retainScratch = 64 << 10

func (s *scratch) reset() {
	if cap(s.buf) > retainScratch {
		s.buf = nil
		return
	}
	s.buf = s.buf[:0]
}

// take returns n bytes of the arena for the caller to fill; give back what
// it did not use with trim.
func (s *scratch) take(n int) []byte {
	if cap(s.buf)-len(s.buf) < n {
		s.buf = make([]byte, 0, max(2*cap(s.buf), n, 256))
	}
	start := len(s.buf)
	s.buf = s.buf[:start+n]
	return s.buf[start : start+n : start+n]
}

// trim returns the unused tail of the last take (of which used bytes were
// filled) to the arena.
func (s *scratch) trim(taken []byte, used int) {
	s.buf = s.buf[:len(s.buf)-len(taken)+used]
}
