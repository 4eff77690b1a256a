package conformance

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startBrokerNoFile starts a broker whose descriptor limit (soft and hard)
// is nofile.
func startBrokerNoFile(t *testing.T, nofile int, env map[string]string) *broker {
	t.Helper()
	b := newBroker(t, env)
	b.NoFile = nofile
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

// TestBodyTimeout: a request body that stops arriving closes its
// connection after QUEEN_BODY_TIMEOUT_MS (enforced by the 1 s tick), small
// or large; the header timeout does not cover bodies.
func TestBodyTimeout(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_BODY_TIMEOUT_MS": "500", "QUEEN_HEADER_TIMEOUT_MS": "60000"})
	for _, size := range []int{100, 4 << 20} {
		r := b.dial(t)
		r.send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n{")
		r.expectEOF(4 * time.Second)
	}
}

// TestInflightBound: a body the bound on request bytes in flight cannot
// hold is refused on its head, 503 ephemeral_unavailable, and the
// connection closed without reading it; a body that fits is served.
func TestInflightBound(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_MAX_INFLIGHT_BYTES": "1048576"})
	r := b.dial(t)
	r.send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\nContent-Length: 2000000\r\n\r\n")
	a := r.read()
	a.wantErr(t, 503, "ephemeral_unavailable")
	if !a.close {
		t.Errorf("the refusal lacks Connection: close")
	}
	r.expectEOF(2 * time.Second)

	payload := `"` + strings.Repeat("x", 900<<10) + `"`
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("fits", "", payload)).want(t, 201, nil)
}

// TestIdentityBeforeTheBody: in jwt mode a request announcing a large body
// without a valid token is answered 401 on its head, before any of the
// body is sent; with Expect: 100-continue the 401 comes instead of a 100.
func TestIdentityBeforeTheBody(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": "conformance-secret"})
	for _, extra := range []string{"", "Expect: 100-continue\r\n", "Authorization: Bearer nope\r\n"} {
		r := b.dial(t)
		r.send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: test\r\n" + extra + "Content-Length: 30000000\r\n\r\n")
		a := r.read()
		a.wantErr(t, 401, "unauthorized")
		if !a.close {
			t.Errorf("the refusal lacks Connection: close")
		}
		r.expectEOF(2 * time.Second)
	}
}

// TestUnreadAnswers: a client that pipelines requests and reads none of its
// answers stops being served past QUEEN_OUTBOUND_SOFT_BYTES, other
// connections are served meanwhile, and it is closed once it has been over
// the soft limit for QUEEN_OUTBOUND_SOFT_S.
func TestUnreadAnswers(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_OUTBOUND_SOFT_BYTES": "65536", "QUEEN_OUTBOUND_SOFT_S": "2"})
	for i := range 100 { // each listing some 15 KB
		b.configure(t, "q"+strconv.Itoa(i)+"-"+strings.Repeat("n", 100), "{}")
	}
	greedy := b.dial(t)
	greedy.send(strings.Repeat("GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: test\r\n\r\n", 3000))
	time.Sleep(300 * time.Millisecond)
	if h := b.health(t); h.Status != "ok" {
		t.Fatalf("health while a client does not read: %+v", h)
	}
	time.Sleep(4 * time.Second)
	_ = greedy.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, greedy.br); err != nil {
		t.Fatalf("the client over the soft limit for longer than QUEEN_OUTBOUND_SOFT_S was not closed: %v", err)
	}
}
