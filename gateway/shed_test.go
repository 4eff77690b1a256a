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

// Shedding under descriptor pressure (shed.go) closes the clients idle
// longest, oldest first, up to the number asked; never one with a waiting
// pop in flight, a request whose head is still arriving, or one idle for
// less than acceptloop.MinIdle, however long ago their last traffic was.
func TestShedClosesTheLongestIdleClientsAndKeepsTheBusy(t *testing.T) {
	b := brokertest.StartQueen(t, map[string]string{
		"QUEEN_AUTH_MODE":               "gateway",
		"QUEEN_GATEWAY_SECRET":          testSecret,
		"QUEEN_EPHEMERAL_REQUIRE_GRANT": "false",
	})
	g := startGatewayTo(t, b.URL(), false)
	addr := g.Addr().String()
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
