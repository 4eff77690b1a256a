package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/link"
)

// A rogue member against the broker's relay port as production wires it
// (startRelayOwner): it speaks its half of the handshake, written from
// docs/cell-relay.md ("The protocol"), with a proof of its choosing and,
// without waiting for the broker's status, sends pushes right behind it.
// The broker must serve none of them unless the proof is right. (cell/relay
// shows the same at its Adopt; this is the broker behind it.)

// rogueMember dials addr, reads the hello, and writes its reply (the MAC
// that proof makes from the server's nonce and its own) followed by the
// frames. It returns the connection, read no further.
func rogueMember(t *testing.T, addr string, proof func(sn, cn []byte) []byte, frames []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	hello := make([]byte, 4+1+32) // "QRLY", version 1, the server's nonce
	if _, err := io.ReadFull(c, hello); err != nil || string(hello[:5]) != "QRLY\x01" {
		t.Fatalf("the relay port's hello: %q, %v", hello, err)
	}
	sn, cn := hello[5:], make([]byte, 32)
	for i := range cn {
		cn[i] = byte(i)
	}
	out := append(append([]byte("QRLY\x01"), cn...), proof(sn, cn)...)
	if _, err := c.Write(append(out, frames...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// memberMAC is the client's proof: HMAC-SHA256(secret, "c" | sn | cn).
func memberMAC(secret []byte, label byte, a, b []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte{label})
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

func TestRogueMemberIgnoringTheRefusalIsNeverServed(t *testing.T) {
	o := startRelayOwner(t, RelayOptions{})
	q := o.queue(t)
	var frames []byte
	for i := range 3 {
		frames, _ = link.AppendRequest(frames, uint64(i), pushReq(q, "rogue"+strconv.Itoa(i)))
	}
	stale := make([]byte, 32) // a server nonce of some earlier handshake
	for i := range stale {
		stale[i] = 0xee
	}
	for _, r := range []struct {
		name  string
		proof func(sn, cn []byte) []byte
	}{
		{"another secret", func(sn, cn []byte) []byte { return memberMAC([]byte("not-the-cell-secret"), 'c', sn, cn) }},
		{"a replayed MAC", func(sn, cn []byte) []byte { return memberMAC(testSecret, 'c', stale, cn) }},
		{"the server's direction", func(sn, cn []byte) []byte { return memberMAC(testSecret, 's', sn, cn) }},
		{"no MAC at all", func(sn, cn []byte) []byte { return make([]byte, 32) }},
	} {
		c := rogueMember(t, o.addr, r.proof, frames)
		status := make([]byte, 1)
		if _, err := io.ReadFull(c, status); err != nil || status[0] != 1 {
			t.Fatalf("%s: status %v, %v; want the refusal (1)", r.name, status, err)
		}
		if rest, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) || len(rest) != 0 {
			t.Fatalf("%s: after the refusal read %q, %v; want the connection closed", r.name, rest, err)
		}
	}
	var d engine.DepthInfo
	if served, err := o.s.cell.served.Get(), o.e.Depth(identity.DefaultTenant, q, "", &d); served != 0 || err == nil {
		t.Fatalf("the broker served %d relayed requests from members that did not prove the secret (the queue: %+v, %v)", served, d, err)
	}

	// The control: the same member with the right MAC is served, frames
	// sent behind the handshake included.
	c := rogueMember(t, o.addr, func(sn, cn []byte) []byte { return memberMAC(testSecret, 'c', sn, cn) }, frames)
	ok := make([]byte, 1+32) // the status and the broker's proof, not checked
	if _, err := io.ReadFull(c, ok); err != nil || ok[0] != 0 {
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
	if served, n := o.s.cell.served.Get(), pending(t, o.e, q); served != 3 || n != 3 {
		t.Fatalf("the member that proved the secret: %d served, %d pending; want 3 and 3", served, n)
	}
}
