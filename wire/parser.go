package wire

import (
	"bytes"
	"math"
)

// stage is where the parser is in the pending request.
type stage uint8

const (
	stageLine      stage = iota // request line (after any empty lines)
	stageHeaders                // header lines up to the blank line
	stageBody                   // Content-Length body
	stageChunkSize              // a chunk-size line
	stageChunkData              // chunk data
	stageChunkEnd               // the CRLF after chunk data
	stageTrailers               // trailer lines after the last chunk
)

// Parser reads HTTP/1.1 requests from a connection's byte stream. It keeps
// its place between calls, so a request may arrive split anywhere and is
// examined once, not re-scanned from its start on every read.
//
// The contract with the caller: buf always starts at the first byte not yet
// consumed, and between calls that asked for more bytes it only grows at the
// end (the same bytes, possibly in a different backing array: the parser
// remembers offsets, never pointers). Pipelined requests come out one per
// call:
//
//	for {
//		req, n, err := p.Parse(buf)
//		if err != nil { answer err (err.(*wire.Error)), close }
//		if req == nil { break } // wait for more bytes
//		serve req
//		buf = buf[n:]           // or discard n bytes of the inbound buffer
//	}
//
// A Parser is not safe for concurrent use; one per connection at a time
// (see Idle).
type Parser struct {
	// Limits bounds each request; zero fields take the defaults. Set it
	// before the first Parse.
	Limits Limits

	err *Error // sticky: a stream with a framing error is not read further
	pending
	fields []field // header offsets of the pending request, reused
	body   []byte  // de-chunked body, reused
	req    Request
}

// pending is the state of the request being read; it is zeroed between
// requests.
type pending struct {
	stage stage
	pos   int // offset of the next unexamined byte of the pending request
	scan  int // where the search for the current line's LF resumes

	method             Method
	mStart, mEnd       int
	tStart, tEnd       int
	minor              int
	contentLength      int64
	clSeen, teSeen     bool
	hostSeen, chunked  bool
	connClose, connKA  bool
	expect, contDue    bool
	bodyStart          int
	chunkLeft          int64
	framing            int
	trailerStart, nTrl int
}

// NewParser returns a Parser with the given limits.
func NewParser(l Limits) *Parser { return &Parser{Limits: l} }

// Parse examines buf and returns the next complete request and the number
// of bytes it took (leading empty lines included). It returns a nil request
// and 0 when buf holds only part of one: call again with more bytes. An
// error is an *Error; it is sticky (the stream cannot be resynchronised)
// and the connection should be answered and closed.
func (p *Parser) Parse(buf []byte) (*Request, int, error) {
	if p.err != nil {
		return nil, 0, p.err
	}
	if max(p.pos, p.scan) > len(buf) {
		// The caller broke the contract (buf lost bytes that were already
		// examined); refuse rather than index past its end.
		p.err = &Error{Status: 500, Code: CodeBadRequest, Msg: "wire: the buffer shrank between Parse calls", Close: true}
		return nil, 0, p.err
	}
	lim := p.Limits
	lim.fillDefaults()
	done, err := p.advance(buf, lim)
	if err != nil {
		p.err = err
		p.contDue = false
		return nil, 0, err
	}
	if !done {
		return nil, 0, nil
	}
	req, n := p.finish(buf)
	return req, n, nil
}

// TakeContinue reports, once per request, that the pending request asked
// for "Expect: 100-continue", its head has been read and its body has not:
// the server writes AppendContinue's interim response now (or refuses the
// request instead). A request that arrives whole never asks.
func (p *Parser) TakeContinue() bool {
	if p.contDue {
		p.contDue = false
		return true
	}
	return false
}

// ReadingHead reports whether the parser is inside a request's head, so
// that the server can enforce a header-read timeout. With no bytes buffered
// the server knows the connection is idle instead.
func (p *Parser) ReadingHead() bool { return p.stage <= stageHeaders }

// Need reports how long buf must be for Parse to complete the pending
// request: its head has been read and its Content-Length body is still
// arriving. A server waits until that many bytes are buffered before it
// calls Parse again, instead of presenting the same growing buffer on every
// read (which costs the square of the body's size). It is 0 when the parser
// cannot know: inside a head, in a chunked body, or between requests.
func (p *Parser) Need() int64 {
	if p.err == nil && p.stage == stageBody {
		if p.contentLength > math.MaxInt64-int64(p.bodyStart) {
			return math.MaxInt64 // a length past int64: no buffer reaches it
		}
		return int64(p.bodyStart) + p.contentLength
	}
	return 0
}

