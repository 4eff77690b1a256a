package wire

// Percent-decoding of the request target (RFC 3986 2.1). The parser refuses
// a target with a malformed escape up front, so that decoding a value of a
// parsed request cannot fail.

// badEscape returns the index of the first '%' in src that is not followed
// by two hex digits, or -1.
func badEscape(src []byte) int {
	for i := 0; i < len(src); i++ {
		if src[i] != '%' {
			continue
		}
		if i+2 >= len(src) || hexVal[src[i+1]] < 0 || hexVal[src[i+2]] < 0 {
			return i
		}
		i += 2
	}
	return -1
}

// needsUnescape reports whether src holds anything that decoding changes.
func needsUnescape(src []byte, plusSpace bool) bool {
	for _, c := range src {
		if c == '%' || plusSpace && c == '+' {
			return true
		}
	}
	return false
}

// unescapeInto decodes src into dst, which must have room for len(src)
// bytes (decoding never lengthens), and returns the count written. A '%'
// that is not a valid escape is copied as it is (the parser has refused
// such targets already; this keeps the function total).
func unescapeInto(dst, src []byte, plusSpace bool) int {
	n := 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '%' && i+2 < len(src) && hexVal[src[i+1]] >= 0 && hexVal[src[i+2]] >= 0:
			c = byte(hexVal[src[i+1]])<<4 | byte(hexVal[src[i+2]])
			i += 2
		case c == '+' && plusSpace:
			c = ' '
		}
		dst[n] = c
		n++
	}
	return n
}

// unescape returns src decoded: src itself when nothing needs decoding (no
// allocation, the common case), else a slice of the arena.
func unescape(s *scratch, src []byte, plusSpace bool) []byte {
	if !needsUnescape(src, plusSpace) {
		return src
	}
	dst := s.take(len(src))
	n := unescapeInto(dst, src, plusSpace)
	s.trim(dst, n)
	return dst[:n]
}

// NextSegment splits a path that starts with '/' into its first segment
// (still percent-encoded) and the rest, which starts with '/' or is empty.
// ok is false when path does not start with '/'. Decode a segment with
// Request.PathUnescape: segments are split before decoding, so an escaped
// "%2F" stays inside its segment (a queue may be named "a/b").
func NextSegment(path []byte) (seg, rest []byte, ok bool) {
	if len(path) == 0 || path[0] != '/' {
		return nil, nil, false
	}
	path = path[1:]
	for i, c := range path {
		if c == '/' {
			return path[:i], path[i:], true
		}
	}
	return path, nil, true
}
