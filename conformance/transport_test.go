package conformance

import (
	"net"
	"testing"
	"time"
)

// startBrokerNoFile starts a broker whose descriptor limit (soft and hard)
// is nofile.
func startBrokerNoFile(t *testing.T, nofile int, env map[string]string) *broker {
	t.Helper()
	needBinary(t)
	e := map[string]string{"QUEEN_DATA_DIR": t.TempDir()}
	for k, v := range env {
		e[k] = v
	}
	b := &broker{t: t, env: e, logs: &lockedBuffer{}, waitStoreOK: true, nofile: nofile}
	t.Cleanup(func() {
		b.killIfRunning()
		if t.Failed() {
			t.Logf("broker log (last 6 KiB):\n%s", b.logs.tail(6<<10))
		}
	})
	b.start(t)
	return b
}

// TestDescriptorExhaustion: more connections than the process may hold
// descriptors make accepting fail (EMFILE); the broker pauses accepting,
// keeps serving the connections it has, counts the errors, and serves new
// connections again once descriptors are free. The port never goes away.
func TestDescriptorExhaustion(t *testing.T) {
	t.Parallel()
	b := startBrokerNoFile(t, 64, nil)
	first := b.dial(t)
	var conns []net.Conn
	for range 120 { // the kernel completes them into the backlog; the broker cannot take them all
		c, err := net.DialTimeout("tcp", b.addr(), 5*time.Second)
		if err != nil {
			break // the backlog is full: enough
		}
		conns = append(conns, c)
	}
	// A connection opened before the exhaustion is served meanwhile.
	first.send(httpReq("GET", "/health", ""))
	first.read().want(t, 200, nil)
	time.Sleep(300 * time.Millisecond) // let the acceptor meet the limit
	for _, c := range conns {
		c.Close()
	}
	first.c.Close()
	// New connections are served again (the backoff is at most 1 s).
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := b.dial(t)
		r.send(httpReq("GET", "/health", ""))
		rr, err := r.readWithin(2 * time.Second)
		r.c.Close()
		if err == nil && rr.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new connection served 10 s after the descriptors were freed (last: %v %v)", rr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m, _ := b.scrape(t)
	if m["queen_ephemeral_accept_errors_total"] < 1 {
		t.Fatalf("queen_ephemeral_accept_errors_total = %v, want at least 1", m["queen_ephemeral_accept_errors_total"])
	}
}
