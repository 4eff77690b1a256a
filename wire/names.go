package wire

import "github.com/queenmq/ephemeral/internal/names"

// MaxNameBytes bounds queue, partition and group names (D10).
const MaxNameBytes = names.MaxBytes

// MaxBatch bounds messages per push, acks per call and a pop's batch.
const MaxBatch = 10000

// CheckName refuses a queue, partition or group name that is not non-empty
// UTF-8 of at most MaxNameBytes bytes free of control characters (D10; the
// rule is internal/names', shared with the engine, which checks again). what
// names the field in the message.
func CheckName(what string, name []byte) *Error {
	if msg := names.Problem(what, name); msg != "" {
		return &Error{Status: 400, Code: CodeBadRequest, Msg: msg}
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
