package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
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

// onClientLinks runs f, on its loop, for the client link whose client end
// is tl, and waits for it.
func onClientLinks(t *testing.T, ts *testServer, tl *testLink, f func(l *linkConn)) {
	t.Helper()
	found := false
	ts.s.loops.Range(func(loop gnet.EventLoop, ls *loopState) bool {
		done := make(chan struct{})
		err := loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			defer close(done)
			for l := range ls.clientLinks {
				if l.c.RemoteAddr().String() == tl.c.LocalAddr().String() {
					f(l)
					found = true
				}
			}
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		<-done
		return true
	})
	if !found {
		t.Fatal("no client link on the loops for the test's link")
	}
}

// Shedding closes idle client links as it closes idle HTTP connections,
// in one order of idleness: the oldest first, a link whose only traffic is
// pings among them (a ping is not a call), never one with a parked pop or
// a frame partly read, nor one that carried a call within
// acceptloop.MinIdle. What it keeps serves on as if nothing happened.
func TestShedClosesIdleClientLinks(t *testing.T) {
	ts := startServer(t, engine.Config{})
	oldest := openClientLink(t, ts.addr, "")
	http1 := dialRaw(t, ts.addr)
	http1.send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
	if st, _, _ := http1.answer(); st != 200 {
		t.Fatalf("/health: %d", st)
	}
	pinged := openClientLink(t, ts.addr, "")
	young := openClientLink(t, ts.addr, "")
	parked := openClientLink(t, ts.addr, "")
	parked.send(t, "", 0, "GET", "/api/v1/ephemeral/pop?queue=p&wait=true&timeout=30000", "")
	waitParked(t, ts.e, 1)
	half := openClientLink(t, ts.addr, "")
	frame, err := link.AppendRequest(nil, 0, &link.Request{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/push"),
		Body: []byte(`{"queue":"h","messages":[{"payload":"whole"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := half.c.Write(frame[:link.HeaderLen+3]); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "five client links", func() bool { return ts.s.clientLinks.Load() == 5 })

	// Ages, by the server's clock: the link kept busy the oldest of all,
	// young ahead of the clock so that no tick makes it old in the test.
	now := ts.s.now.Load()
	ageLink := func(tl *testLink, d time.Duration) {
		onClientLinks(t, ts, tl, func(l *linkConn) { l.lastCall = now - int64(d) })
	}
	ageLink(oldest, 30*time.Second)
	serverConn(t, ts, http1).lastActive.Store(now - int64(25*time.Second))
	ageLink(pinged, 20*time.Second)
	ageLink(young, -time.Minute)
	ageLink(parked, time.Minute)
	waitUntil(t, "the half frame to arrive", func() bool {
		in := 0
		onClientLinks(t, ts, half, func(l *linkConn) { in = l.c.InboundBuffered() })
		return in > 0
	})
	ageLink(half, time.Minute)
	// A ping after the aging, answered: pings do not make a link busy.
	if _, err := pinged.c.Write(link.AppendHeader(nil, link.FramePing, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if typ, _, _ := readFrame(t, pinged.c); typ != link.FramePong {
		t.Fatalf("the ping answered with a frame of type %d, want a pong", typ)
	}

	if n := ts.s.shedIdle(2); n != 2 {
		t.Fatalf("shedIdle(2) closed %d, want 2 (the oldest link and the HTTP connection)", n)
	}
	wantLinkClosed(t, oldest)
	http1.wantEOF(3 * time.Second)
	if n := ts.s.shedIdle(16); n != 1 {
		t.Fatalf("shedIdle(16) closed %d, want 1 (the link that only pinged)", n)
	}
	wantLinkClosed(t, pinged)
	if n := ts.s.shedIdle(16); n != 0 {
		t.Fatalf("with nothing idle left, shedIdle closed %d", n)
	}
	if got := ts.s.tm.idleShed.Get(); got != 3 {
		t.Fatalf("queen_ephemeral_idle_shed_total = %d, want 3", got)
	}
	waitUntil(t, "three client links left", func() bool { return ts.s.clientLinks.Load() == 3 })

	// What was kept serves: the half frame completes, the young link
	// pushes, and the parked pop gets the message.
	if _, err := half.c.Write(frame[link.HeaderLen+3:]); err != nil {
		t.Fatal(err)
	}
	if id, st, b := half.answer(t); id != 0 || st != 201 {
		t.Fatalf("the half frame, completed: stream %d, %d %s", id, st, b)
	}
	young.send(t, "", 0, "POST", "/api/v1/ephemeral/push", `{"queue":"p","messages":[{"payload":"hi"}]}`)
	if _, st, b := young.answer(t); st != 201 {
		t.Fatalf("a push on the young link: %d %s", st, b)
	}
	if _, st, b := parked.answer(t); st != 200 || !strings.Contains(b, `"hi"`) {
		t.Fatalf("the parked pop: %d %s, want 200 with the message", st, b)
	}
}

// wantLinkClosed requires the link closed by the broker within 3 s, with
// nothing sent.
func wantLinkClosed(t *testing.T, tl *testLink) {
	t.Helper()
	_ = tl.c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := tl.c.Read(make([]byte, 64))
	var ne net.Error
	if n > 0 || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("want the link closed within 3 s; read %d bytes, err %v", n, err)
	}
}

// TestIdleLinkFloodNewClientServed: the broker (its binary) under a
// descriptor limit of 128, soft and hard; one link holding a parked pop,
// then 160 links upgraded and held idle, more than the limit lets it keep;
// while they are held, 10 new clients in turn, each keeping its
// connection once served, are each served /health 200 within 10 s of its
// first try (a try closed unanswered is tried again on a new connection):
// the broker sheds idle links when accepting fails for lack of
// descriptors. The link with the parked pop is never shed: a push by the
// last new client is its answer. Without the links among what is shed,
// every new client is closed unanswered for as long as the flood is held
// (the idle timeout, 120 s).
func TestIdleLinkFloodNewClientServed(t *testing.T) {
	const limit, flood, clients = 128, 160, 10
	const bound = 10 * time.Second
	b := brokertest.New(t, brokertest.Binary(t, brokertest.Queen), nil)
	b.NoFile = limit
	b.LogTail = 4000
	b.Start(t)
	addr := b.Addr()

	parked := openClientLink(t, addr, "")
	parked.send(t, "", 0, "GET", "/api/v1/ephemeral/pop?queue=kept&wait=true&timeout=60000", "")

	links := brokertest.Hold(addr, flood, func(c net.Conn) bool { return upgraded(c, 3*time.Second) })
	defer func() {
		for _, c := range links {
			c.Close()
		}
	}()
	if len(links) < limit/2 {
		t.Fatalf("only %d of the flood's %d links were upgraded: the flood did not fill the descriptors", len(links), flood)
	}
	kept, tries := brokertest.NewClients(addr, clients, bound)
	defer func() {
		for _, c := range kept {
			c.Close()
		}
	}()
	if len(kept) < clients {
		t.Fatalf("new client %d of %d: not served /health 200 within %v (%d tries so far) while %d idle links are held", len(kept)+1, clients, bound, tries, len(links))
	}
	t.Logf("flood: %d links upgraded of %d; %d new clients served in %d tries", len(links), flood, clients, tries)

	last := kept[len(kept)-1]
	body := `{"queue":"kept","messages":[{"payload":"for the parked pop"}]}`
	fmt.Fprintf(last, "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: b\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = last.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(last), nil); err != nil || resp.StatusCode != 201 {
		t.Fatalf("the push for the parked pop: %v %v", resp, err)
	}
	if _, st, got := parked.answer(t); st != 200 || !strings.Contains(got, "for the parked pop") {
		t.Fatalf("the parked pop: %d %s, want 200 with the message (its link was kept)", st, got)
	}
}

// upgraded asks for a client link on c and reports whether it was answered
// 101 within d; it reads the answer byte by byte, up to its blank line.
func upgraded(c net.Conn, d time.Duration) bool {
	_ = c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /api/v1/ephemeral/link HTTP/1.1\r\nHost: b\r\n"+v1+"\r\n"); err != nil {
		return false
	}
	var head []byte
	b := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := c.Read(b); err != nil {
			return false
		}
		head = append(head, b[0])
	}
	return bytes.HasPrefix(head, []byte("HTTP/1.1 101 "))
}