// Want tells a caller that moves a chunked body out of its connection's
// buffer as it arrives what Parse examines next, so that it takes no byte
// of the request that follows: data bytes of chunk data, or (line) the
// bytes up to and including the next LF (a chunk-size line, the CRLF after
// chunk data, a trailer line). Both are zero outside a chunked body.
func (p *Parser) Want() (data int64, line bool) {
	if p.err != nil {
		return 0, false
	}
	switch p.stage {
	case stageChunkData:
		return p.chunkLeft, false
	case stageChunkSize, stageChunkEnd, stageTrailers:
		return 0, true
	}
	return 0, false
}

// InBody reports whether the head of the pending request has been read and
// its body (Content-Length or chunked) has not yet all arrived.
func (p *Parser) InBody() bool {
	return p.err == nil && p.stage >= stageBody && p.stage <= stageTrailers
}

// PendingHead returns the pending request as far as its head (InBody must
// be true), so that a server can judge it on its headers, its identity
// above all, before it buffers the body. buf is what the last Parse call
// was given. Body is nil and Chunked and ExpectContinue are set; the
// Request is valid until the next Parse, like the one Parse returns.
func (p *Parser) PendingHead(buf []byte) *Request {
	r := p.fill(buf, p.bodyStart)
	r.Body = nil
	return r
}

// Idle reports whether the parser is between requests: no part of one has
// been examined and no error is sticky. An idle parser carries nothing of its
// connection, so a server may lend it to another connection (a connection
// that waits, parked, should not hold a parser).
func (p *Parser) Idle() bool { return p.err == nil && p.pending == (pending{}) }

// Reset forgets the pending request and any error, for a new connection.
func (p *Parser) Reset() {
	p.err = nil
	p.next()
}

// next clears the per-request state, keeping the reusable buffers.
func (p *Parser) next() {
	p.pending = pending{}
	p.fields = p.fields[:0]
	if cap(p.body) > retainBody {
		p.body = nil
	}
	p.body = p.body[:0]
}

// headWindow is the part of buf that a head (request line and headers, or a
// trailer section) starting at from may occupy. Every decision about a head
// is taken on complete lines inside the window, and running out of window
// is the size error: so a request fed whole and fed byte by byte meets the
// same error at the same place.
func headWindow(buf []byte, from, limit int) (win []byte, over bool) {
	if end := from + limit; len(buf) > end {
		return buf[:end], true
	}
	return buf, false
}

// nextLine finds the LF that ends the line at p.pos inside win and returns
// the line without its CRLF. ok is false when win holds no LF yet.
func (p *Parser) nextLine(win []byte, what string) (line []byte, lf int, ok bool, err *Error) {
	i := bytes.IndexByte(win[p.scan:], '\n')
	if i < 0 {
		p.scan = len(win)
		return nil, 0, false, nil
	}
	lf = p.scan + i
	if lf == p.pos || win[lf-1] != '\r' {
		return nil, 0, false, framingError("bare LF in %s; lines end with CRLF", what)
	}
	return win[p.pos : lf-1], lf, true, nil
}

// advance runs the state machine over buf and reports whether a request is
// complete.
func (p *Parser) advance(buf []byte, lim Limits) (bool, *Error) {
	for {
		switch p.stage {
		case stageLine:
			win, over := headWindow(buf, 0, lim.MaxHeaderBytes)
			// RFC 9112 2.2: empty lines before the request line are ignored.
			for p.pos < len(win) && win[p.pos] == '\r' {
				if p.pos+1 == len(win) {
					return false, headTooLarge(over, lim)
				}
				if win[p.pos+1] != '\n' {
					return false, framingError("bare CR before the request line; lines end with CRLF")
				}
				p.pos += 2
				p.scan = p.pos
			}
			line, lf, ok, err := p.nextLine(win, "the request line")
			if err != nil {
				return false, err
			}
			if !ok {
				return false, headTooLarge(over, lim)
			}
			if err := p.requestLine(line, p.pos); err != nil {
				return false, err
			}
			p.pos, p.scan = lf+1, lf+1
			p.stage = stageHeaders

		case stageHeaders:
			win, over := headWindow(buf, 0, lim.MaxHeaderBytes)
			line, lf, ok, err := p.nextLine(win, "the header section")
			if err != nil {
				return false, err
			}
			if !ok {
				return false, headTooLarge(over, lim)
			}
			start := p.pos
			p.pos, p.scan = lf+1, lf+1
			if len(line) == 0 {
				if err := p.endOfHead(lim); err != nil {
					return false, err
				}
				continue
			}
			if err := p.header(buf, start, start+len(line), lim); err != nil {
				return false, err
			}

		case stageBody:
			// Compared as what is buffered against what is due, so that a
			// Content-Length near the top of int64 (with MaxBody as large)
			// cannot wrap the sum around.
			if int64(len(buf)-p.bodyStart) < p.contentLength {
				return false, nil
			}
			p.pos = p.bodyStart + int(p.contentLength)
			return true, nil

		case stageChunkSize, stageChunkData, stageChunkEnd, stageTrailers:
			done, more, err := p.chunk(buf, lim)
			if err != nil || !more {
				return done, err
			}

		default:
			return true, nil
		}
	}
}

