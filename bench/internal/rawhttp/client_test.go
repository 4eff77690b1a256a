package rawhttp

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// fakeConn is an in-memory connection that answers every request written to
// it with one canned response, so a benchmark measures the client's own cost
// per request (no network, no server).
type fakeConn struct {
	mu      sync.Mutex
	cond    *sync.Cond
	resp    []byte
	pending int    // requests written and not yet answered
	out     []byte // response bytes not yet read
	closed  bool
}

var requestLine = []byte(" HTTP/1.1\r\n")

func newFakeConn(resp string) *fakeConn {
	f := &fakeConn{resp: []byte(resp)}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *fakeConn) Write(p []byte) (int, error) {
	f.mu.Lock()
	f.pending += bytes.Count(p, requestLine)
	f.cond.Broadcast()
	f.mu.Unlock()
	return len(p), nil
}

func (f *fakeConn) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.out) == 0 && f.pending == 0 && !f.closed {
		f.cond.Wait()
	}
	if f.closed {
		return 0, io.EOF
	}
	for f.pending > 0 {
		f.out = append(f.out, f.resp...)
		f.pending--
	}
	n := copy(p, f.out)
	f.out = f.out[:copy(f.out, f.out[n:])]
	return n, nil
}

func (f *fakeConn) Close() error {
	f.mu.Lock()
	f.closed = true
	f.cond.Broadcast()
	f.mu.Unlock()
	return nil
}

func (f *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (f *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (f *fakeConn) SetDeadline(time.Time) error      { return nil }
func (f *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fakeConn) SetWriteDeadline(time.Time) error { return nil }

const pushed = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{\"pushed\":1}"

var pushBody = []byte(`{"queue":"requests","messages":[{"payload":"0123456789012345678901234567890123456789012345678901234567890"}]}`)

func TestReadPipelined(t *testing.T) {
	f := newFakeConn(pushed)
	c := NewConn(f, "x", 0)
	for range 3 {
		c.WritePost("/api/v1/ephemeral/push", pushBody)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		status, body, err := c.Read()
		if err != nil || status != 201 || string(body) != `{"pushed":1}` {
			t.Fatalf("Read = %d %q %v", status, body, err)
		}
	}
}

func TestReadRejectsUnframed(t *testing.T) {
	f := newFakeConn("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	c := NewConn(f, "x", 0)
	c.WriteGet([]byte("/health"))
	_ = c.Flush()
	if _, _, err := c.Read(); err == nil {
		t.Fatal("a chunked answer was accepted")
	}
}

// recordConn keeps what the client writes.
type recordConn struct {
	*fakeConn
	written bytes.Buffer
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.written.Write(p)
	return r.fakeConn.Write(p)
}

// SetBearer puts the token on every request, GET and POST, and the requests
// stay well framed (net/http reads them back); without it none carries one.
func TestSetBearer(t *testing.T) {
	for _, token := range []string{"tok.en", ""} {
		rc := &recordConn{fakeConn: newFakeConn(pushed)}
		c := NewConn(rc, "x", 0)
		c.SetBearer(token)
		c.WriteGet([]byte("/health"))
		c.WritePost("/api/v1/ephemeral/push", pushBody)
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(&rc.written)
		for _, method := range []string{"GET", "POST"} {
			req, err := http.ReadRequest(r)
			if err != nil {
				t.Fatalf("token %q: %s request unreadable: %v", token, method, err)
			}
			body, _ := io.ReadAll(req.Body)
			want := ""
			if token != "" {
				want = "Bearer " + token
			}
			if req.Method != method || req.Header.Get("Authorization") != want {
				t.Fatalf("token %q: %s with Authorization %q, want %s with %q", token, req.Method, req.Header.Get("Authorization"), method, want)
			}
			if method == "POST" && !bytes.Equal(body, pushBody) {
				t.Fatalf("POST body %q", body)
			}
		}
	}
}

// BenchmarkClientRaw is one push round trip through this client: the
// client's CPU and allocations per request.
func BenchmarkClientRaw(b *testing.B) {
	c := NewConn(newFakeConn(pushed), "127.0.0.1:6632", 0)
	b.ReportAllocs()
	for b.Loop() {
		c.WritePost("/api/v1/ephemeral/push", pushBody)
		if err := c.Flush(); err != nil {
			b.Fatal(err)
		}
		if status, _, err := c.Read(); err != nil || status != 201 {
			b.Fatal(status, err)
		}
	}
}

// BenchmarkClientNetHTTP is the same round trip through net/http's client
// and Transport, for comparison.
func BenchmarkClientNetHTTP(b *testing.B) {
	f := newFakeConn(pushed)
	tr := &http.Transport{
		DialContext:         func(context.Context, string, string) (net.Conn, error) { return f, nil },
		MaxIdleConnsPerHost: 1,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post("http://127.0.0.1:6632/api/v1/ephemeral/push", "application/json", bytes.NewReader(pushBody))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			b.Fatal(resp.StatusCode)
		}
	}
}
