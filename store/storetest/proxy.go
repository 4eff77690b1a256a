package storetest

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to the run's server on loopback; Cut
// closes every connection it carries at once, as a network cut or a
// crashed server would, while new connections still go through. A
// statement running on the server when it is cut is a connection lost
// after the statement may have run.
type Proxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// StartProxy starts a proxy to the managed server (NeedManaged), closed
// when t ends.
func (p *Postgres) StartProxy(t testing.TB) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &Proxy{l: l}
	t.Cleanup(func() { l.Close(); px.Cut() })
	target := fmt.Sprintf("127.0.0.1:%d", p.port)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			px.mu.Lock()
			px.conns = append(px.conns, c, s)
			px.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	return px
}

// Cut closes every connection the proxy carries.
func (px *Proxy) Cut() {
	px.mu.Lock()
	defer px.mu.Unlock()
	for _, c := range px.conns {
		c.Close()
	}
	px.conns = nil
}

// URL is the server's URL with the proxy's address in place of the
// server's.
func (px *Proxy) URL(server *Postgres) string {
	return strings.Replace(server.URL(), fmt.Sprintf("127.0.0.1:%d", server.port), px.l.Addr().String(), 1)
}

// Addr is the proxy's host:port, for a URL built by hand.
func (px *Proxy) Addr() string { return px.l.Addr().String() }