func headTooLarge(over bool, lim Limits) *Error {
	if over {
		return framingError("request head exceeds %d bytes", lim.MaxHeaderBytes)
	}
	return nil
}

// requestLine parses "method SP request-target SP HTTP-version" strictly:
// one space each, origin-form target (or "*" for OPTIONS), HTTP/1.0 or 1.1.
func (p *Parser) requestLine(line []byte, off int) *Error {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return framingError("malformed request line")
	}
	method := line[:sp]
	for _, c := range method {
		if !isTchar[c] {
			return framingError("malformed request line: invalid character %q in the method", c)
		}
	}
	rest := line[sp+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return framingError("malformed request line")
	}
	target, version := rest[:sp2], rest[sp2+1:]
	switch string(version) {
	case "HTTP/1.1":
		p.minor = 1
	case "HTTP/1.0":
		p.minor = 0
	default:
		if bytes.HasPrefix(version, []byte("HTTP/")) && bytes.IndexByte(version, ' ') < 0 {
			return framingError("HTTP version %s is not supported; send HTTP/1.1 or HTTP/1.0", quote(version))
		}
		return framingError("malformed request line")
	}
	p.method = methodOf(method)
	if target[0] != '/' && (string(target) != "*" || p.method != MethodOptions) {
		return framingError("request target must be origin-form (/path?query)")
	}
	for i := 0; i < len(target); i++ {
		for i+8 <= len(target) && plainTarget(load8(target, i)) {
			i += 8
		}
		if i == len(target) {
			break
		}
		switch c := target[i]; {
		case c == '%':
			// A malformed escape is refused here, so that decoding a
			// parsed request's path or query cannot fail later.
			if i+2 >= len(target) || hexVal[target[i+1]] < 0 || hexVal[target[i+2]] < 0 {
				return framingError("request target has a malformed percent-escape at byte %d", i)
			}
		case !isTarget[c]:
			if c == '#' {
				return framingError("request target carries a fragment ('#'); escape it as %%23")
			}
			return framingError("request target carries the byte %q", c)
		}
	}
	p.mStart, p.mEnd = off, off+sp
	p.tStart, p.tEnd = off+sp+1, off+sp+1+sp2
	return nil
}

// finish builds the Request for the completed request, readies the parser
// for the next one and returns the request and the bytes it took.
func (p *Parser) finish(buf []byte) (*Request, int) {
	end := p.pos
	r := p.fill(buf, end)
	p.next()
	return r, end
}

// fill builds p.req from the pending request's offsets in buf; end is where
// its body ends.
func (p *Parser) fill(buf []byte, end int) *Request {
	r := &p.req
	r.scratch.reset()
	r.buf = buf
	r.fields = p.fields
	r.Method = p.method
	r.MethodName = buf[p.mStart:p.mEnd]
	r.Target = buf[p.tStart:p.tEnd]
	r.Path, r.RawQuery = r.Target, nil
	if i := bytes.IndexByte(r.Target, '?'); i >= 0 {
		r.Path, r.RawQuery = r.Target[:i], r.Target[i+1:]
	}
	r.Minor = p.minor
	r.Chunked = p.chunked
	r.Body = nil
	switch {
	case p.chunked && len(p.body) > 0:
		r.Body = p.body
	case !p.chunked && p.contentLength > 0:
		r.Body = buf[p.bodyStart:end]
	}
	if p.minor == 1 {
		r.KeepAlive = !p.connClose
	} else {
		r.KeepAlive = p.connKA && !p.connClose
	}
	r.ExpectContinue = p.expect && p.minor == 1
	return r
}
