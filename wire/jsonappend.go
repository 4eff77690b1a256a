package wire

import (
	"strconv"
	"unicode/utf8"
)

// JSON output by appending to a caller's buffer. Names and ids are UTF-8
// without control characters by the time they are written (D10), but they
// may hold quotes and backslashes, and the writer does not rely on the
// callers' checks: it escapes everything JSON requires and replaces
// invalid UTF-8 with U+FFFD, so the output is always valid JSON.

// jsonSafe marks the ASCII bytes that appear in a JSON string as they are.
var jsonSafe [utf8.RuneSelf]bool

func init() {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		jsonSafe[c] = c != '"' && c != '\\'
	}
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string, quotes included.
func AppendString(dst []byte, s string) []byte { return appendString(dst, s) }

// AppendStringBytes is AppendString for a byte slice.
func AppendStringBytes(dst []byte, s []byte) []byte { return appendString(dst, s) }

func appendString[T string | []byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) && plain8(load8(s, i)) {
			i += 8
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		size := runeLen(s[i:])
		if size == 0 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// StringLen returns len(AppendString(nil, s)) without writing, so that a
// response's Content-Length can be known before its body is written.
func StringLen[T string | []byte](s T) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case jsonSafe[c]:
				n++
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			default:
				n += 6
			}
			i++
			continue
		}
		size := runeLen(s[i:])
		if size == 0 {
			n += 6
			i++
			continue
		}
		n += size
		i += size
	}
	return n
}

// AppendInt appends a JSON integer.
func AppendInt(dst []byte, v int64) []byte { return strconv.AppendInt(dst, v, 10) }

// AppendUint appends a JSON non-negative integer.
func AppendUint(dst []byte, v uint64) []byte { return strconv.AppendUint(dst, v, 10) }

// AppendBool appends true or false.
func AppendBool(dst []byte, v bool) []byte { return strconv.AppendBool(dst, v) }

// AppendKey appends "key": (the key escaped, the colon included).
func AppendKey(dst []byte, key string) []byte {
	return append(appendString(dst, key), ':')
}

// AppendRaw appends JSON that is already encoded (a payload as it was
// pushed, options as they were sent) verbatim: the broker never re-encodes
// a payload (P2).
func AppendRaw(dst, raw []byte) []byte { return append(dst, raw...) }

// IntLen returns the number of bytes AppendInt writes for v.
func IntLen(v int64) int {
	n := 1
	if v < 0 {
		n++
		if v == -v { // math.MinInt64
			return 20
		}
		v = -v
	}
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}
