package engine

import "github.com/queenmq/ephemeral/internal/names"

// MaxNameBytes bounds queue, partition and group names (D10).
const MaxNameBytes = names.MaxBytes

// MaxBatch bounds messages per push, acks per call and a pop's batch (spec).
const MaxBatch = 10000

// DefaultPartition is the partition a push without one goes to (spec, push).
const DefaultPartition = "Default"

// QueueModeGroup is how queue mode (a pop without group) is shown (D4).
const QueueModeGroup = "__QUEUE_MODE__"

// CheckName reports why name is not a valid queue, partition or group name
// (D10; the rule is internal/names', shared with the wire). what names the
// field in the message.
func CheckName(what, name string) error {
	if msg := names.Problem(what, name); msg != "" {
		return &Error{CodeBadRequest, msg}
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
