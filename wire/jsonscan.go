package wire

import (
	"fmt"
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// A small JSON scanner for the route bodies. The bodies have fixed, closed
// shapes, so instead of decoding into Go values we walk the text once,
// strictly (RFC 8259, and UTF-8 only), taking what we need as sub-slices:
// a payload is located, validated and left where it is (P2); a string is
// decoded only when it holds an escape. See decisions.md for why this is
// not goccy/go-json.

// maxDepth bounds how deeply a payload may nest; the walk is iterative, so
// this bounds a small bit stack, not the goroutine stack.
const maxDepth = 1024

// strPlain marks the bytes that stand for themselves inside a JSON string.
var strPlain [256]bool

func init() {
	for c := 0x20; c < 0x80; c++ {
		strPlain[c] = c != '"' && c != '\\'
	}
}

// scanner walks one JSON text. what names the body in messages ("push
// body"); code is the error code of its refusals.
type scanner struct {
	b       []byte
	i       int
	what    string
	code    string
	decoded *scratch // where unquote writes decoded strings (the body's arena)
}

// fail is a shape refusal about this body.
func (s *scanner) fail(format string, args ...any) *Error {
	return shapeError(s.code, format, args...)
}

// syntax is a refusal of text that is not JSON.
func (s *scanner) syntax(detail string) *Error {
	if s.i >= len(s.b) {
		return s.fail("the %s is not valid JSON: %s at the end of the body", s.what, detail)
	}
	return s.fail("the %s is not valid JSON: %s at byte %d", s.what, detail, s.i)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after whitespace, or 0 at the end (a NUL in
// the text is not JSON either, so no caller confuses the two; open and
// close, which must tell the end apart, test the position).
func (s *scanner) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// open starts the body: it must be one JSON object.
func (s *scanner) open() *Error {
	switch s.ws(); {
	case s.i == len(s.b):
		return s.fail("the %s is empty; expected a JSON object", s.what)
	case s.b[s.i] == '{':
		s.i++
		return nil
	}
	return s.fail("the %s must be a JSON object", s.what)
}

// close ends the body: nothing but whitespace may follow the object.
func (s *scanner) close() *Error {
	if s.ws(); s.i < len(s.b) {
		return s.syntax("data after the JSON object")
	}
	return nil
}

// body reads a whole body: one JSON object and nothing after it. For each
// member, in order, field gets the decoded key with the scanner at the
// value, which field must read; its refusal ends the body.
func (s *scanner) body(field func(key []byte) *Error) *Error {
	if err := s.open(); err != nil {
		return err
	}
	if err := s.fields(field); err != nil {
		return err
	}
	return s.close()
}

// fields reads the members of an object whose '{' has been read, through
// its '}', handing each key to field as body does.
func (s *scanner) fields(field func(key []byte) *Error) *Error {
	for n := 0; ; n++ {
		key, ok, err := s.member(n)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := field(key); err != nil {
			return err
		}
	}
}

// batch reads an array of at most MaxBatch items (push's messages, ack's
// acks), calling item for the n-th with the scanner at it.
func (s *scanner) batch(field string, item func(n int) *Error) *Error {
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return s.fail("%s must be an array, not %s", field, s.kind())
	}
	s.i++
	for n := 0; ; n++ {
		ok, err := s.element(n)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if n == MaxBatch {
			return s.fail("%s holds more than %d items; at most %d are allowed per call", field, MaxBatch, MaxBatch)
		}
		if err := item(n); err != nil {
			return err
		}
	}
}

// name reads the value of a name field (D10) into dst: queue must be a
// string; an optional one (partition, group) may also be null or "". field
// is a constant, so that reading allocates nothing.
func (s *scanner) name(field string, dst *[]byte, optional bool) *Error {
	v, _, err := s.str(field, optional)
	if err != nil {
		return err
	}
	*dst = v
	if optional {
		return checkOptionalName(field, v)
	}
	return CheckName(field, v)
}

// member advances to the n-th (from 0) member of an object whose '{' has
// been read and returns its key (decoded), positioned at the value. ok is
// false, with the '}' read, when the object is over.
func (s *scanner) member(n int) (key []byte, ok bool, err *Error) {
	c := s.peek()
	if c == '}' {
		s.i++
		return nil, false, nil
	}
	if n > 0 {
		if c != ',' {
			return nil, false, s.syntax("expected ',' or '}'")
		}
		s.i++
		c = s.peek()
	}
	if c != '"' {
		return nil, false, s.syntax("expected a string key")
	}
	if key, err = s.stringLit(); err != nil {
		return nil, false, err
	}
	if s.peek() != ':' {
		return nil, false, s.syntax("expected ':' after a key")
	}
	s.i++
	s.ws()
	return key, true, nil
}

// element advances to the n-th (from 0) element of an array whose '[' has
// been read; ok is false, with the ']' read, when the array is over.
func (s *scanner) element(n int) (ok bool, err *Error) {
	c := s.peek()
	if c == ']' {
		s.i++
		return false, nil
	}
	if n > 0 {
		if c != ',' {
			return false, s.syntax("expected ',' or ']'")
		}
		s.i++
		s.ws()
	}
	return true, nil
}

// once records that the key with the given bit has been read, refusing it
// the second time: a duplicate key means different things to different
// parsers, so a closed shape does not have one.
func (s *scanner) once(seen *uint16, bit uint16, key []byte) *Error {
	if *seen&bit != 0 {
		return s.fail("the %s has the key %s twice", s.what, quote(key))
	}
	*seen |= bit
	return nil
}

// kind names the JSON type of the value at the cursor, for messages.
func (s *scanner) kind() string {
	if s.i >= len(s.b) {
		return "nothing"
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	}
	return "not JSON"
}

// isNull consumes a null literal at the cursor and reports whether there
// was one.
func (s *scanner) isNull() bool {
	if s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// stringLit reads the string at the cursor (which is at '"') and returns
// its decoded contents: a sub-slice of the body when it has no escape.
func (s *scanner) stringLit() ([]byte, *Error) {
	raw, esc, err := s.rawString()
	if err != nil || !esc {
		return raw, err
	}
	return s.unquote(raw)
}

// str reads a string value for field, which must be a string (or, when
// nullable, null: then null is true).
func (s *scanner) str(field string, nullable bool) (v []byte, null bool, err *Error) {
	if s.i < len(s.b) && s.b[s.i] == '"' {
		v, err = s.stringLit()
		return v, false, err
	}
	if nullable && s.isNull() {
		return nil, true, nil
	}
	return nil, false, s.fail("%s must be a string, not %s", field, s.kind())
}

// uint reads a non-negative integer value for field: JSON digits only.
// A fraction, an exponent (1e3 too: integers are written as integers), a
// sign, a string or an out-of-range value is refused by name.
func (s *scanner) uint(field string, nullable bool) (v int64, null bool, err *Error) {
	if nullable && s.isNull() {
		return 0, true, nil
	}
	start := s.i
	if s.i >= len(s.b) || s.b[s.i] != '-' && (s.b[s.i] < '0' || s.b[s.i] > '9') {
		return 0, false, s.fail("%s must be a non-negative integer, not %s", field, s.kind())
	}
	plain, err := s.number()
	if err != nil {
		return 0, false, err
	}
	text := s.b[start:s.i]
	if !plain {
		return 0, false, s.fail("%s must be a non-negative integer, not %s", field, quote(text))
	}
	for _, c := range text {
		d := int64(c - '0')
		if v > (math.MaxInt64-d)/10 {
			return 0, false, s.fail("%s is too large: %s", field, quote(text))
		}
		v = v*10 + d
	}
	return v, false, nil
}

// bool reads a boolean value for field.
func (s *scanner) bool(field string) (bool, *Error) {
	switch {
	case s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "true":
		s.i += 4
		return true, nil
	case s.i+5 <= len(s.b) && string(s.b[s.i:s.i+5]) == "false":
		s.i += 5
		return false, nil
	}
	return false, s.fail("%s must be true or false, not %s", field, s.kind())
}

// rawString reads the string at s.b[s.i] == '"' and returns its raw
// contents (between the quotes) and whether it holds escapes. It checks
// escapes, refuses raw control characters and invalid UTF-8.
func (s *scanner) rawString() (raw []byte, esc bool, err *Error) {
	b := s.b
	i := s.i + 1
	start := i
	for {
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			s.i = i
			return nil, false, s.syntax("unterminated string")
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return b[start:i], esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				s.i = len(b)
				return nil, false, s.syntax("unterminated string")
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hexVal[b[i+2]] < 0 || hexVal[b[i+3]] < 0 || hexVal[b[i+4]] < 0 || hexVal[b[i+5]] < 0 {
					s.i = i
					return nil, false, s.syntax(`invalid \u escape`)
				}
				i += 6
			default:
				s.i = i
				return nil, false, s.syntax("invalid escape in a string")
			}
		case c < 0x20:
			s.i = i
			return nil, false, s.syntax("control character in a string (escape it)")
		default:
			n := runeLen(b[i:])
			if n == 0 {
				s.i = i
				return nil, false, s.syntax("invalid UTF-8 in a string")
			}
			i += n
		}
	}
}

// unquote decodes a raw string that rawString has checked into the scratch
// arena. A \u escape of a lone UTF-16 surrogate is refused: it has no UTF-8
// form, and the strings we decode are names and ids.
func (s *scanner) unquote(raw []byte) ([]byte, *Error) {
	dst := s.decoded.take(len(raw)) // decoding never lengthens
	n := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			dst[n] = c
			n++
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		case 'u':
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				var r2 rune = -1
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					r2 = hex4(raw[i+2:])
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					s.decoded.trim(dst, 0)
					return nil, s.fail("a string in the %s holds a lone UTF-16 surrogate escape", s.what)
				}
				i += 6
			}
			n += utf8.EncodeRune(dst[n:], r)
			continue
		default: // '"', '\\', '/'
			c = raw[i+1]
		}
		dst[n] = c
		n++
		i += 2
	}
	s.decoded.trim(dst, n)
	return dst[:n], nil
}

