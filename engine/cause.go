package engine

// Cause is why messages were dropped; the spec publishes one counter each.
type Cause uint8

const (
	CauseBounds Cause = iota // a queue bound under dropOldest
	CauseTTL                 // older than ttlSeconds
	CauseRetry               // attempts reached retryLimit
	numCauses
	causeNone Cause = 255 // freed without being a drop (reclaim, reset, delete)
)

func (c Cause) String() string {
	switch c {
	case CauseBounds:
		return "bounds"
	case CauseTTL:
		return "ttl"
	case CauseRetry:
		return "retry"
	}
	return "none"
}
