package relay

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// What an unauthenticated peer can hold (admit.go), over real TCP. What an
// authenticated one can hold without finishing its frames is the broker's
// to bound (server: TestStalledFrameFailsTheAcceptedLink and its kin).

// dialFrom opens a TCP connection to addr from the loopback address src
// (127.0.0.0/8 is all loopback on Linux, so each test "host" has its own
// source address).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// helloOrClosed reads what the server sends first on c: true for its
// hello (the connection is in its handshake), false for a close without a
// byte (shed as it was accepted).
func helloOrClosed(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b := make([]byte, helloLen)
	n, err := io.ReadFull(c, b)
	switch {
	case err == nil && string(b[:4]) == magic:
		return true
	case n == 0 && (errors.Is(err, io.EOF) || isReset(err)):
		return false
	default:
		t.Fatalf("read %d bytes %q, %v: want a hello or a close", n, b[:n], err)
		return false
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// Past MaxHandshakesPerAddr half-open connections from one address, the
// next one from it is closed at once, while another address is served;
// a slot comes back when a handshake ends.
func TestHandshakeCapPerAddress(t *testing.T) {
	var hooked atomic.Int64
	srv, addr, _ := startServer(t, func(cfg *ServerConfig) {
		cfg.MaxHandshakesPerAddr = 4
		cfg.MaxHandshakes = 100
		cfg.OnShed = func() { hooked.Add(1) }
	})
	var held []net.Conn
	for range 4 {
		c := dialFrom(t, "127.0.0.2", addr)
		if !helloOrClosed(t, c) {
			t.Fatal("a handshake under the per-address cap was closed")
		}
		held = append(held, c)
	}
	if n := srv.Handshakes(); n != 4 {
		t.Fatalf("%d handshakes in progress, want 4", n)
	}
	if helloOrClosed(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("a fifth half-open connection from one address got a hello; want it closed at once")
	}
	// The server counts a shed connection just after closing it, then
	// calls OnShed: wait for both, then check nothing else was counted (CI
	// once read the hook's count between the two).
	brokertest.Eventually(t, 5*time.Second, "the shed connection to be counted", func() bool { return srv.Shed() >= 1 && hooked.Load() >= 1 })
	if n, h := srv.Shed(), hooked.Load(); n != 1 || h != 1 {
		t.Fatalf("Shed %d, OnShed called %d times; want 1 and 1", n, h)
	}
	// Another address (the member's, 127.0.0.1) is not held up.
	if err := dialMember(addr); err != nil {
		t.Fatalf("a member at another address: %v", err)
	}
	held[0].Close()
	brokertest.Eventually(t, 5*time.Second, "the closed handshake's slot to come back", func() bool { return srv.Handshakes() == 3 })
	if !helloOrClosed(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("closed after a slot came back")
	}
	// One slot came back, not the address's whole count: the cap is
	// reached again.
	if helloOrClosed(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("a fifth half-open connection from one address got a hello after one slot came back")
	}
}

// lineLog is a slog text handler's output, safe for the server's goroutines.
type lineLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count is the number of lines containing s.
func (l *lineLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// Past MaxHandshakes half-open connections in all, from any addresses, the
// next one is closed at once (an authenticated member included: it dials
// again later); the slots come back as the handshakes time out.
func TestHandshakeCapTotal(t *testing.T) {
	var hooked atomic.Int64
	logged := new(lineLog)
	srv, addr, _ := startServer(t, func(cfg *ServerConfig) {
		cfg.MaxHandshakesPerAddr = 3
		cfg.MaxHandshakes = 5
		cfg.HandshakeTimeout = 500 * time.Millisecond
		cfg.OnRefused = func() { hooked.Add(1) }
		cfg.Logger = slog.New(slog.NewTextHandler(logged, nil))
	})
	for _, src := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"} {
		if !helloOrClosed(t, dialFrom(t, src, addr)) {
			t.Fatalf("a handshake from %s under the caps was closed", src)
		}
	}
	if helloOrClosed(t, dialFrom(t, "127.0.0.4", addr)) {
		t.Fatal("a sixth half-open connection got a hello; want it closed at once")
	}
	if err := dialMember(addr); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("a member's dial while the cap is held: %v, want ErrUnreachable", err)
	}
	// Counted just after the close the client saw: wait for the count.
	brokertest.Eventually(t, 5*time.Second, "both shed connections to be counted", func() bool { return srv.Shed() >= 2 })
	if n := srv.Shed(); n != 2 {
		t.Fatalf("Shed %d, want 2", n)
	}
	// The held handshakes time out (500 ms) and give their slots back.
	brokertest.Eventually(t, 5*time.Second, "the held handshakes to time out", func() bool { return srv.Handshakes() == 0 })
	if err := dialMember(addr); err != nil {
		t.Fatalf("after the held handshakes timed out: %v", err)
	}
	// A handshake's slot is given back just before its refusal is counted.
	brokertest.Eventually(t, 5*time.Second, "the timed-out handshakes to be counted", func() bool { return hooked.Load() >= 5 })
	if r, h := srv.Refused(), hooked.Load(); r != 5 || h != 5 {
		t.Fatalf("Refused %d, OnRefused called %d times; want the 5 timed-out handshakes", r, h)
	}
	// Logged at most once per 10 s each, so a flood cannot flood the log
	// (docs/cell-relay.md): one line for the two shed, one for the five
	// refused.
	if n := logged.count("relay connection closed before its handshake"); n != 1 {
		t.Errorf("%d log lines for 2 shed connections, want 1", n)
	}
	if n := logged.count("relay handshake refused"); n != 1 {
		t.Errorf("%d log lines for 5 refused handshakes, want 1", n)
	}
}

// A connection whose descriptor lies within DescriptorReserve of the limit
// is closed at once; the same connection lower down is served. The limit
// is set just above the descriptors this process uses, and dummy files
// push the next descriptor number into the reserve.
func TestDescriptorReserve(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	base := int(f.Fd())
	f.Close()
	const reserve = 16
	limit := base + 64
	srv, addr, _ := startServer(t, func(cfg *ServerConfig) {
		cfg.DescriptorLimit = limit
		cfg.DescriptorReserve = reserve
	})
	if !helloOrClosed(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("a connection far from the limit was closed")
	}
	var dummies []*os.File
	defer func() {
		for _, d := range dummies {
			d.Close()
		}
	}()
	// Until a dummy's number reaches the reserve: every lower one is then
	// in use (the kernel hands out the lowest free), whatever holes other
	// tests' closed connections left.
	for {
		d, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		dummies = append(dummies, d)
		if int(d.Fd()) >= limit-reserve {
			break
		}
	}
	if helloOrClosed(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatalf("a connection past descriptor %d (limit %d, reserve %d) got a hello; want it closed", limit-reserve, limit, reserve)
	}
	brokertest.Eventually(t, 5*time.Second, "the shed connection to be counted", func() bool { return srv.Shed() >= 1 })
	if n := srv.Shed(); n != 1 {
		t.Fatalf("Shed %d, want 1", n)
	}
	for _, d := range dummies {
		d.Close()
	}
	dummies = nil
	if !helloOrClosed(t, dialFrom(t, "127.0.0.2", addr)) {
		t.Fatal("closed once the descriptors were free again")
	}
}

// The descriptor bound at its exact value: a connection whose descriptor is
// limit − reserve is within the reserve, one below it is not; the default
// reserve is an eighth of the limit, 16 to 1,024 (ServerConfig).
func TestDescriptorReserveBounds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fd, ok := descriptorOf(c)
	if !ok {
		t.Fatal("no descriptor for a TCP connection")
	}
	for _, r := range []struct {
		limit, reserve int
		near           bool
	}{
		{fd + 16, 16, true},  // fd is exactly limit − reserve
		{fd + 17, 16, false}, // one below it
		{fd + 1, 1, true},
		{fd + 2, 1, false},
	} {
		a := admission{limit: r.limit, reserve: r.reserve}
		if got := a.nearDescriptorLimit(c); got != r.near {
			t.Errorf("descriptor %d, limit %d, reserve %d: near = %v, want %v", fd, r.limit, r.reserve, got, r.near)
		}
	}
	p1, p2 := net.Pipe() // no descriptor: never near
	defer p1.Close()
	defer p2.Close()
	if (&admission{limit: 1, reserve: 1}).nearDescriptorLimit(p1) {
		t.Error("a connection without a descriptor was near the limit")
	}
	for _, r := range []struct{ reserve, limit, want int }{
		{0, 1024, 128}, {0, 64, 16}, {0, 128, 16}, {0, 136, 17}, {0, 8192, 1024}, {0, 1 << 20, 1024},
		{5, 1024, 5}, {2000, 1024, 2000}, {-1, 1024, 128},
	} {
		if got := reserveFor(r.reserve, r.limit); got != r.want {
			t.Errorf("reserveFor(%d, %d) = %d, want %d", r.reserve, r.limit, got, r.want)
		}
	}
}

// dialMember passes the handshake to addr as a member would, and closes
// the connection.
func dialMember(addr string) error {
	c, err := Dial(addr, testSecret, 2*time.Second)
	if err == nil {
		c.Close()
	}
	return err
}
