package relay

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

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
// closed, and the server's handler never runs: a MAC made with another
// secret, a MAC recorded from another handshake (the right secret over
// another server nonce: a replay), and the server's own direction's MAC (a
// reflection). The same client with the right MAC is served (the control:
// its frames are well formed, so a refusal is the handshake's doing).
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
	o := newOwner()
	srv, addr := startServer(t, o, nil)
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
		waitFor(t, "the refusal counted", func() bool { return srv.Refused() == int64(i+1) })
	}
	if n := o.callCount(); n != 0 {
		t.Fatalf("the handler ran %d times for peers that did not prove the secret", n)
	}

	c := rogueHandshake(t, addr, func(sn, cn []byte) []byte { return mac(testSecret, 'c', sn, cn) }, 3)
	ok := make([]byte, 1+macLen) // the status and the server's proof, not checked
	if _, err := io.ReadFull(c, ok); err != nil || ok[0] != statusOK {
		t.Fatalf("the right secret: status %v, %v", ok[:1], err)
	}
	for range 3 {
		var h [link.HeaderLen]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			t.Fatalf("the right secret: reading an answer: %v", err)
		}
		typ, _, n := link.ParseHeader(h[:])
		if _, err := io.ReadFull(c, make([]byte, n)); err != nil || typ != link.FrameAnswer {
			t.Fatalf("the right secret: frame type %d, %v; want an answer", typ, err)
		}
	}
	if n := o.callCount(); n != 3 {
		t.Fatalf("the handler ran %d times for the client that proved the secret; want 3", n)
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
