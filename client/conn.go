package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/queenmq/ephemeral/wire/httpline"
)

// wireConn is one HTTP/1.1 keep-alive connection to a broker: the socket,
// its read buffer, and the code that writes requests into a byte slice and
// reads answers out of the socket. It knows nothing about who shares it:
// sharedConn pipelines calls over one, the pool leases others whole.
//
// Invariants: answers are read in the order requests were written; body
// bytes are read into a buffer the caller hands in (never allocated per
// answer once that buffer has grown); after any read or framing error the
// connection is unusable and must be closed, since where the next answer
// starts is unknown.
type wireConn struct {
	nc   net.Conn
	br   *bufio.Reader
	wbuf []byte // an exclusive lease's requests, reused
	// got counts the bytes read from the socket: a call none of whose
	// answer had arrived when the connection failed may be retried if it
	// is safe to repeat (transport.go, the retry rule).
	got int
}

const connBufSize = 16 << 10

// errFraming is an answer the client cannot read.
var errFraming = errors.New("queen: malformed HTTP answer")

func newWireConn(nc net.Conn) *wireConn {
	if tc, ok := nc.(*net.TCPConn); ok {
		// Go sets it by default; said here because pipelining depends on it.
		_ = tc.SetNoDelay(true)
	}
	w := &wireConn{nc: nc}
	w.br = bufio.NewReaderSize(countingReader{nc, &w.got}, connBufSize)
	return w
}

// mark is taken before reading an answer; started(mark) says, after a
// failure, whether any byte of that answer had arrived.
func (w *wireConn) mark() int {
	if w.br.Buffered() > 0 {
		return -1
	}
	return w.got
}

func (w *wireConn) started(mark int) bool { return mark < 0 || w.got != mark }

// countingReader is the socket as the bufio.Reader sees it; n counts the
// bytes read (how the pool tells "no answer byte came" apart
// from a torn answer).
type countingReader struct {
	r io.Reader
	n *int
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += n
	return n, err
}

// answer is a read response: status, the two headers the SDK uses, and
// whether the server closes the connection after it.
type answer struct {
	status     int
	retryAfter string // rare (429/503 only): a string is fine
	close      bool
}

// appendRequest writes one request head (and body) to dst. target is the
// path under the broker's base (the prefix, if any, is in base). head is
// the pre-rendered constant headers (Host, identity, the caller's), auth
// the token source's Authorization line (nil without one).
func appendRequest(dst []byte, method string, base string, target []byte, head, auth []byte, body []byte, hasBody bool) []byte {
	dst = append(dst, method...)
	dst = append(dst, ' ')
	dst = append(dst, base...)
	dst = append(dst, target...)
	dst = append(dst, " HTTP/1.1\r\n"...)
	dst = append(dst, head...)
	dst = append(dst, auth...)
	if hasBody {
		dst = append(dst, "Content-Type: application/json\r\nContent-Length: "...)
		dst = strconv.AppendInt(dst, int64(len(body)), 10)
		dst = append(dst, "\r\n\r\n"...)
		dst = append(dst, body...)
		return dst
	}
	return append(dst, "\r\n"...)
}

// readAnswer reads the next answer, its body appended to body[:0]. 1xx
// interim answers are skipped. The body is framed by Content-Length or by
// Transfer-Encoding: chunked (the broker chunks only the queue listing
// above 256 queues); an answer with neither ends when the connection does
// (a 204 or 304, which a proxy might send, has no body at all).
func (w *wireConn) readAnswer(body []byte) (answer, []byte, error) {
	for {
		a, length, chunked, err := w.readHead()
		if err != nil {
			return a, body[:0], err
		}
		if a.status >= 100 && a.status < 200 {
			continue
		}
		body = body[:0]
		switch {
		case a.status == 204 || a.status == 304:
			// No body, whatever the headers say (RFC 9112 section 6.3).
		case chunked:
			body, err = w.readChunked(body)
		case length >= 0:
			body, err = readN(w.br, body, length)
		default:
			a.close = true
			body, err = readAll(w.br, body)
		}
		return a, body, err
	}
}

