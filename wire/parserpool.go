package wire

// ParserPool lends parsers to the connections of one event loop: a
// connection holds one only while part of a request is buffered, so a
// parked or idle connection costs no parser (424 B and its header table).
// It is not safe for concurrent use: one pool per loop.
type ParserPool struct {
	// Limits are the limits of the parsers it makes.
	Limits Limits
	idle   []*Parser
}

// maxIdleParsers bounds the parsers a pool keeps.
const maxIdleParsers = 256

// Get lends an idle parser, or a new one.
func (pp *ParserPool) Get() *Parser {
	if n := len(pp.idle); n > 0 {
		p := pp.idle[n-1]
		pp.idle[n-1] = nil
		pp.idle = pp.idle[:n-1]
		return p
	}
	return NewParser(pp.Limits)
}

// Put takes back a parser that is Idle (or Reset).
func (pp *ParserPool) Put(p *Parser) {
	if len(pp.idle) < maxIdleParsers {
		pp.idle = append(pp.idle, p)
	}
}
