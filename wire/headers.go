package wire

import (
	"bytes"
	"math"
)

// fieldLine checks one header (or trailer) line, without its CRLF, and
// returns the name's end and the value's bounds (whitespace trimmed),
// relative to line. It refuses obs-fold, whitespace before the colon, a
// name that is not a token, and CR, LF, NUL or another control character
// in the value (RFC 9112 5, RFC 9110 5.5).
func fieldLine(line []byte, what string) (ne, vs, ve int, err *Error) {
	if line[0] == ' ' || line[0] == '\t' {
		return 0, 0, 0, framingError("%s line starts with whitespace (obs-fold is not accepted)", what)
	}
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return 0, 0, 0, framingError("%s line has no colon", what)
	}
	for i, c := range line[:colon] {
		if !isTchar[c] {
			if (c == ' ' || c == '\t') && i == colon-1 {
				return 0, 0, 0, framingError("whitespace between a %s name and its colon", what)
			}
			return 0, 0, 0, framingError("%s name carries the byte %q", what, c)
		}
	}
	if colon == 0 {
		return 0, 0, 0, framingError("empty %s name", what)
	}
	vs, ve = colon+1, len(line)
	for i := vs; i < ve; i++ {
		for i+8 <= ve && plainValue(load8(line, i)) {
			i += 8
		}
		if i == ve {
			break
		}
		if c := line[i]; !isFieldValue[c] {
			switch c {
			case 0:
				return 0, 0, 0, framingError("NUL in the value of %s %q", what, line[:colon])
			case '\r':
				return 0, 0, 0, framingError("bare CR in the value of %s %q; lines end with CRLF", what, line[:colon])
			}
			return 0, 0, 0, framingError("control character %q in the value of %s %q", c, what, line[:colon])
		}
	}
	for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
		vs++
	}
	for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
		ve--
	}
	return colon, vs, ve, nil
}

// header records the header line buf[start:end] and applies the headers
// that frame the request.
func (p *Parser) header(buf []byte, start, end int, lim Limits) *Error {
	ne, vs, ve, err := fieldLine(buf[start:end], "header")
	if err != nil {
		return err
	}
	if len(p.fields) >= lim.MaxHeaders {
		return framingError("more than %d header lines", lim.MaxHeaders)
	}
	p.fields = append(p.fields, field{start, start + ne, start + vs, start + ve})
	name, value := buf[start:start+ne], buf[start+vs:start+ve]
	switch len(name) {
	case len("host"):
		if equalFold(name, "host") {
			if p.hostSeen {
				return framingError("two Host headers")
			}
			p.hostSeen = true
		}
	case len("expect"):
		if equalFold(name, "expect") && p.minor == 1 { // HTTP/1.0: ignored (RFC 9110 10.1.1)
			if !equalFold(value, "100-continue") {
				return &Error{Status: 417, Code: CodeBadRequest, Close: true,
					Msg: "expectation " + quote(value) + " is not supported; only 100-continue is"}
			}
			p.expect = true
		}
	case len("connection"):
		if equalFold(name, "connection") {
			p.connection(value)
		}
	case len("authorization"):
		if equalFold(name, "authorization") {
			return p.unique(buf, name)
		}
	case len("content-length"):
		if equalFold(name, "content-length") {
			return p.setContentLength(value, lim)
		}
	case len("transfer-encoding"):
		if equalFold(name, "transfer-encoding") {
			return p.setTransferEncoding(value)
		}
	}
	if hasPrefixFold(name, "x-queen-") {
		return p.unique(buf, name)
	}
	return nil
}

// unique refuses a second header named name. Identity headers must not be
// ambiguous: a proxy and this broker could otherwise read different copies.
func (p *Parser) unique(buf, name []byte) *Error {
	for _, f := range p.fields[:len(p.fields)-1] {
		if equalFoldBytes(buf[f.ns:f.ne], name) {
			return framingError("two %s headers", quote(name))
		}
	}
	return nil
}

// connection applies the Connection header's close and keep-alive options.
func (p *Parser) connection(v []byte) {
	for len(v) > 0 {
		var opt []byte
		opt, v, _ = bytes.Cut(v, []byte{','})
		opt = bytes.Trim(opt, " \t")
		switch {
		case equalFold(opt, "close"):
			p.connClose = true
		case equalFold(opt, "keep-alive"):
			p.connKA = true
		}
	}
}

// setContentLength accepts exactly one Content-Length of 1*DIGIT that does
// not exceed the body limit (RFC 9112 6.3; a list, even "5, 5", is refused).
func (p *Parser) setContentLength(v []byte, lim Limits) *Error {
	if p.clSeen {
		return framingError("two Content-Length headers")
	}
	p.clSeen = true
	if p.teSeen {
		return framingError("Content-Length together with Transfer-Encoding")
	}
	if len(v) == 0 {
		return framingError("empty Content-Length")
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return framingError("Content-Length %s is not a non-negative integer", quote(v))
		}
		if n <= (math.MaxInt64-9)/10 {
			n = n*10 + int64(c-'0')
		} else {
			n = math.MaxInt64 // saturate: refused below anyway
		}
	}
	if n > lim.MaxBody {
		return framingError("Content-Length %s exceeds the body limit of %d bytes (QUEEN_MAX_BODY_BYTES)", quote(v), lim.MaxBody)
	}
	p.contentLength = n
	return nil
}

// setTransferEncoding accepts exactly "chunked": any other coding, a list,
// or a second header is refused rather than guessed at.
func (p *Parser) setTransferEncoding(v []byte) *Error {
	if p.teSeen {
		return framingError("two Transfer-Encoding headers")
	}
	p.teSeen = true
	if p.clSeen {
		return framingError("Content-Length together with Transfer-Encoding")
	}
	if !equalFold(v, "chunked") {
		return framingError("Transfer-Encoding %s is not supported; only chunked is", quote(v))
	}
	p.chunked = true
	return nil
}

// endOfHead settles the framing once the blank line has been read.
func (p *Parser) endOfHead(lim Limits) *Error {
	if p.teSeen && p.minor == 0 {
		// RFC 9112 6.1: faulty framing in an HTTP/1.0 message.
		return framingError("Transfer-Encoding in an HTTP/1.0 request")
	}
	p.bodyStart = p.pos
	p.stage = stageBody // without a length the body is empty: complete at once
	if p.chunked {
		p.stage = stageChunkSize
	}
	p.contDue = p.expect && (p.chunked || p.contentLength > 0)
	return nil
}

// equalFoldBytes compares two byte strings ignoring ASCII case.
func equalFoldBytes(a, b []byte) bool {
	return len(a) == len(b) && equalFoldBoth(a, string(b))
}
