package wire

// Method is a request method. Methods outside the set the broker serves
// parse as MethodOther (the name is in Request.MethodName): choosing 404 or
// 405 is routing, the server's job.
type Method uint8

const (
	MethodOther Method = iota
	MethodGet
	MethodHead
	MethodPost
	MethodPut
	MethodDelete
	MethodOptions
)

var methodNames = [...]string{"", "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"}

func (m Method) String() string {
	if m == MethodOther || int(m) >= len(methodNames) {
		return "OTHER"
	}
	return methodNames[m]
}

// methodOf maps a method token (case-sensitive, RFC 9110 9.1).
func methodOf(b []byte) Method {
	for m := MethodGet; int(m) < len(methodNames); m++ {
		if string(b) == methodNames[m] {
			return m
		}
	}
	return MethodOther
}

// field locates one header line in the request buffer by offsets, so that
// the parser's state survives the buffer moving between reads.
type field struct{ ns, ne, vs, ve int }

// Request is one parsed request. It is owned by the Parser that returned it
// and every slice in it points into the caller's buffer or the parser's own
// reused buffers: it is valid until the next Parse or Reset and only while
// the caller leaves the buffer untouched. Copy what must outlive that (a
// parked pop's parameters, for instance).
type Request struct {
	Method     Method
	MethodName []byte
	// Target is the request-target as sent; Path and RawQuery split it at
	// the first '?' (RawQuery is nil without one). Both are still
	// percent-encoded; the parser has checked that every escape is valid.
	Target   []byte
	Path     []byte
	RawQuery []byte
	// Minor is the HTTP/1.x minor version: 0 or 1.
	Minor int
	// Body is the content: a sub-slice of the buffer for a Content-Length
	// body, the parser's de-chunking buffer for a chunked one; empty when
	// there is none.
	Body    []byte
	Chunked bool
	// KeepAlive reports whether the connection may carry another request
	// after this one: HTTP/1.1 unless "Connection: close", HTTP/1.0 only
	// with "Connection: keep-alive" (RFC 9112 9.3).
	KeepAlive bool
	// ExpectContinue is set when an HTTP/1.1 client sent
	// "Expect: 100-continue" (see Parser.TakeContinue).
	ExpectContinue bool

	buf     []byte
	fields  []field
	scratch scratch
}

// Header returns the value (without surrounding whitespace) of the first
// header named name, compared without regard to ASCII case. The parser
// refuses a second Host, Content-Length, Transfer-Encoding, Authorization
// or X-Queen-* header, so for those the first is the only one.
func (r *Request) Header(name string) ([]byte, bool) {
	for _, f := range r.fields {
		if equalFoldBoth(r.buf[f.ns:f.ne], name) {
			return r.buf[f.vs:f.ve], true
		}
	}
	return nil, false
}

// NumHeaders and HeaderAt give access to every header line in order.
func (r *Request) NumHeaders() int { return len(r.fields) }

// HeaderAt returns the i-th header's name as sent and its trimmed value.
func (r *Request) HeaderAt(i int) (name, value []byte) {
	f := r.fields[i]
	return r.buf[f.ns:f.ne], r.buf[f.vs:f.ve]
}

// Query returns the request's query parameters.
func (r *Request) Query() Query { return Query{raw: r.RawQuery, s: &r.scratch} }

// PathUnescape percent-decodes a path segment ('+' stays a plus sign).
// It returns seg itself when it holds no escape.
func (r *Request) PathUnescape(seg []byte) []byte { return unescape(&r.scratch, seg, false) }

// Head returns a response head for this request with the connection fields
// filled in: Close when the connection ends after the answer, KeepAlive for
// an HTTP/1.0 client that asked to keep it.
func (r *Request) Head(status int) Head {
	return Head{Status: status, Close: !r.KeepAlive, KeepAlive: r.KeepAlive && r.Minor == 0}
}

// equalFoldBoth compares ASCII case-insensitively in both arguments.
func equalFoldBoth(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c, d := b[i], s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if d >= 'A' && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}
