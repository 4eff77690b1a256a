package relay

import (
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"

	"go.uber.org/goleak"
)

// The tests here are the package's own: the handshake, the admission
// before it, and the Client's side of the frames against a stand-in owner
// that the test drives frame by frame (standIn). The Client against the
// broker's owner side, which serves the adopted connections in production
// (server.AdoptRelayConn), is tested in package server
// (relayclient_test.go).

var testSecret = []byte("cell-secret-for-tests")

// TestMain checks for leaked goroutines: none survives a closed Client or
// Server.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// standIn is an owner whose relay port adopts each authenticated
// connection into conns, for the test to read and answer.
type standIn struct {
	adopted atomic.Int64
	conns   chan net.Conn
	mu      sync.Mutex
	held    []net.Conn
}

// startServer serves the relay port on loopback, adopting into a new
// standIn; both close at cleanup.
func startServer(t testing.TB, mod func(*ServerConfig)) (*Server, string, *standIn) {
	t.Helper()
	o := &standIn{conns: make(chan net.Conn, 64)}
	cfg := ServerConfig{Secret: testSecret, Logger: slog.New(slog.DiscardHandler), Adopt: func(c net.Conn) {
		o.adopted.Add(1)
		o.mu.Lock()
		o.held = append(o.held, c)
		o.mu.Unlock()
		select {
		case o.conns <- c:
		default:
		}
	}}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		o.closeAll()
	})
	return srv, ln.Addr().String(), o
}

// closeAll closes every connection adopted so far (the owner went away).
func (o *standIn) closeAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.held {
		c.Close()
	}
	o.held = nil
}

// next waits for the next adopted connection.
func (o *standIn) next(t testing.TB) net.Conn {
	t.Helper()
	select {
	case c := <-o.conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection was adopted")
		return nil
	}
}

// frame is one frame the stand-in read.
type frame struct {
	typ byte
	id  uint64
	p   []byte
}

// serve reads c's frames on a goroutine of its own, answering pings, and
// hands every other frame to the channel it returns (closed with c).
func serve(c net.Conn) <-chan frame {
	ch := make(chan frame, 1024)
	go func() {
		defer close(ch)
		var h [link.HeaderLen]byte
		for {
			if _, err := io.ReadFull(c, h[:]); err != nil {
				return
			}
			typ, id, n := link.ParseHeader(h[:])
			p := make([]byte, n)
			if _, err := io.ReadFull(c, p); err != nil {
				return
			}
			if typ == link.FramePing {
				c.Write(link.AppendHeader(nil, link.FramePong, 0, 0))
				continue
			}
			ch <- frame{typ, id, p}
		}
	}()
	return ch
}

// nextFrame waits for the next frame on ch.
func nextFrame(t testing.TB, ch <-chan frame) frame {
	t.Helper()
	select {
	case f, ok := <-ch:
		if !ok {
			t.Fatal("the connection closed")
		}
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no frame came")
		return frame{}
	}
}

// send writes a frame on c.
func send(t testing.TB, c net.Conn, typ byte, id uint64, p []byte) {
	t.Helper()
	if _, err := c.Write(append(link.AppendHeader(nil, typ, id, len(p)), p...)); err != nil {
		t.Fatal(err)
	}
}

func answer(body string) []byte {
	return []byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

func newClient(t testing.TB, mod func(*ClientConfig)) *Client {
	t.Helper()
	cfg := ClientConfig{Secret: testSecret}
	if mod != nil {
		mod(&cfg)
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func req(target, body string) *link.Request {
	return &link.Request{Tenant: []byte("acme"), Access: 3, Method: []byte("POST"), Target: []byte(target), Body: []byte(body)}
}

// result is how one Client.Go ended.
type result struct {
	r   link.Response
	err error
}

// goCall starts req on c and returns where its end will arrive.
func goCall(t testing.TB, c *Client, addr string, r *link.Request) <-chan result {
	t.Helper()
	ch := make(chan result, 1)
	if err := c.Go(t.Context(), addr, r, func(r link.Response, err error) { ch <- result{r, err} }); err != nil {
		t.Fatal(err)
	}
	return ch
}

// await waits for a call's end.
func await(t testing.TB, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the call never ended")
		return result{}
	}
}