func hex4(b []byte) rune {
	return rune(hexVal[b[0]])<<12 | rune(hexVal[b[1]])<<8 | rune(hexVal[b[2]])<<4 | rune(hexVal[b[3]])
}

// number reads a number at the cursor (RFC 8259 6) and reports whether it
// is plain: digits only, no sign, fraction or exponent.
func (s *scanner) number() (plain bool, err *Error) {
	b, i := s.b, s.i
	plain = true
	if i < len(b) && b[i] == '-' {
		plain = false
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		s.i = i
		return false, s.syntax("invalid number")
	}
	if i < len(b) && b[i] == '.' {
		plain = false
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			s.i = i
			return false, s.syntax("invalid number")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		plain = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			s.i = i
			return false, s.syntax("invalid number")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	s.i = i
	return plain, nil
}

// literal reads true, false or null at the cursor.
func (s *scanner) literal() *Error {
	for _, lit := range [...]string{"true", "false", "null"} {
		if s.i+len(lit) <= len(s.b) && string(s.b[s.i:s.i+len(lit)]) == lit {
			s.i += len(lit)
			return nil
		}
	}
	return s.syntax("invalid literal")
}

// skipValue checks the JSON value at the cursor and moves past it, without
// decoding anything. It is iterative: depth lives in a bit stack (1 for an
// object, 0 for an array).
func (s *scanner) skipValue() *Error {
	var stack [maxDepth / 64]uint64
	depth := 0
	b := s.b
	for {
		// A value starts here.
		if s.ws(); s.i >= len(b) {
			return s.syntax("expected a value")
		}
		switch c := b[s.i]; {
		case c == '{' || c == '[':
			if depth == maxDepth {
				return s.fail("a value in the %s nests deeper than %d levels", s.what, maxDepth)
			}
			if c == '{' {
				stack[depth/64] |= 1 << (depth % 64)
			} else {
				stack[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			s.i++
			if s.ws(); s.i < len(b) && b[s.i] == c+2 { // '{'+2 == '}', '['+2 == ']'
				s.i++
				depth--
				break // an empty container is a whole value
			}
			if c == '{' {
				if err := s.key(); err != nil {
					return err
				}
			}
			continue // its first value
		case c == '"':
			if _, _, err := s.rawString(); err != nil {
				return err
			}
		case c == 't' || c == 'f' || c == 'n':
			if err := s.literal(); err != nil {
				return err
			}
		case c == '-' || c >= '0' && c <= '9':
			if _, err := s.number(); err != nil {
				return err
			}
		default:
			return s.syntax(fmt.Sprintf("unexpected %q", c))
		}
		// A value is complete: close containers until a comma or the end.
		for {
			if depth == 0 {
				return nil
			}
			if s.ws(); s.i >= len(b) {
				return s.syntax("unterminated object or array")
			}
			obj := stack[(depth-1)/64]>>((depth-1)%64)&1 == 1
			c := b[s.i]
			if c == ',' {
				s.i++
				if obj {
					if err := s.key(); err != nil {
						return err
					}
				}
				break
			}
			if obj && c == '}' || !obj && c == ']' {
				s.i++
				depth--
				continue
			}
			if obj {
				return s.syntax("expected ',' or '}'")
			}
			return s.syntax("expected ',' or ']'")
		}
	}
}

// key reads an object key and its colon inside a skipped value.
func (s *scanner) key() *Error {
	if s.peek() != '"' {
		return s.syntax("expected a string key")
	}
	if _, _, err := s.rawString(); err != nil {
		return err
	}
	if s.peek() != ':' {
		return s.syntax("expected ':' after a key")
	}
	s.i++
	return nil
}

// span skips the value at the cursor and returns its bytes as sent. The
// fast walker does the work; the careful one runs only to word a refusal.
func (s *scanner) span() ([]byte, *Error) {
	s.ws()
	start := s.i
	if end, ok := skipFast(s.b, s.i); ok {
		s.i = end
		return s.b[start:end], nil
	}
	if err := s.skipValue(); err != nil {
		return nil, err
	}
	// Unreachable while the two walkers agree (FuzzJSONValue); refuse
	// rather than trust either one alone.
	return nil, s.syntax("invalid value")
}
