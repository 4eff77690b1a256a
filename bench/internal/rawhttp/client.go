// Package rawhttp is the load tool's HTTP/1.1 client: one keep-alive
// connection, requests written into a bufio.Writer (so several can leave in
// one write: pipelining), responses read as a status line, headers and a
// Content-Length body into a reused buffer. It does only what the broker
// answers (no chunked bodies, no redirects, no TLS) and allocates nothing
// per request once warm, so the broker and not the client is what a run
// measures.
package rawhttp

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

// Conn is one HTTP/1.1 connection. It is not safe for concurrent use, but
// one goroutine may write while another reads (Write*/Flush on one side,
// Read on the other).
type Conn struct {
	nc   net.Conn
	w    *bufio.Writer
	r    *bufio.Reader
	host string
	// auth is "Authorization: Bearer <token>\r\n" when a token was set,
	// written into every request; empty otherwise.
	auth []byte
	num  [20]byte
	body []byte
	// Close is set when the last response said "Connection: close".
	Close bool
}

// Dial connects to addr (host:port) with read and write buffers of bufSize
// bytes (0: 16 KiB).
func Dial(addr string, bufSize int) (*Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return NewConn(nc, addr, bufSize), nil
}

// NewConn wraps an established connection; host goes in the Host header.
func NewConn(nc net.Conn, host string, bufSize int) *Conn {
	if bufSize <= 0 {
		bufSize = 16 << 10
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return &Conn{nc: nc, w: bufio.NewWriterSize(nc, bufSize), r: bufio.NewReaderSize(nc, bufSize), host: host}
}

// SetBearer sends "Authorization: Bearer token" on every later request
// (none when token is empty).
func (c *Conn) SetBearer(token string) {
	c.auth = nil
	if token != "" {
		c.auth = []byte("Authorization: Bearer " + token + "\r\n")
	}
}

// NetConn is the underlying connection (to set deadlines or close it).
func (c *Conn) NetConn() net.Conn { return c.nc }

// CloseConn closes the connection; a blocked Read returns an error.
func (c *Conn) CloseConn() error { return c.nc.Close() }

// WriteGet buffers a GET of target (path and query, already escaped).
func (c *Conn) WriteGet(target []byte) {
	c.w.WriteString("GET ")
	c.w.Write(target)
	c.w.WriteString(" HTTP/1.1\r\nHost: ")
	c.w.WriteString(c.host)
	c.w.WriteString("\r\n")
	c.w.Write(c.auth)
	c.w.WriteString("\r\n")
}

// WritePost buffers a POST of a JSON body to path.
func (c *Conn) WritePost(path string, body []byte) {
	c.w.WriteString("POST ")
	c.w.WriteString(path)
	c.w.WriteString(" HTTP/1.1\r\nHost: ")
	c.w.WriteString(c.host)
	c.w.WriteString("\r\n")
	c.w.Write(c.auth)
	c.w.WriteString("Content-Type: application/json\r\nContent-Length: ")
	c.w.Write(strconv.AppendInt(c.num[:0], int64(len(body)), 10))
	c.w.WriteString("\r\n\r\n")
	c.w.Write(body)
}

// Flush sends what was buffered.
func (c *Conn) Flush() error { return c.w.Flush() }

// ErrFraming is a response the client cannot read (no Content-Length, a
// malformed status line or header).
var ErrFraming = errors.New("rawhttp: malformed or unsupported response framing")

// Read reads the next response: its status and its body, which stays valid
// until the next Read.
func (c *Conn) Read() (status int, body []byte, err error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, nil, fmt.Errorf("%w: status line %q", ErrFraming, line)
	}
	for _, b := range line[9:12] {
		if b < '0' || b > '9' {
			return 0, nil, fmt.Errorf("%w: status line %q", ErrFraming, line)
		}
		status = status*10 + int(b-'0')
	}
	length := -1
	c.Close = false
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		h = httpline.TrimCRLF(h)
		if len(h) == 0 {
			break
		}
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			return 0, nil, fmt.Errorf("%w: header %q", ErrFraming, h)
		}
		name, value := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case httpline.EqualFold(name, "content-length"):
			n, ok := httpline.ParseLength(value)
			if !ok {
				return 0, nil, fmt.Errorf("%w: Content-Length %q", ErrFraming, value)
			}
			length = n
		case httpline.EqualFold(name, "connection"):
			c.Close = httpline.EqualFold(value, "close")
		case httpline.EqualFold(name, "transfer-encoding"):
			return 0, nil, fmt.Errorf("%w: Transfer-Encoding %q", ErrFraming, value)
		}
	}
	if status == 100 {
		return c.Read() // an interim answer to Expect: 100-continue
	}
	if length < 0 {
		return 0, nil, fmt.Errorf("%w: no Content-Length", ErrFraming)
	}
	if cap(c.body) < length {
		c.body = make([]byte, length, max(length, 2*cap(c.body)))
	}
	c.body = c.body[:length]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		return 0, nil, err
	}
	return status, c.body, nil
}
