package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A client link spoken byte by byte from docs/link.md, not through the SDK:
// the upgrade, then 13-byte frame headers (length u32, type u8, stream u64,
// big-endian) and request payloads (tenant u16+bytes, access u8, method
// u8+bytes, target u32+bytes, headers u32+bytes, body).

const (
	frRequest = 1
	frAnswer  = 2
	frCancel  = 3
	frRefuse  = 4
	frPing    = 5
	frPong    = 6
	frToken   = 7
)

// rawLink is one client link to a base URL.
type rawLink struct {
	t    *testing.T
	nc   net.Conn
	br   *bufio.Reader
	next uint64
}

// upgradeRaw sends the upgrade with the given Upgrade header (none when
// empty) and bearer token, and returns the answer's head and the
// connection.
func upgradeRaw(t *testing.T, base, upgrade, bearer string) (*http.Response, *rawLink) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: %s\r\n", u.Host)
	if upgrade != "" {
		fmt.Fprintf(&b, "Connection: Upgrade\r\nUpgrade: %s\r\n", upgrade)
	}
	if bearer != "" {
		fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", bearer)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(nc, b.String()); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the upgrade's answer: %v", err)
	}
	if resp.StatusCode != 101 {
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	return resp, &rawLink{t: t, nc: nc, br: br}
}

// dialLink opens a client link with bearer's identity; it fails t unless
// the answer is 101.
func dialLink(t *testing.T, base, bearer string) *rawLink {
	t.Helper()
	resp, l := upgradeRaw(t, base, "queen-link/1", bearer)
	if resp.StatusCode != 101 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade: %d %s, want 101", resp.StatusCode, body)
	}
	return l
}

// frame writes one frame.
func (l *rawLink) frame(typ byte, id uint64, p []byte) {
	l.t.Helper()
	h := make([]byte, 13, 13+len(p))
	binary.BigEndian.PutUint32(h[0:4], uint32(len(p)))
	h[4] = typ
	binary.BigEndian.PutUint64(h[5:13], id)
	if _, err := l.nc.Write(append(h, p...)); err != nil {
		l.t.Fatalf("writing a frame: %v", err)
	}
}

// requestPayload encodes a request of a client link (no tenant, level 0).
func requestPayload(method, target, body string) []byte {
	var p []byte
	p = binary.BigEndian.AppendUint16(p, 0)
	p = append(p, 0, byte(len(method)))
	p = append(p, method...)
	p = binary.BigEndian.AppendUint32(p, uint32(len(target)))
	p = append(p, target...)
	p = binary.BigEndian.AppendUint32(p, 0)
	return append(p, body...)
}

// send starts a request on a new stream and returns its id.
func (l *rawLink) send(method, target, body string) uint64 {
	l.t.Helper()
	id := l.next
	l.next++
	l.frame(frRequest, id, requestPayload(method, target, body))
	return id
}

// sendCancelled writes a request and the cancel of its stream in one
// write, so that the gateway reads both before the answer can come.
func (l *rawLink) sendCancelled(method, target, body string) uint64 {
	l.t.Helper()
	id := l.next
	l.next++
	p := requestPayload(method, target, body)
	b := make([]byte, 13, 2*13+len(p))
	binary.BigEndian.PutUint32(b[0:4], uint32(len(p)))
	b[4] = frRequest
	binary.BigEndian.PutUint64(b[5:13], id)
	b = append(b, p...)
	c := make([]byte, 13)
	c[4] = frCancel
	binary.BigEndian.PutUint64(c[5:13], id)
	if _, err := l.nc.Write(append(b, c...)); err != nil {
		l.t.Fatalf("writing frames: %v", err)
	}
	return id
}

// readFrame reads the next frame, within wait.
func (l *rawLink) readFrame(wait time.Duration) (typ byte, id uint64, p []byte, err error) {
	_ = l.nc.SetReadDeadline(time.Now().Add(wait))
	h := make([]byte, 13)
	if _, err = io.ReadFull(l.br, h); err != nil {
		return 0, 0, nil, err
	}
	p = make([]byte, binary.BigEndian.Uint32(h[0:4]))
	if _, err = io.ReadFull(l.br, p); err != nil {
		return 0, 0, nil, err
	}
	return h[4], binary.BigEndian.Uint64(h[5:13]), p, nil
}

// linkEnd is how a stream ended: an answer, or a refuse frame's reason.
type linkEnd struct {
	answer reply
	raw    []byte // the answer frame's payload
	refuse byte
}

// await reads frames until stream id ends (within 20 s), keeping the
// others' ends in got.
func (l *rawLink) await(id uint64, got map[uint64]linkEnd) linkEnd {
	l.t.Helper()
	if e, ok := got[id]; ok {
		delete(got, id)
		return e
	}
	for {
		typ, sid, p, err := l.readFrame(20 * time.Second)
		if err != nil {
			l.t.Fatalf("awaiting stream %d: %v", id, err)
		}
		var e linkEnd
		switch typ {
		case frAnswer:
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(p)), nil)
			if err != nil {
				l.t.Fatalf("stream %d's answer does not parse: %v: %q", sid, err, p)
			}
			body, _ := io.ReadAll(resp.Body)
			e = linkEnd{answer: reply{Status: resp.StatusCode, Header: resp.Header, Body: body}, raw: p}
		case frRefuse:
			if len(p) != 1 {
				l.t.Fatalf("a refuse frame of %d bytes", len(p))
			}
			e = linkEnd{refuse: p[0]}
		case frPong:
			continue
		default:
			l.t.Fatalf("unexpected frame type %d", typ)
		}
		if sid == id {
			return e
		}
		if got == nil {
			l.t.Fatalf("stream %d ended while awaiting %d", sid, id)
		}
		got[sid] = e
	}
}

// call sends one request and awaits its answer, which must be one.
func (l *rawLink) call(method, target, body string) reply {
	l.t.Helper()
	e := l.await(l.send(method, target, body), nil)
	if e.refuse != 0 {
		l.t.Fatalf("%s %s: refused with reason %d, want an answer", method, target, e.refuse)
	}
	return e.answer
}

// closed reports whether the gateway closes the link within wait (reading
// and dropping any frames before the end).
func (l *rawLink) closed(wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if _, _, _, err := l.readFrame(time.Until(deadline)); err != nil {
			var ne net.Error
			if ok := asNetErr(err, &ne); ok && ne.Timeout() {
				return false
			}
			return true
		}
	}
	return false
}

func asNetErr(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	if ok {
		*ne = e
	}
	return ok
}
