package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/link"
)

// rawClient is one client connection driven by hand.
type rawClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawClient) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

// answer reads one answer within 5 s.
func (r *rawClient) answer() (int, string) {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		r.t.Fatalf("reading an answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// wantEOF requires the connection closed within d, with nothing sent.
func (r *rawClient) wantEOF(d time.Duration) {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(d))
	n, err := r.br.Read(make([]byte, 64))
	var ne net.Error
	if n > 0 || errors.As(err, &ne) && ne.Timeout() {
		r.t.Fatalf("want the connection closed within %v; read %d bytes, err %v", d, n, err)
	}
}

// onLoops runs f on each of g's loops and waits for it.
func onLoops(t *testing.T, g *Gateway, f func(ls *loopState)) {
	t.Helper()
	g.loops.Range(func(loop gnet.EventLoop, ls *loopState) bool {
		done := make(chan struct{})
		err := loop.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			f(ls)
			close(done)
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		<-done
		return true
	})
}

// startShedGateway starts a gateway before a broker in gateway mode, and
// returns it and its address.
func startShedGateway(t *testing.T) (*Gateway, string) {
	t.Helper()
	b := brokertest.StartQueen(t, map[string]string{
		"QUEEN_AUTH_MODE":               "gateway",
		"QUEEN_GATEWAY_SECRET":          testSecret,
		"QUEEN_EPHEMERAL_REQUIRE_GRANT": "false",
	})
	g := startGatewayTo(t, b.URL(), false)
	return g, g.Addr().String()
}

// Shedding under descriptor pressure (shed.go) closes the clients idle
// longest, oldest first, up to the number asked; never one with a waiting
// pop in flight, a request whose head is still arriving, or one idle for
// less than acceptloop.MinIdle, however long ago their last traffic was.
func TestShedClosesTheLongestIdleClientsAndKeepsTheBusy(t *testing.T) {
	g, addr := startShedGateway(t)
	health := "GET /health HTTP/1.1\r\nHost: g\r\n\r\n"
	served := func() *rawClient {
		r := dialRaw(t, addr)
		r.send(health)
		if st, body := r.answer(); st != 200 {
			t.Fatalf("/health: %d %s", st, body)
		}
		return r
	}
	old1, old2, old3, young := served(), served(), served(), served()
	pop := dialRaw(t, addr)
	pop.send("GET /api/v1/ephemeral/pop?queue=w&wait=true&timeout=30000 HTTP/1.1\r\nHost: g\r\n\r\n")
	for deadline := time.Now().Add(5 * time.Second); g.tenant("default").parked.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiting pop never held a slot")
		}
	}
	head := dialRaw(t, addr)
	head.send("GET /health HTTP/1.1\r\nHost: g\r\nX-Slow: ")

	// Ages by the gateway's clock: the busy ones the oldest of all; young
	// ahead of the clock, so that no tick makes it old during the test.
	ages := map[string]time.Duration{
		old1.c.LocalAddr().String(): 30 * time.Second, old2.c.LocalAddr().String(): 20 * time.Second,
		old3.c.LocalAddr().String(): 10 * time.Second, young.c.LocalAddr().String(): -time.Minute,
		pop.c.LocalAddr().String(): time.Minute, head.c.LocalAddr().String(): time.Minute,
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		set, headRead := 0, false
		onLoops(t, g, func(ls *loopState) {
			now := g.now.Load()
			for cc := range ls.clients {
				a := cc.c.RemoteAddr().String()
				if d, ok := ages[a]; ok {
					cc.lastActive = now - int64(d)
					set++
				}
				if a == head.c.LocalAddr().String() && cc.p != nil {
					headRead = true
				}
			}
		})
		if set == len(ages) && headRead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("found %d of the %d clients on the loops (slow head read: %v)", set, len(ages), headRead)
		}
	}

	if n := g.shedIdle(2); n != 2 {
		t.Fatalf("shedIdle(2) closed %d, want 2", n)
	}
	old1.wantEOF(3 * time.Second)
	old2.wantEOF(3 * time.Second)
	if n := g.shedIdle(16); n != 1 {
		t.Fatalf("shedIdle(16) closed %d, want 1 (old3 alone)", n)
	}
	old3.wantEOF(3 * time.Second)
	if n := g.shedIdle(16); n != 0 {
		t.Fatalf("with nothing idle left, shedIdle closed %d", n)
	}
	if got := g.m.idleShed.Get(); got != 3 {
		t.Fatalf("queen_gateway_idle_shed_total = %d, want 3", got)
	}

	// What was kept is served as if nothing happened.
	young.send(health)
	if st, _ := young.answer(); st != 200 {
		t.Fatalf("young: /health %d", st)
	}
	head.send("x\r\n\r\n")
	if st, _ := head.answer(); st != 200 {
		t.Fatalf("the slow head, completed: %d", st)
	}
	if st, body, _ := call(t, "POST", "http://"+addr+"/api/v1/ephemeral/push", `{"queue":"w","messages":[{"payload":"hi"}]}`); st != 201 {
		t.Fatalf("push: %d %s", st, body)
	}
	if st, body := pop.answer(); st != 200 || !strings.Contains(body, `"hi"`) {
		t.Fatalf("the waiting pop: %d %s, want 200 with the message", st, body)
	}
	// Its request came a minute ago by its clock, its answer just now: it
	// is idle from the answer, so nothing is old enough to shed.
	if n := g.shedIdle(16); n != 0 {
		t.Fatalf("after the pop's answer, shedIdle closed %d, want 0 (idle counts from the last answer)", n)
	}
	pop.send(health)
	if st, _ := pop.answer(); st != 200 {
		t.Fatalf("the pop's connection after its answer: /health %d", st)
	}
}

