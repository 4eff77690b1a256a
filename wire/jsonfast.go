package wire

// skipFast is the payload walker's fast path: the same strict grammar as
// scanner.skipValue, written as one loop over local variables with no
// messages to build. It only says whether the value is valid and where it
// ends; when it is not, the caller runs skipValue again for a precise
// refusal. FuzzJSONValue holds the two to the same verdicts.
func skipFast(b []byte, i int) (end int, ok bool) {
	var stack [maxDepth / 64]uint64 // 1 = object, 0 = array
	depth := 0
	for {
		// A value starts here.
		for i < len(b) && isJSONSpace[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; c {
		case '"':
			if i, ok = skipString(b, i); !ok {
				return i, false
			}
		case '{', '[':
			if depth == maxDepth {
				return i, false
			}
			if c == '{' {
				stack[depth>>6] |= 1 << (depth & 63)
			} else {
				stack[depth>>6] &^= 1 << (depth & 63)
			}
			depth++
			i++
			for i < len(b) && isJSONSpace[b[i]] {
				i++
			}
			if i < len(b) && b[i] == c+2 { // '{'+2 == '}', '['+2 == ']'
				i++
				depth--
				break
			}
			if c == '{' {
				if i, ok = skipKey(b, i); !ok {
					return i, false
				}
			}
			continue
		case 't':
			if i+4 > len(b) || b[i+1] != 'r' || b[i+2] != 'u' || b[i+3] != 'e' {
				return i, false
			}
			i += 4
		case 'f':
			if i+5 > len(b) || b[i+1] != 'a' || b[i+2] != 'l' || b[i+3] != 's' || b[i+4] != 'e' {
				return i, false
			}
			i += 5
		case 'n':
			if i+4 > len(b) || b[i+1] != 'u' || b[i+2] != 'l' || b[i+3] != 'l' {
				return i, false
			}
			i += 4
		default:
			if i, ok = skipNumber(b, i); !ok {
				return i, false
			}
		}
		// A value is complete: close containers until a comma or the end.
		for {
			if depth == 0 {
				return i, true
			}
			for i < len(b) && isJSONSpace[b[i]] {
				i++
			}
			if i >= len(b) {
				return i, false
			}
			obj := stack[(depth-1)>>6]>>((depth-1)&63)&1 == 1
			c := b[i]
			if c == ',' {
				i++
				if obj {
					if i, ok = skipKey(b, i); !ok {
						return i, false
					}
				}
				break
			}
			if obj && c == '}' || !obj && c == ']' {
				i++
				depth--
				continue
			}
			return i, false
		}
	}
}

// isJSONSpace marks JSON's four whitespace bytes.
var isJSONSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// skipKey skips whitespace, a string and the colon after it.
func skipKey(b []byte, i int) (int, bool) {
	for i < len(b) && isJSONSpace[b[i]] {
		i++
	}
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := skipString(b, i)
	if !ok {
		return i, false
	}
	for i < len(b) && isJSONSpace[b[i]] {
		i++
	}
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return i + 1, true
}

// skipString skips the string that starts at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	i++
	for {
		for i+4 <= len(b) {
			w := b[i : i+4 : i+4]
			if !strPlain[w[0]] || !strPlain[w[1]] || !strPlain[w[2]] || !strPlain[w[3]] {
				break
			}
			i += 4
		}
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hexVal[b[i+2]] < 0 || hexVal[b[i+3]] < 0 || hexVal[b[i+4]] < 0 || hexVal[b[i+5]] < 0 {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			n := runeLen(b[i:])
			if n == 0 {
				return i, false
			}
			i += n
		}
	}
}

// skipNumber skips the number that starts at b[i] (RFC 8259 6).
func skipNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i++
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i, true
}
