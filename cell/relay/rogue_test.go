package relay

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
)

// A rogue client: it speaks its half of the handshake with a reply of its
// choosing and, without waiting for the server's status or proof, sends
// request frames at once, as a peer that ignores the server's answer
// would. The honest Client never does that (it stops at a refusal or a bad
// proof), so only such a client shows that the server itself refuses to
// read a frame from a peer that did not prove the secret.

// rogueHandshake dials addr, reads the server's hello, and writes the reply
// that reply builds from the server's nonce followed by frames request
// frames. It returns the connection, read no further.
func rogueHandshake(t *testing.T, addr string, reply func(sn, cn []byte) []byte, frames int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	sn, err := readHello(c, helloLen)
	if err != nil {
		t.Fatalf("the server's hello: %v", err)
	}
	cn := make([]byte, nonceLen)
	for i := range cn {
		cn[i] = byte(i)
	}
	out := append(hello(cn), reply(sn, cn)...)
	for i := range frames {
		out, _ = link.AppendRequest(out, uint64(i+1), req("/echo", "rogue"))
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	return c
}

// A client whose reply does not prove the secret, and which sends request
// frames right behind it anyway, is answered the refusal status and
// closed, and its connection never reaches Adopt (which the broker serves
// frames on): a MAC made with another secret, a MAC recorded from another
// handshake (the right secret over another server nonce: a replay), and
// the server's own direction's MAC (a reflection). The same client with
// the right MAC is adopted, and the adopter reads its frames whole, those
// sent right behind the handshake included (the control: its frames are
// well formed, so a refusal is the handshake's doing).
func TestRogueClientIgnoringTheRefusalIsNeverServed(t *testing.T) {
	stale := make([]byte, nonceLen) // a server nonce of some earlier handshake
	for i := range stale {
		stale[i] = 0xee
	}
	rogues := []struct {
		name  string
		reply func(sn, cn []byte) []byte
	}{
		{"another secret", func(sn, cn []byte) []byte { return mac([]byte("not-the-cell-secret"), 'c', sn, cn) }},
		{"a replayed MAC", func(sn, cn []byte) []byte { return mac(testSecret, 'c', stale, cn) }},
		{"the server's direction", func(sn, cn []byte) []byte { return mac(testSecret, 's', sn, cn) }},
		{"no MAC at all", func(sn, cn []byte) []byte { return make([]byte, macLen) }},
	}
	srv, addr, o := startServer(t, nil)
	for i, r := range rogues {
		c := rogueHandshake(t, addr, r.reply, 3)
		status := make([]byte, 1)
		if _, err := io.ReadFull(c, status); err != nil || status[0] != statusDeny {
			t.Fatalf("%s: status %v, %v; want the refusal (%d)", r.name, status, err, statusDeny)
		}
		rest, err := io.ReadAll(c)
		if errors.Is(err, os.ErrDeadlineExceeded) || len(rest) != 0 {
			t.Fatalf("%s: after the refusal read %q, %v; want the connection closed by the server", r.name, rest, err)
		}
		brokertest.Eventually(t, 5*time.Second, "the refusal counted", func() bool { return srv.Refused() == int64(i+1) })
	}
	if n := o.adopted.Load(); n != 0 {
		t.Fatalf("%d connections adopted from peers that did not prove the secret", n)
	}

	c := rogueHandshake(t, addr, func(sn, cn []byte) []byte { return mac(testSecret, 'c', sn, cn) }, 3)
	ok := make([]byte, 1+macLen) // the status and the server's proof, not checked
	if _, err := io.ReadFull(c, ok); err != nil || ok[0] != statusOK {
		t.Fatalf("the right secret: status %v, %v", ok[:1], err)
	}
	frames := serve(o.next(t))
	for i := range 3 {
		f := nextFrame(t, frames)
		var r link.Request
		if f.typ != link.FrameRequest || f.id != uint64(i+1) || link.DecodeRequest(f.p, &r) != nil || string(r.Body) != "rogue" {
			t.Fatalf("the adopter read frame %d on stream %d (%q); want the request sent behind the handshake on %d", f.typ, f.id, f.p, i+1)
		}
	}
	if n := o.adopted.Load(); n != 1 {
		t.Fatalf("%d connections adopted, want the one that proved the secret", n)
	}
}

// A client with another secret is refused at the handshake and never
// adopted; so is a peer that skips the handshake and sends a frame. (The
// honest client stops at the refusal by itself, so the adoption count here
// shows little: TestRogueClientIgnoringTheRefusalIsNeverServed sends
// frames behind a bad reply.)
func TestWrongSecretIsRefused(t *testing.T) {
	srv, addr, o := startServer(t, nil)
	c := newClient(t, func(cfg *ClientConfig) { cfg.Secret = []byte("not-the-secret") })
	_, err := c.Do(t.Context(), addr, req("/echo", "x"))
	if !errors.Is(err, ErrAuth) || !ForwardFailed(err) || MaybeDelivered(err) {
		t.Fatalf("wrong secret: %v", err)
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	f, _ := link.AppendRequest(nil, 1, req("/echo", string(make([]byte, 100))))
	nc.Write(f) // in place of the handshake reply
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, _ := io.ReadAll(nc)
	if len(rest) != helloLen { // the hello, then closed
		t.Fatalf("a peer without the handshake read %d bytes: %q", len(rest), rest)
	}
	brokertest.Eventually(t, 5*time.Second, "two refusals", func() bool { return srv.Refused() == 2 })
	if n := o.adopted.Load(); n != 0 {
		t.Fatalf("%d unauthenticated connections adopted", n)
	}
}

// A client also refuses a server that does not know the secret.
func TestServerWithWrongSecretIsRefused(t *testing.T) {
	_, addr, _ := startServer(t, func(cfg *ServerConfig) { cfg.Secret = []byte("other") })
	c := newClient(t, nil)
	if _, err := c.Do(t.Context(), addr, req("/echo", "x")); !errors.Is(err, ErrAuth) {
		t.Fatalf("got %v", err)
	}
}

// A rogue server: it sends its hello, reads the client's reply, and answers
// "accepted" with a proof of its choosing, without knowing the secret (or
// reflecting the client's own MAC back). The client refuses every such
// server with ErrAuth; the same server with the right proof is accepted
// (the control). A server that closes before its proof is complete is
// unreachable, not accepted.
func TestRogueServerWithoutTheProofIsRefused(t *testing.T) {
	sn := make([]byte, nonceLen)
	for i := range sn {
		sn[i] = byte(100 + i)
	}
	for _, r := range []struct {
		name  string
		proof func(cn, clientMAC []byte) []byte // status and proof, written whole, then closed
		kind  error
	}{
		{"another secret", func(cn, _ []byte) []byte {
			return append([]byte{statusOK}, mac([]byte("not-the-cell-secret"), 's', cn, sn)...)
		}, ErrAuth},
		{"the client's MAC reflected", func(_, clientMAC []byte) []byte { return append([]byte{statusOK}, clientMAC...) }, ErrAuth},
		{"no proof at all", func(_, _ []byte) []byte { return append([]byte{statusOK}, make([]byte, macLen)...) }, ErrAuth},
		{"a proof cut short", func(cn, _ []byte) []byte { return append([]byte{statusOK}, mac(testSecret, 's', cn, sn)[:macLen-1]...) }, ErrUnreachable},
		{"the right proof", func(cn, _ []byte) []byte { return append([]byte{statusOK}, mac(testSecret, 's', cn, sn)...) }, nil},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			ln.Close()
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Write(hello(sn))
			rest, err := readHello(c, replyLen)
			if err != nil {
				return
			}
			c.Write(r.proof(rest[:nonceLen], rest[nonceLen:]))
		}()
		c, err := Dial(ln.Addr().String(), testSecret, 5*time.Second)
		if c != nil {
			c.Close()
		}
		if r.kind == nil {
			if err != nil {
				t.Errorf("%s: %v, want accepted", r.name, err)
			}
			continue
		}
		if !errors.Is(err, r.kind) {
			t.Errorf("%s: %v, want %v", r.name, err, r.kind)
		}
	}
}
