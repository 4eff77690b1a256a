package wire

// CellViewParams are the query parameters of the cell's view read, GET
// /api/v1/ephemeral/cell (docs/routes.md, "cell").
type CellViewParams struct {
	// After is the generation the client holds; HasAfter is false when the
	// request names none (then it is answered at once).
	After    uint64
	HasAfter bool
	// TimeoutMs bounds the wait for a generation other than After: a
	// non-negative integer clamped to MaxPopTimeoutMs, the caller's
	// default (the pop's) when absent; 0 answers at once.
	TimeoutMs int
}

const (
	viewAfter = 1 << iota
	viewTimeout
)

// ParseCellView reads the view read's parameters from q, as ParsePop reads
// a pop's: digits only, a parameter we read given twice is a 400, unknown
// parameters are ignored. An after too large for a generation saturates
// (no generation equals it, so it is answered at once).
func ParseCellView(q Query, defaultTimeoutMs int) (CellViewParams, error) {
	p := CellViewParams{TimeoutMs: min(max(defaultTimeoutMs, 0), MaxPopTimeoutMs)}
	var seen uint8
	for it := q.Params(); it.Next(); {
		name := it.RawName()
		if needsUnescape(name, true) {
			name = it.Name()
		}
		var bit uint8
		switch string(name) {
		case "after":
			bit = viewAfter
		case "timeout":
			bit = viewTimeout
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
		case viewAfter:
			p.After, err = queryUint("after", "a non-negative integer (the generation last answered)", v, ^uint64(0))
			p.HasAfter = true
		case viewTimeout:
			p.TimeoutMs, err = queryInt("timeout", "a non-negative integer (milliseconds)", v, MaxPopTimeoutMs)
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}
