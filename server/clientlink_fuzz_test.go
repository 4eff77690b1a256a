package server

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/link"
)

// FuzzClientLinkUpgrade sends arbitrary bytes as an upgrade request's head
// and arbitrary bytes after it, on one connection, and the same bytes as
// frames behind a valid upgrade on another, to a live server: it answers
// or closes, never panics, and serves a well-formed request on a third
// connection afterwards.
//
//	go test -run '^$' -fuzz FuzzClientLinkUpgrade -fuzztime 60s -fuzzminimizetime 10x ./server/
//
// (an execution takes tens of milliseconds, so the default minimization
// of a new input, a minute, would take most of a short run)
func FuzzClientLinkUpgrade(f *testing.F) {
	ts := serve(f, engine.New(engine.Config{}), openStore(f), Config{Loops: 2, MaxBodyBytes: 64 << 10})
	frame := func(typ byte, id uint64, p []byte) []byte {
		return append(link.AppendHeader(nil, typ, id, len(p)), p...)
	}
	req := func(method, target, body string) []byte {
		p := []byte{0, 0, 0, byte(len(method))}
		p = append(p, method...)
		p = binary.BigEndian.AppendUint32(p, uint32(len(target)))
		p = append(p, target...)
		p = binary.BigEndian.AppendUint32(p, 0)
		return append(p, body...)
	}
	const head = "GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n"
	push := frame(link.FrameRequest, 0, req("POST", "/api/v1/ephemeral/push", `{"queue":"f","messages":[{"payload":1}]}`))
	pop := frame(link.FrameRequest, 1, req("GET", "/api/v1/ephemeral/pop?queue=f&wait=true&timeout=50", ""))
	f.Add([]byte(head), append(push, pop...))
	f.Add([]byte(head), frame(link.FrameCancel, 1, nil))
	f.Add([]byte(head), frame(link.FramePing, 0, nil))
	f.Add([]byte(head), frame(link.FrameToken, 3, []byte("Bearer x")))
	f.Add([]byte(head), frame(9, 0, []byte{1, 2, 3}))
	f.Add([]byte(head), frame(link.FrameRequest, 0, []byte{0, 4, 'a', 'c', 'm', 'e', 3}))
	f.Add([]byte(head), link.AppendHeader(nil, link.FrameRequest, 0, 1<<30))
	f.Add([]byte(head), frame(link.FrameRequest, 7, req("GET", "/api/v1/ephemeral/link", "")))
	f.Add([]byte("GET /api/v1/ephemeral/link HTTP/1.1\r\nUpgrade: queen-link/2, queen-link/1,,\r\n\r\n"), push)
	f.Add([]byte("POST /api/v1/ephemeral/link HTTP/1.1\r\nContent-Length: 3\r\nUpgrade: queen-link/1\r\n\r\nabc"), push)
	f.Add([]byte("GET /api/v1/ephemeral/link HTTP/1.0\r\nUpgrade: queen-link\r\n\r\n"), []byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte("GET /api/v1/system/gateway-link HTTP/1.1\r\nUpgrade: queen-link/1\r\n\r\n"), push)
	f.Fuzz(func(t *testing.T, head1, after []byte) {
		exchange(t, ts.addr, append(head1, after...))
		exchange(t, ts.addr, append([]byte(head), after...))
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /api/v1/ephemeral/queues/nosuch/depth HTTP/1.1\r\nHost: b\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, _ := io.ReadAtLeast(c, buf, len("HTTP/1.1 404"))
		if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 404") {
			t.Fatalf("after the fuzzed connections, a well-formed request: %q", buf[:n])
		}
	})
}

// exchange writes b on a new connection and reads whatever comes back
// until the server closes it or is silent for a moment.
func exchange(t *testing.T, addr string, b []byte) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(b) // the server may close before it has read everything
	buf := make([]byte, 4096)
	for {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}
