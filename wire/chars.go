package wire

// Byte classes of RFC 9110 / RFC 9112, as lookup tables so the hot loops
// test one byte with one load.
var (
	// tchar: the characters of a token (method, header name).
	isTchar [256]bool
	// field-value characters: VCHAR, obs-text, SP and HTAB. CR, LF, NUL and
	// the other controls are refused (RFC 9110 5.5 lets a recipient reject
	// them, and a smuggler needs them).
	isFieldValue [256]bool
	// request-target characters we accept: visible ASCII except '#', plus
	// obs-text (raw UTF-8 that a lenient client did not escape; the names
	// are validated as UTF-8 later anyway).
	isTarget [256]bool
	// hex digit values, -1 for non-digits.
	hexVal [256]int8
)

func init() {
	for c := 0; c < 256; c++ {
		b := byte(c)
		isTchar[c] = b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' ||
			b != 0 && indexByte("!#$%&'*+-.^_`|~", b) >= 0
		isFieldValue[c] = b == ' ' || b == '\t' || b > 0x20 && b != 0x7f
		isTarget[c] = b > 0x20 && b != 0x7f && b != '#'
		hexVal[c] = -1
		switch {
		case b >= '0' && b <= '9':
			hexVal[c] = int8(b - '0')
		case b >= 'a' && b <= 'f':
			hexVal[c] = int8(b - 'a' + 10)
		case b >= 'A' && b <= 'F':
			hexVal[c] = int8(b - 'A' + 10)
		}
	}
}

func indexByte(s string, b byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return -1
}

// equalFold reports whether b equals the lower-case ASCII string lower,
// ignoring ASCII case in b.
func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// hasPrefixFold is equalFold for a prefix.
func hasPrefixFold(b []byte, lower string) bool {
	return len(b) >= len(lower) && equalFold(b[:len(lower)], lower)
}
