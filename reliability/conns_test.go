//go:build reliability

package reliability

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Connections: idle ones, slow heads, and more than the broker may hold
// open. The first two are fine today and asserted so they stay so.

// TestSlowloris: 500 connections each sending a request head one byte a
// second: each must be closed within the head timeout (10 s) and a 3 s
// margin. Before the fixes: closed at ~10 s (fine).
func TestSlowloris(t *testing.T) {
	c := newCase(t, nil)
	n := scaledN(500, 100)
	ctx, cancel := context.WithTimeout(c.ctx, 25*time.Second)
	defer cancel()
	cs := newCodes()
	var wg sync.WaitGroup
	worstClose := startSlowHeads(ctx, t, &wg, c.addr, n, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", time.Second, cs)
	wg.Wait()
	c.endLoad()
	worst := worstClose()
	c.f.Extra["conns"] = float64(n)
	c.f.Extra["worstCloseS"] = worst.Seconds()
	// A head that never completes is closed, or answered 400 (the only
	// refusal of shape the spec has); never left open.
	c.checkCodes("slowloris ", cs, "closed", "400 ephemeral_bad_request")
	if worst > 13*time.Second {
		c.fail("a slow head was still open %.1f s after it began; want closed within 13 s", worst.Seconds())
	}
	c.fallback()
}

// dialHealth opens n connections, each served one GET /health on
// keep-alive and then left idle; conns are the ones that were served.
// Dials and requests run 64 at a time, each given 3 s.
func dialHealth(addr string, n int, cs *codes) []net.Conn {
	var mu sync.Mutex
	var conns []net.Conn
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				cs.addKey("refused")
				return
			}
			_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
			resp, err := func() (*http.Response, error) {
				if _, err := conn.Write(request("GET", "/health", nil)); err != nil {
					return nil, err
				}
				return http.ReadResponse(bufio.NewReader(conn), nil)
			}()
			if err != nil {
				cs.addKey("unanswered")
			} else {
				resp.Body.Close()
				cs.addKey(strconv.Itoa(resp.StatusCode))
			}
			_ = conn.SetDeadline(time.Time{})
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		})
	}
	wg.Wait()
	return conns
}

// TestIdleConnections: 5,000 connections served once and left idle. Before
// the fixes: 20 MiB for 5,000 (fine). Asserted: the RSS bound, every one
// served, and at most 16 KiB each.
func TestIdleConnections(t *testing.T) {
	c := newCase(t, nil)
	n := scaledN(5000, 1000)
	before := c.rss.now()
	cs := newCodes()
	conns := dialHealth(c.addr, n, cs)
	during := c.rss.now()
	per := float64(during-before) / float64(n)
	c.f.Extra["conns"] = float64(n)
	c.f.Extra["bytesPerConn"] = per
	c.endLoad()
	c.checkCodes("health ", cs, "200")
	if per > 16<<10 {
		c.fail("%.0f bytes of RSS per idle connection; want ≤ 16 KiB", per)
	}
	for _, conn := range conns {
		conn.Close()
	}
	c.fallback()
}

// TestPastDescriptorLimit: the broker's RLIMIT_NOFILE lowered to 256
// (prlimit on the running process, since the Go runtime raises its own
// limit at start), then twice that many connections opened and held, then
// all closed: a new connection must be served /health 200 within 10 s
// (the listener survives EMFILE), and RSS stays bounded. Before the fixes
// (1,100 connections under ulimit -n 1024): accept fails, the listener is
// gone, the process stays alive, every later client is refused.
func TestPastDescriptorLimit(t *testing.T) {
	c := newCase(t, nil)
	const limit = 256
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(c.b.PID()), fmt.Sprintf("--nofile=%d:%d", limit, limit)).CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v\n%s", err, out)
	}
	cs := newCodes()
	conns := dialHealth(c.addr, 2*limit, cs)
	c.f.Extra["connsOpened"] = float64(2 * limit)
	for _, conn := range conns {
		conn.Close()
	}
	// Past the limit a connection is either served or left waiting in the
	// backlog (no answer) or refused; none of them is an HTTP answer but 200.
	c.checkCodes("past limit ", cs, "200", "unanswered", "refused")
	if err := c.healthWithin(10 * time.Second); err != nil {
		c.fail("after the connections past the descriptor limit closed, a new connection is not served: %v", err)
	}
	// The probe's own connection, opened before, may have been fine all along;
	// what the issue saw is that every *later* client was refused, which the
	// check above asserts, so the probe's figures are recorded but a new
	// probe connection is not required here.
	c.endLoad()
	c.fallback()
}
