package gateway

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/link"
)

// FuzzDechunk: dechunk never panics; a chunked answer made of any body
// comes back whole with that body and its Content-Length; anything else
// that is not chunked comes back unchanged.
func FuzzDechunk(f *testing.F) {
	f.Add([]byte(`{"queues":[]}`), 3)
	f.Add([]byte(""), 1)
	f.Add(bytes.Repeat([]byte("x"), 5000), 7)
	f.Fuzz(func(t *testing.T, body []byte, pieces int) {
		pieces = 1 + (pieces&0xff)%8
		var raw bytes.Buffer
		raw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
		for i := 0; i < pieces; i++ {
			part := body[i*len(body)/pieces : (i+1)*len(body)/pieces]
			if len(part) > 0 {
				fmt.Fprintf(&raw, "%x\r\n%s\r\n", len(part), part)
			}
		}
		raw.WriteString("0\r\n\r\n")
		out := dechunk(raw.Bytes())
		want := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if string(out) != want {
			t.Fatalf("dechunk(%q) = %q, want %q", raw.Bytes(), out, want)
		}
		// Arbitrary bytes: no panic; unchanged unless they say chunked.
		if got := dechunk(body); !bytes.Equal(got, body) && !bytes.Contains(bytes.ToLower(body), []byte("transfer-encoding: chunked")) {
			t.Fatalf("dechunk changed an answer that is not chunked: %q -> %q", body, got)
		}
	})
}

// FuzzClientLinkFrames: whatever bytes a client sends on its link after the
// upgrade, the gateway answers or closes the link, never fails, and still
// serves a new link afterwards; the slots and bytes it held come back.
func FuzzClientLinkFrames(f *testing.F) {
	push, _ := link.AppendRequest(nil, 0, linkPushOf("keep"))
	pop, _ := link.AppendRequest(nil, 1, &link.Request{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/pop?queue=q&wait=true&timeout=50")})
	f.Add(push)
	f.Add(append(append([]byte{}, push...), link.AppendHeader(nil, link.FrameCancel, 0, 0)...))
	f.Add(pop)
	f.Add(link.AppendHeader(nil, link.FramePing, 0, 0))
	f.Add(link.AppendHeader(nil, 9, 0, 0))
	f.Add(link.AppendHeader(nil, link.FrameToken, 3, 0))
	f.Add(push[:20])
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	fb := startFakeBroker(f)
	g := startGatewayWith(f, fb.url, func(c *Config) { c.NoLink = true })
	f.Fuzz(func(t *testing.T, data []byte) {
		l := dialTestLink(t, g.Addr().String())
		if _, err := l.nc.Write(data); err != nil {
			return // closed already
		}
		_ = l.nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = io.Copy(io.Discard, l.br)
		l.nc.Close()
		after := dialTestLink(t, g.Addr().String())
		if typ, p := after.roundTrip(t, linkPushOf("keep")); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
			t.Fatalf("after %q: a new link's push: frame %d %q", data, typ, p)
		}
		after.nc.Close()
		deadline := time.Now().Add(5 * time.Second)
		for g.clientLinks.Load() != 0 || g.inflight.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("after %q: %d links, %d bytes still held", data, g.clientLinks.Load(), g.inflight.Load())
			}
			time.Sleep(time.Millisecond)
		}
	})
}
