package brokertest

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Brokers listen on ports below the kernel's ephemeral range (32768 and up on
// Linux), from a random start, each port handed out once per run: so a broker
// never gets a port that another broker of this run, or a connection the
// kernel numbered, holds or held a moment ago (a port taken in between would
// let the /health probe reach another process while ours fails to bind).
var (
	portMu   sync.Mutex
	nextPort = 20000 + int(time.Now().UnixNano()%12000)
)

// FreePort returns a loopback port nothing listens on.
func FreePort() (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range 12000 {
		p := nextPort
		nextPort++
		if nextPort >= 32000 {
			nextPort = 20000
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, errors.New("no free port")
}

// Port is FreePort failing t when there is none: a port nothing listens on
// (a broker that is not there), or one to start a broker on later.
func Port(t testing.TB) int {
	t.Helper()
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// SilentServer listens on a loopback port, accepts every connection and
// never answers (nor reads): a broker that hangs. It answers the address
// (host:port); the listener and the connections close when the test ends.
func SilentServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, unanswered, until the listener closes
		}
	}()
	return ln.Addr().String()
}

// LockedBuffer collects a process's output, written from its goroutines
// and read from the test's.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail is the last n bytes written, after "..." when there were more.
func (l *LockedBuffer) Tail(n int) string {
	s := l.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}
