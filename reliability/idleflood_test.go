//go:build reliability

package reliability

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestIdleFloodNewClientServed: the broker's descriptor limit lowered to
// 1,024 (prlimit on the running process, as TestPastDescriptorLimit), then
// 1,100 connections each served /health once and held idle; while they are
// held, 20 new clients in turn, each keeping its connection open once
// served, must each be served /health 200 within 5 s of its first try (a
// try closed unanswered is tried again on a new connection). More new
// clients than one shed frees (16) and held: the last of them can only be
// served by closing idle connections, which the broker does when accepting
// fails for lack of descriptors (docs/server.md, accepting connections).
// Before: the listener survived, but every new client was closed
// unanswered while the flood was held.
func TestIdleFloodNewClientServed(t *testing.T) {
	c := newCase(t, nil)
	const limit, flood, clients = 1024, 1100, 20
	const bound = 5 * time.Second
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(c.b.PID()), fmt.Sprintf("--nofile=%d:%d", limit, limit)).CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v\n%s", err, out)
	}
	cs := newCodes()
	conns := dialHealth(c.addr, flood, cs)
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	c.f.Extra["connsOpened"] = flood

	// The flood is held (each of its connections open on the client's side)
	// while the new clients come; each new client stays.
	before, _ := scrapeOnNewConn(c.addr)
	fresh := newCodes()
	var took []time.Duration
	tries := 0
	for i := range clients {
		start := time.Now()
		var kept net.Conn
		for kept == nil && time.Since(start) < bound {
			tries++
			conn, err := net.DialTimeout("tcp", c.addr, 2*time.Second)
			if err == nil {
				if status := brokertest.HealthOn(conn, 2*time.Second); status == 200 {
					kept = conn
					break
				}
				conn.Close()
			}
			time.Sleep(50 * time.Millisecond) // pace the next try
		}
		if kept == nil {
			fresh.addKey("unserved")
			c.fail("new client %d of %d: not served /health 200 within %v (%d tries so far) while the idle flood is held", i+1, clients, bound, tries)
			continue
		}
		conns = append(conns, kept)
		fresh.addKey("200")
		took = append(took, time.Since(start))
	}
	c.f.Extra["newClients"] = clients
	c.f.Extra["newClientTries"] = float64(tries)
	if len(took) > 0 {
		slices.Sort(took)
		c.f.Extra["newClientFirstS"] = took[0].Seconds()
		c.f.Extra["newClientMedianMs"] = ms(took[len(took)/2])
		c.f.Extra["newClientWorstS"] = took[len(took)-1].Seconds()
	}
	if m, err := scrapeOnNewConn(c.addr); err == nil {
		c.f.Extra["idleShed"] = m["queen_ephemeral_idle_shed_total"]
		c.f.Extra["acceptErrors"] = m["queen_ephemeral_accept_errors_total"]
		if before != nil {
			c.f.Extra["idleShedForNewClients"] = m["queen_ephemeral_idle_shed_total"] - before["queen_ephemeral_idle_shed_total"]
		}
	}
	c.endLoad()
	// Past the limit a flood connection is served, or left waiting in the
	// backlog (no answer), or refused, or closed by the broker later (it
	// was idle longest): never an HTTP answer other than 200.
	c.checkCodes("flood ", cs, "200", "unanswered", "refused")
	c.checkCodes("new client ", fresh, "200")
	for _, conn := range conns {
		conn.Close()
	}
	conns = nil
	c.fallback()
}

// scrapeOnNewConn reads GET /metrics on a new connection (tried for up to
// 5 s) into a map of the unlabelled series.
func scrapeOnNewConn(addr string) (map[string]float64, error) {
	var last error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			last = err
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = conn.Write(request("GET", "/metrics", nil))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			conn.Close()
			last = err
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		if err != nil {
			last = err
			continue
		}
		m := map[string]float64{}
		for _, line := range strings.Split(string(b), "\n") {
			name, val, ok := strings.Cut(line, " ")
			if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
				continue
			}
			if f, err := strconv.ParseFloat(val, 64); err == nil {
				m[name] = f
			}
		}
		return m, nil
	}
	return nil, last
}
