package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestIdleFloodNewClientServed: the gateway under a descriptor limit of
// 256 (soft and hard), 300 client connections each served /health once and
// held idle; while they are held, 20 new clients in turn, each keeping its
// connection open once served (more than one shed frees), are each served
// /health 200 within 5 s of its first try (a try closed unanswered is
// tried again on a new connection). The gateway closes its longest-idle
// clients when accepting fails for lack of descriptors (docs/gateway.md,
// "Accepting clients"). Without that, every new client is closed unanswered
// while the flood is held.
func TestIdleFloodNewClientServed(t *testing.T) {
	t.Parallel()
	const limit, flood, clients = 256, 300, 20
	const bound = 5 * time.Second
	b := startBroker(t, nil)
	p := brokertest.New(t, brokertest.Binary(t, gatewayPkg), gatewayEnv([]string{b.URL()}, nil))
	p.LogTail = 4000
	p.NoFile = limit
	p.Start(t)
	addr := strings.TrimPrefix(p.URL(), "http://")

	// The flood: 32 dials at a time, each given 3 s for its answer, every
	// connection kept open on this side.
	var (
		mu     sync.Mutex
		conns  []net.Conn
		served int
		wg     sync.WaitGroup
	)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	sem := make(chan struct{}, 32)
	for range flood {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				return
			}
			ok := healthOn(c, 3*time.Second) == 200
			mu.Lock()
			conns = append(conns, c)
			if ok {
				served++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if served < limit/2 {
		t.Fatalf("only %d of the flood's %d connections were served: the flood did not fill the descriptors", served, flood)
	}

	tries := 0
	for i := range clients {
		start := time.Now()
		var kept net.Conn
		for kept == nil && time.Since(start) < bound {
			tries++
			if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
				if healthOn(c, 2*time.Second) == 200 {
					kept = c
					break
				}
				c.Close()
			}
			time.Sleep(50 * time.Millisecond) // pace the next try
		}
		if kept == nil {
			t.Fatalf("new client %d of %d: not served /health 200 within %v (%d tries so far) while %d idle connections are held", i+1, clients, bound, tries, len(conns))
		}
		conns = append(conns, kept)
	}
	t.Logf("flood: %d connections, %d served; %d new clients served in %d tries", flood, served, clients, tries)
}

// healthOn asks GET /health on c, waiting at most d, and returns the
// status (0: no answer).
func healthOn(c net.Conn, d time.Duration) int {
	_ = c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: g\r\n\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
