//go:build reliability

package reliability

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Client links (docs/link.md): what a client that upgrades a connection to
// a link and then reads none of its answers can make the broker hold.

// linkFrames is n request frames of method target on a client link,
// written from docs/link.md: a 13-byte header (length, type 1, stream id),
// then no tenant, no access level, the method, the target, no header lines.
func linkFrames(n int, method, target string) []byte {
	var out []byte
	for id := range n {
		p := []byte{0, 0, 0, byte(len(method))}
		p = append(p, method...)
		p = binary.BigEndian.AppendUint32(p, uint32(len(target)))
		p = append(p, target...)
		p = binary.BigEndian.AppendUint32(p, 0)
		var h [13]byte
		binary.BigEndian.PutUint32(h[0:4], uint32(len(p)))
		h[4] = 1
		binary.BigEndian.PutUint64(h[5:13], uint64(id))
		out = append(append(out, h[:]...), p...)
	}
	return out
}

// dialLink upgrades a connection with a 4 KiB receive buffer to a client
// link: the answers pile up in the broker, not in this process's socket.
func dialLink(addr string) (net.Conn, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	_, err = conn.Write([]byte("GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: queen-link/1\r\n\r\n"))
	if err == nil {
		var resp *http.Response
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err = http.ReadResponse(bufio.NewReader(conn), nil); err == nil && resp.StatusCode != 101 {
			err = fmt.Errorf("the upgrade: %s", resp.Status)
		}
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// TestUnreadLinkAnswers: TestUnreadPipelinedAnswers on a client link. 1,000
// listings of 10,000 queues (each ~2.6 MB) asked on one link (75 KB sent),
// never read: over HTTP a connection serves one listing at a time, streamed;
// on a link every request is served at once, so the bound must come from
// the link.
func TestUnreadLinkAnswers(t *testing.T) {
	c := newCase(t, nil)
	nq := scaledN(10_000, 2_000)
	seed := newCodes()
	flood(context.Background(), c.addr, 4, 16, seed, func(conn int) func() []byte {
		i := conn
		return func() []byte {
			if i >= nq {
				return nil
			}
			i += 4
			return pushReq(fmt.Sprintf("listed-%d", i), "", 1, "1")
		}
	}, nil)
	c.checkCodes("seed ", seed, "201")
	size, err := listingSize(c.b.URL())
	if err != nil {
		t.Fatal(err)
	}
	c.f.Extra["listingBytes"] = float64(size)
	conn, err := dialLink(c.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	frames := linkFrames(1000, "GET", "/api/v1/ephemeral/queues")
	c.f.Extra["bytesSent"] = float64(len(frames))
	_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(frames); err != nil && !strings.Contains(err.Error(), "reset") {
		c.fail("writing the listings: %v", err)
	}
	select {
	case <-c.ctx.Done():
	case <-time.After(scaled(30*time.Second, 8*time.Second)):
	}
	c.endLoad()
	conn.Close()
	c.fallback()
}
