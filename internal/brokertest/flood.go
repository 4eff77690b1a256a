package brokertest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Flooding a process's descriptors, for the tests of shedding idle
// connections when accepting runs out of them (docs/server.md, accepting
// connections): Hold opens the flood, HealthOn asks for /health on a
// connection, and NewClients checks that new clients are served while the
// flood is held.

// Hold dials n connections to addr, 32 at a time, gives each to keep (a
// request and its answer within 3 s: /health, an upgrade) and holds those
// keep says to keep; the others are closed. The caller closes what it
// holds.
func Hold(addr string, n int, keep func(c net.Conn) bool) []net.Conn {
	var (
		mu   sync.Mutex
		held []net.Conn
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 32)
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr, 3*time.Second)
			if err != nil {
				return
			}
			if !keep(c) {
				c.Close()
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	return held
}

// HealthOn asks GET /health on c, waiting at most d, and returns the
// status (0: no answer).
func HealthOn(c net.Conn, d time.Duration) int {
	_ = c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
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

// NewClients has n new clients come to addr in turn, each served /health
// 200 within bound of its first try (a try closed unanswered is tried
// again on a new connection, 50 ms later) and kept open. It returns the
// clients served, in turn, and the tries they took; fewer than n when one
// was not served within bound (the ones after it are not tried).
func NewClients(addr string, n int, bound time.Duration) (served []net.Conn, tries int) {
	for range n {
		start := time.Now()
		var kept net.Conn
		for kept == nil && time.Since(start) < bound {
			tries++
			if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
				if HealthOn(c, 2*time.Second) == 200 {
					kept = c
					break
				}
				c.Close()
			}
			time.Sleep(50 * time.Millisecond) // pace the next try
		}
		if kept == nil {
			return served, tries
		}
		served = append(served, kept)
	}
	return served, tries
}
