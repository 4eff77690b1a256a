package server

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/identity"
)

const gwHeaders = "X-Queen-Gateway-Secret: " + gwTestSecret + "\r\nX-Queen-Tenant: acme\r\nX-Queen-Access: read-write\r\n"

// serverConn finds the server's conn for the client connection r.
func serverConn(t *testing.T, ts *testServer, r *rawClient) *conn {
	t.Helper()
	var found *conn
	waitUntil(t, "the server to hold the connection", func() bool {
		ts.s.conns.Range(func(cs *conn, _ struct{}) bool {
			if cs.c.RemoteAddr().String() == r.c.LocalAddr().String() {
				found = cs
				return false
			}
			return true
		})
		return found != nil
	})
	return found
}

// Shedding under descriptor pressure (shed.go) closes the connections idle
// longest, oldest first, up to the number asked; it never closes one with
// a parked pop, a request whose head or body is still arriving, one idle
// for less than acceptloop.MinIdle, or a gateway link (no longer a client
// connection), however long ago their last traffic was.
func TestShedClosesTheLongestIdleAndKeepsTheBusy(t *testing.T) {
	ts := startGatewayMode(t, nil)
	health := "GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
	served := func() *rawClient {
		r := dialRaw(t, ts.addr)
		r.send(health)
		if st, _, _ := r.answer(); st != 200 {
			t.Fatalf("/health: %d", st)
		}
		return r
	}
	old1, old2, old3, young := served(), served(), served(), served()

	parked := dialRaw(t, ts.addr)
	parked.send("GET /api/v1/ephemeral/pop?queue=q&wait=true&timeout=30000 HTTP/1.1\r\nHost: t\r\n" + gwHeaders + "\r\n")
	waitParked(t, ts.e, 1)
	head := dialRaw(t, ts.addr)
	head.send("GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: ")
	body := `{"queue":"b","messages":[{"payload":"kept"}]}`
	half := dialRaw(t, ts.addr)
	half.send("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: t\r\n" + gwHeaders + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body[:10])
	_, link := dialLink(t, ts.addr, gwTestSecret)
	if link == nil {
		t.Fatal("the link's upgrade was refused")
	}
	waitUntil(t, "the link counted", func() bool { return ts.s.gatewayLinks.Load() == 1 })

	// Ages, by the server's clock: the busy ones the oldest of all; young
	// ahead of the clock, so that no tick makes it old during the test.
	now := ts.s.now.Load()
	age := func(r *rawClient, d time.Duration) { serverConn(t, ts, r).lastActive.Store(now - int64(d)) }
	age(old1, 30*time.Second)
	age(old2, 20*time.Second)
	age(old3, 10*time.Second)
	age(young, -time.Minute)
	headConn, halfConn := serverConn(t, ts, head), serverConn(t, ts, half)
	waitUntil(t, "the head and the body to be read", func() bool {
		return headConn.headSince.Load() != 0 && halfConn.bodySince.Load() != 0
	})
	for _, r := range []*rawClient{parked, head, half} {
		age(r, time.Minute)
	}

	if n := ts.s.shedIdle(2); n != 2 {
		t.Fatalf("shedIdle(2) closed %d, want 2", n)
	}
	old1.wantEOF(3 * time.Second)
	old2.wantEOF(3 * time.Second)
	if n := ts.s.shedIdle(16); n != 1 {
		t.Fatalf("shedIdle(16) closed %d, want 1 (old3 alone)", n)
	}
	old3.wantEOF(3 * time.Second)
	if n := ts.s.shedIdle(16); n != 0 {
		t.Fatalf("with nothing idle left, shedIdle closed %d", n)
	}
	if got := ts.s.tm.idleShed.Get(); got != 3 {
		t.Fatalf("queen_ephemeral_idle_shed_total = %d, want 3", got)
	}

	// Everything kept is served as if nothing happened.
	young.send(health)
	if st, _, _ := young.answer(); st != 200 {
		t.Fatalf("young: /health %d", st)
	}
	head.send("x\r\n\r\n")
	if st, _, _ := head.answer(); st != 200 {
		t.Fatalf("the slow head, completed: %d", st)
	}
	half.send(body[10:])
	if st, b, _ := half.answer(); st != 201 {
		t.Fatalf("the half-sent push, completed: %d %s", st, b)
	}
	id := link.send(t, "acme", identity.ReadWrite, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":"hi"}]}`)
	if got, st, b := link.answer(t); got != id || st != 201 {
		t.Fatalf("a push on the link: stream %d, %d %s", got, st, b)
	}
	if st, b, _ := parked.answer(); st != 200 || !strings.Contains(b, `"hi"`) {
		t.Fatalf("the parked pop: %d %s, want 200 with the message pushed on the link", st, b)
	}
}
