package bench

// Payloads are JSON strings of exactly Size bytes, quotes included, so that
// the broker (which stores JSON verbatim) and the peers (which store bytes)
// carry the same bytes: "t<16 hex digits of now()>xxxx...". The timestamp is
// what end-to-end latency is measured from.

const hexDigits = "0123456789abcdef"

// stamp appends a payload of size bytes carrying ts.
func stamp(dst []byte, size int, ts int64) []byte {
	dst = append(dst, '"', 't')
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(ts>>shift)&0xf])
	}
	for range size - 19 {
		dst = append(dst, 'x')
	}
	return append(dst, '"')
}

// readStamp reads the timestamp of a payload stamp made.
func readStamp(p []byte) (int64, bool) {
	if len(p) < 19 || p[0] != '"' || p[1] != 't' {
		return 0, false
	}
	var ts int64
	for _, c := range p[2:18] {
		switch {
		case '0' <= c && c <= '9':
			ts = ts<<4 | int64(c-'0')
		case 'a' <= c && c <= 'f':
			ts = ts<<4 | int64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return ts, true
}