// Shedding closes idle client links as it closes idle client connections,
// in one order of idleness: oldest first, a link whose only traffic is
// pings among them (a ping is not a call), never one with a waiting pop in
// flight, nor one that carried a call within acceptloop.MinIdle. What it
// keeps serves on.
func TestShedClosesIdleClientLinks(t *testing.T) {
	g, addr := startShedGateway(t)
	oldest := dialTestLink(t, addr)
	client := dialRaw(t, addr)
	client.send("GET /health HTTP/1.1\r\nHost: g\r\n\r\n")
	if st, body := client.answer(); st != 200 {
		t.Fatalf("/health: %d %s", st, body)
	}
	pinged, young, waiting := dialTestLink(t, addr), dialTestLink(t, addr), dialTestLink(t, addr)
	popFrame, _ := link.AppendRequest(nil, 0, &link.Request{Method: []byte("GET"), Target: []byte("/api/v1/ephemeral/pop?queue=w&wait=true&timeout=30000")})
	if _, err := waiting.nc.Write(popFrame); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); g.tenant("default").parked.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiting pop never held a slot")
		}
	}

	// Ages by the gateway's clock; young ahead of it, so that no tick makes
	// it old during the test.
	ages := map[string]time.Duration{
		oldest.nc.LocalAddr().String(): 30 * time.Second, client.c.LocalAddr().String(): 25 * time.Second,
		pinged.nc.LocalAddr().String(): 20 * time.Second, young.nc.LocalAddr().String(): -time.Minute,
		waiting.nc.LocalAddr().String(): time.Minute,
	}
	set := 0
	onLoops(t, g, func(ls *loopState) {
		now := g.now.Load()
		for cc := range ls.clients {
			if d, ok := ages[cc.c.RemoteAddr().String()]; ok {
				cc.lastActive = now - int64(d)
				set++
			}
		}
		for l := range ls.clientLinks {
			if d, ok := ages[l.c.RemoteAddr().String()]; ok {
				l.lastCall = now - int64(d)
				set++
			}
		}
	})
	if set != len(ages) {
		t.Fatalf("found %d of the %d clients on the loops", set, len(ages))
	}
	// A ping after the aging, answered: pings do not make a link busy.
	if _, err := pinged.nc.Write(link.AppendHeader(nil, link.FramePing, 0, 0)); err != nil {
		t.Fatal(err)
	}
	_ = pinged.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, link.HeaderLen)
	if _, err := io.ReadFull(pinged.br, hdr); err != nil {
		t.Fatal(err)
	}
	if typ, _, _ := link.ParseHeader(hdr); typ != link.FramePong {
		t.Fatalf("the ping answered with a frame of type %d, want a pong", typ)
	}

	if n := g.shedIdle(2); n != 2 {
		t.Fatalf("shedIdle(2) closed %d, want 2 (the oldest link and the client connection)", n)
	}
	oldest.wantEOF(t)
	client.wantEOF(3 * time.Second)
	if n := g.shedIdle(16); n != 1 {
		t.Fatalf("shedIdle(16) closed %d, want 1 (the link that only pinged)", n)
	}
	pinged.wantEOF(t)
	if n := g.shedIdle(16); n != 0 {
		t.Fatalf("with nothing idle left, shedIdle closed %d", n)
	}
	if got := g.m.idleShed.Get(); got != 3 {
		t.Fatalf("queen_gateway_idle_shed_total = %d, want 3", got)
	}

	// What was kept serves: a push on the young link is the waiting pop's
	// message.
	if typ, p := young.roundTrip(t, &link.Request{Method: []byte("POST"), Target: []byte("/api/v1/ephemeral/push"),
		Body: []byte(`{"queue":"w","messages":[{"payload":"hi"}]}`)}); typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 201") {
		t.Fatalf("a push on the young link: frame %d %q, want a 201", typ, p)
	}
	_ = waiting.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(waiting.br, hdr); err != nil {
		t.Fatalf("the waiting pop's answer: %v", err)
	}
	typ, _, n := link.ParseHeader(hdr)
	p := make([]byte, n)
	if _, err := io.ReadFull(waiting.br, p); err != nil || typ != link.FrameAnswer || !strings.HasPrefix(string(p), "HTTP/1.1 200") || !strings.Contains(string(p), `"hi"`) {
		t.Fatalf("the waiting pop: frame %d %q %v, want 200 with the message", typ, p, err)
	}
}

// wantEOF requires the link closed by the gateway within 3 s, with
// nothing sent.
func (l *testLink) wantEOF(t *testing.T) {
	t.Helper()
	_ = l.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, err := l.br.Read(make([]byte, 64)); err != io.EOF {
		t.Fatalf("want the link closed within 3 s; read %d bytes, err %v", n, err)
	}
}
