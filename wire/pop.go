package wire

// Bounds of the pop parameters (D11).
const (
	MaxPopTimeoutMs = 300_000
	DefaultBatch    = 1
)

// PopParams are a pop's query parameters (spec, pop; D11). The byte slices
// point into the request (see Request) and must be copied to outlive it (a
// parked pop).
type PopParams struct {
	Queue []byte
	// Partition is empty for every partition; Group is empty for queue mode
	// (absent and "" alike, D10).
	Partition []byte
	Group     []byte
	// Batch is a positive integer, clamped to MaxBatch; 1 when absent.
	Batch int
	// TimeoutMs is a non-negative integer, clamped to MaxPopTimeoutMs; the
	// caller's default when absent.
	TimeoutMs int
	Wait      bool
	AutoAck   bool
}

const (
	popQueue = 1 << iota
	popPartition
	popGroup
	popBatch
	popTimeout
	popWait
	popAutoAck
)

// ParsePop reads a pop's parameters from q. batch, timeout, wait and
// autoAck accept exactly the forms D11 names and anything else in them is a
// 400, as is a second occurrence of a parameter we read (which of two
// values a client meant is not ours to guess). Unknown parameters are
// ignored.
func ParsePop(q Query, defaultTimeoutMs int) (PopParams, error) {
	p := PopParams{Batch: DefaultBatch, TimeoutMs: min(max(defaultTimeoutMs, 0), MaxPopTimeoutMs)}
	var seen uint16
	for it := q.Params(); it.Next(); {
		name := it.RawName()
		if needsUnescape(name, true) {
			name = it.Name()
		}
		var bit uint16
		switch string(name) {
		case "queue":
			bit = popQueue
		case "partition":
			bit = popPartition
		case "group":
			bit = popGroup
		case "batch":
			bit = popBatch
		case "timeout":
			bit = popTimeout
		case "wait":
			bit = popWait
		case "autoAck":
			bit = popAutoAck
		default:
			continue
		}
		if seen&bit != 0 {
			return p, shapeError(CodeBadRequest, "the query parameter %s appears twice", name)
		}
		seen |= bit
		v := it.Value()
		var err *Error
		switch bit {
		case popQueue:
			p.Queue, err = v, CheckName("queue", v)
		case popPartition:
			p.Partition, err = v, checkOptionalName("partition", v)
		case popGroup:
			p.Group, err = v, checkOptionalName("group", v)
		case popBatch:
			var n int
			if n, err = queryInt("batch", "a positive integer", v, MaxBatch); err == nil && n == 0 {
				err = shapeError(CodeBadRequest, "batch must be a positive integer, not 0")
			}
			p.Batch = n
		case popTimeout:
			p.TimeoutMs, err = queryInt("timeout", "a non-negative integer (milliseconds)", v, MaxPopTimeoutMs)
		case popWait:
			p.Wait, err = queryBool("wait", v)
		case popAutoAck:
			p.AutoAck, err = queryBool("autoAck", v)
		}
		if err != nil {
			return p, err
		}
	}
	if seen&popQueue == 0 {
		return p, shapeError(CodeBadRequest, "queue is required")
	}
	return p, nil
}

// queryInt reads a non-negative decimal integer (digits only) and clamps it
// to most: a value too large to represent is still a non-negative integer,
// so it clamps rather than refuses.
func queryInt(name, noun string, v []byte, most int) (int, *Error) {
	n, err := queryUint(name, noun, v, uint64(most))
	return int(n), err
}

// queryUint is queryInt for a uint64: digits only, clamped to most (the
// digits saturate rather than overflow).
func queryUint(name, noun string, v []byte, most uint64) (uint64, *Error) {
	if len(v) == 0 {
		return 0, shapeError(CodeBadRequest, "%s must be %s, not empty", name, noun)
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, shapeError(CodeBadRequest, "%s must be %s, not %s", name, noun, quote(v))
		}
		if d := uint64(c - '0'); n <= (^uint64(0)-d)/10 {
			n = n*10 + d
		} else {
			n = ^uint64(0)
		}
	}
	return min(n, most), nil
}

// queryBool reads true, false, 1 or 0 (D11), exactly.
func queryBool(name string, v []byte) (bool, *Error) {
	switch string(v) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, shapeError(CodeBadRequest, "%s must be true, false, 1 or 0, not %s", name, quote(v))
}