func (w *wireConn) readHead() (a answer, length int, chunked bool, err error) {
	length = -1
	line, err := w.br.ReadSlice('\n')
	if err != nil {
		return a, 0, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return a, 0, false, fmt.Errorf("%w: status line %q", errFraming, line)
	}
	for _, b := range line[9:12] {
		if b < '0' || b > '9' {
			return a, 0, false, fmt.Errorf("%w: status line %q", errFraming, line)
		}
		a.status = a.status*10 + int(b-'0')
	}
	if line[7] == '0' {
		a.close = true // HTTP/1.0 keeps alive only when asked, and we never ask
	}
	for {
		h, err := w.br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				err = fmt.Errorf("%w: a header line over %d bytes", errFraming, connBufSize)
			}
			return a, 0, false, err
		}
		h = httpline.TrimCRLF(h)
		if len(h) == 0 {
			return a, length, chunked, nil
		}
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			return a, 0, false, fmt.Errorf("%w: header %q", errFraming, h)
		}
		name, value := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case httpline.EqualFold(name, "content-length"):
			n, ok := httpline.ParseLength(value)
			if !ok {
				return a, 0, false, fmt.Errorf("%w: Content-Length %q", errFraming, value)
			}
			length = n
		case httpline.EqualFold(name, "transfer-encoding"):
			if !httpline.EqualFold(value, "chunked") {
				return a, 0, false, fmt.Errorf("%w: Transfer-Encoding %q", errFraming, value)
			}
			chunked = true
		case httpline.EqualFold(name, "connection"):
			if httpline.EqualFold(value, "close") {
				a.close = true
			}
		case httpline.EqualFold(name, "retry-after"):
			a.retryAfter = string(value)
		}
	}
}

// readChunked reads a chunked body (RFC 9112 section 7.1), trailers
// skipped.
func (w *wireConn) readChunked(body []byte) ([]byte, error) {
	for {
		line, err := w.br.ReadSlice('\n')
		if err != nil {
			return body, err
		}
		line = httpline.TrimCRLF(line)
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 31)
		if err != nil {
			return body, fmt.Errorf("%w: chunk size %q", errFraming, line)
		}
		if n == 0 {
			for { // trailers, up to the empty line
				t, err := w.br.ReadSlice('\n')
				if err != nil {
					return body, err
				}
				if len(httpline.TrimCRLF(t)) == 0 {
					return body, nil
				}
			}
		}
		if body, err = readN(w.br, body, int(n)); err != nil {
			return body, err
		}
		crlf, err := w.br.ReadSlice('\n')
		if err != nil {
			return body, err
		}
		if len(httpline.TrimCRLF(crlf)) != 0 {
			return body, fmt.Errorf("%w: chunk not followed by CRLF", errFraming)
		}
	}
}

// maxAnswer bounds one answer's body (the old transport's limit).
const maxAnswer = 256 << 20

// readN appends exactly n bytes of r to dst.
func readN(r io.Reader, dst []byte, n int) ([]byte, error) {
	if n > maxAnswer-len(dst) {
		return dst, fmt.Errorf("%w: an answer over %d bytes", errFraming, maxAnswer)
	}
	at := len(dst)
	dst = grow(dst, n)
	_, err := io.ReadFull(r, dst[at:at+n])
	return dst, err
}

// readAll appends r up to EOF to dst (an answer framed by the close), up
// to maxAnswer bytes in all: it never reads more than one byte past that,
// the byte that shows the answer is over it.
func readAll(r io.Reader, dst []byte) ([]byte, error) {
	for {
		if cap(dst)-len(dst) < 512 {
			dst = append(dst, make([]byte, 4096)...)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):min(cap(dst), maxAnswer+1)])
		dst = dst[:len(dst)+n]
		if len(dst) > maxAnswer {
			return dst, fmt.Errorf("%w: an answer over %d bytes", errFraming, maxAnswer)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// grow extends dst by n bytes, reallocating only when its capacity is short.
func grow(dst []byte, n int) []byte {
	if need := len(dst) + n; need > cap(dst) {
		nb := make([]byte, len(dst), max(need, 2*cap(dst)))
		copy(nb, dst)
		dst = nb
	}
	return dst[:len(dst)+n]
}

// aLongTimeAgo is a deadline in the past: setting it interrupts a blocked
// read or write at once.
var aLongTimeAgo = time.Unix(1, 0)
