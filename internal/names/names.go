// Package names holds the one rule for queue, partition and group names
// (D10, docs/decisions.md), shared by the wire (which refuses a bad request with a
// precise message) and the engine (which checks again at its own door).
package names

import (
	"fmt"
	"unicode/utf8"
)

// MaxBytes bounds a name.
const MaxBytes = 512

// Problem describes why name is not a valid name: non-empty UTF-8 of at
// most MaxBytes bytes with no control character (Unicode Cc: C0, DEL and
// C1). what names the field in the message. It returns "" for a valid name
// and allocates nothing for a valid name.
func Problem[T string | []byte](what string, name T) string {
	if len(name) == 0 {
		return what + " is required"
	}
	if len(name) > MaxBytes {
		return fmt.Sprintf("%s is %d bytes; at most %d are allowed", what, len(name), MaxBytes)
	}
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return fmt.Sprintf("%s carries a control character at byte %d", what, i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(string(name[i:min(i+utf8.UTFMax, len(name))]))
		if r == utf8.RuneError && size == 1 {
			return fmt.Sprintf("%s is not valid UTF-8 (byte %d)", what, i)
		}
		if r >= 0x80 && r <= 0x9f {
			return fmt.Sprintf("%s carries a control character at byte %d", what, i)
		}
		i += size
	}
	return ""
}
