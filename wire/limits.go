package wire

// Default limits. DefaultMaxBody is QUEEN_MAX_BODY_BYTES's default (D7);
// the server reads the variable and sets Limits.MaxBody.
const (
	DefaultMaxHeaderBytes = 16 << 10
	DefaultMaxHeaders     = 100
	DefaultMaxBody        = 64 << 20
)

// Fixed bounds on chunked framing, so that a client cannot make the server
// buffer unbounded bytes that are not body: a chunk-size line (with its
// extensions) and the sum of all framing bytes of one body.
const (
	maxChunkLine    = 4 << 10
	maxChunkFraming = 1 << 20
)

// retainBody is the largest de-chunking buffer a Parser keeps for the next
// request: a bigger one (a rare huge chunked push) is dropped so that an idle
// keep-alive connection does not pin it.
const retainBody = 256 << 10

// Limits bound what one request may make the server hold. Zero fields take
// the defaults.
type Limits struct {
	// MaxHeaderBytes bounds the request line and header section, blank line
	// included (and, separately, a chunked body's trailer section).
	MaxHeaderBytes int
	// MaxHeaders bounds the number of header lines (and of trailer lines).
	MaxHeaders int
	// MaxBody bounds the body, after de-chunking (QUEEN_MAX_BODY_BYTES).
	MaxBody int64
}

// fillDefaults sets every limit left zero (or negative) to its default.
func (l *Limits) fillDefaults() {
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = DefaultMaxHeaders
	}
	if l.MaxBody <= 0 {
		l.MaxBody = DefaultMaxBody
	}
}
