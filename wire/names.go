package wire

import "unicode/utf8"

// MaxNameBytes bounds queue, partition and group names (D10).
const MaxNameBytes = 512

// MaxBatch bounds messages per push, acks per call and a pop's batch.
const MaxBatch = 10000

// CheckName refuses a queue, partition or group name that is not non-empty
// UTF-8 of at most MaxNameBytes bytes free of control characters (Unicode
// Cc: C0, DEL and C1) (D10). what names the field in the message. The
// engine checks again; this is where the client gets a precise message.
func CheckName(what string, name []byte) *Error {
	if len(name) == 0 {
		return shapeError(CodeBadRequest, "%s is required", what)
	}
	if len(name) > MaxNameBytes {
		return shapeError(CodeBadRequest, "%s is %d bytes; at most %d are allowed", what, len(name), MaxNameBytes)
	}
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return shapeError(CodeBadRequest, "%s carries a control character at byte %d", what, i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(name[i:])
		if r == utf8.RuneError && size == 1 {
			return shapeError(CodeBadRequest, "%s is not valid UTF-8 (byte %d)", what, i)
		}
		if r >= 0x80 && r <= 0x9f {
			return shapeError(CodeBadRequest, "%s carries a control character at byte %d", what, i)
		}
		i += size
	}
	return nil
}

// checkOptionalName is CheckName for a partition or group, where empty
// means absent (D10).
func checkOptionalName(what string, name []byte) *Error {
	if len(name) == 0 {
		return nil
	}
	return CheckName(what, name)
}
