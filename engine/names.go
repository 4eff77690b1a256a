package engine

import "unicode/utf8"

// MaxNameBytes bounds queue, partition and group names (D10).
const MaxNameBytes = 512

// MaxBatch bounds messages per push, acks per call and a pop's batch (spec).
const MaxBatch = 10000

// DefaultPartition is the partition a push without one goes to (spec, push).
const DefaultPartition = "Default"

// QueueModeGroup is how queue mode (a pop without group) is shown (D4).
const QueueModeGroup = "__QUEUE_MODE__"

// CheckName reports why name is not a valid queue, partition or group name:
// non-empty UTF-8 of at most 512 bytes with no control character (Unicode
// Cc: C0, DEL, C1) (D10). what names the field in the message.
func CheckName(what, name string) error {
	if name == "" {
		return badRequest("%s is required", what)
	}
	if len(name) > MaxNameBytes {
		return badRequest("%s is %d bytes; at most %d are allowed", what, len(name), MaxNameBytes)
	}
	for i := 0; i < len(name); {
		c := name[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return badRequest("%s carries a control character at byte %d", what, i)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(name[i:])
		if r == utf8.RuneError && size == 1 {
			return badRequest("%s is not valid UTF-8 (byte %d)", what, i)
		}
		if r >= 0x80 && r <= 0x9f {
			return badRequest("%s carries a control character at byte %d", what, i)
		}
		i += size
	}
	return nil
}

// checkOptionalName is CheckName for a partition or group, where empty means
// absent (D10).
func checkOptionalName(what, name string) error {
	if name == "" {
		return nil
	}
	return CheckName(what, name)
}
