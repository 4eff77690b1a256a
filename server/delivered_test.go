package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/cell"
	"github.com/queenmq/ephemeral/cell/relay"
	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/identity"
)

// X-Queen-Delivered (docs/routes.md, "Through a gateway"): in gateway mode
// every 200 pop answer says how many messages it carries, on every path an
// answer takes; outside gateway mode no answer carries it.

const gwTestSecret = "gw-secret"

func gatewayAuth(t *testing.T) *identity.Auth {
	t.Helper()
	a, err := identity.New(identity.Config{Mode: identity.ModeGateway, GatewaySecret: gwTestSecret})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// gwAnswer is one answer as the gateway sees it.
type gwAnswer struct {
	code      int
	delivered []string // the X-Queen-Delivered values
	body      string
}

// messages counts the messages of a pop answer's body.
func (a gwAnswer) messages() int { return strings.Count(a.body, `"attempts":`) }

// gwDo sends a request as the gateway would (tenant acme, read-write);
// gateway false sends it with no identity.
func gwDo(t *testing.T, addr, method, path, body string, gateway bool) gwAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if gateway {
		req.Header.Set("X-Queen-Gateway-Secret", gwTestSecret)
		req.Header.Set("X-Queen-Tenant", "acme")
		req.Header.Set("X-Queen-Access", "read-write")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return gwAnswer{code: resp.StatusCode, delivered: resp.Header.Values("X-Queen-Delivered"), body: string(b)}
}

func pushN(t *testing.T, addr, queue string, n int, gateway bool) {
	t.Helper()
	msgs := strings.TrimSuffix(strings.Repeat(`{"payload":1},`, n), ",")
	if a := gwDo(t, addr, "POST", "/api/v1/ephemeral/push", `{"queue":"`+queue+`","messages":[`+msgs+`]}`, gateway); a.code != 201 {
		t.Fatalf("push: %d %s", a.code, a.body)
	}
}

// wantDelivered checks that a is a 200 pop answer of n messages saying so.
func wantDelivered(t *testing.T, what string, a gwAnswer, n int) {
	t.Helper()
	if a.code != 200 || a.messages() != n || len(a.delivered) != 1 || a.delivered[0] != strconv.Itoa(n) {
		t.Fatalf("%s: %d X-Queen-Delivered %q, %d messages in %s; want %d", what, a.code, a.delivered, a.messages(), a.body, n)
	}
}

// parkedPop starts a pop that parks (wait, batch 10) and returns its answer
// on the channel.
func parkedPop(t *testing.T, addr, queue string, timeoutMs int, gateway bool) <-chan gwAnswer {
	t.Helper()
	ch := make(chan gwAnswer, 1)
	go func() {
		// t.Fatalf must not run here: a failed request is a zero answer.
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/api/v1/ephemeral/pop?queue=%s&batch=10&wait=true&timeout=%d", addr, queue, timeoutMs), nil)
		if gateway {
			req.Header.Set("X-Queen-Gateway-Secret", gwTestSecret)
			req.Header.Set("X-Queen-Tenant", "acme")
			req.Header.Set("X-Queen-Access", "read-write")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			ch <- gwAnswer{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		ch <- gwAnswer{code: resp.StatusCode, delivered: resp.Header.Values("X-Queen-Delivered"), body: string(b)}
	}()
	return ch
}

func await(t *testing.T, ch <-chan gwAnswer) gwAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("the parked pop was not answered")
		return gwAnswer{}
	}
}

// waitParked waits until n pops are parked on e.
func waitParked(t *testing.T, e *engine.Engine, n int64) {
	t.Helper()
	waitUntil(t, "the pop to park", func() bool { return parkedPops(e) >= n })
}

func TestPopAnswerSaysHowManyItDeliveredInGatewayMode(t *testing.T) {
	// One loop: the push that completes a parked pop is served on the pop's
	// own loop (the same-loop path of popSink.Complete); the timeout is
	// completed by the timing wheel (writeDirect or AsyncWrite).
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Auth: gatewayAuth(t)})
	addr := ts.addr

	wantDelivered(t, "an empty pop", gwDo(t, addr, "GET", "/api/v1/ephemeral/pop?queue=q", "", true), 0)
	pushN(t, addr, "q", 3, true)
	wantDelivered(t, "a batch", gwDo(t, addr, "GET", "/api/v1/ephemeral/pop?queue=q&batch=10&autoAck=true", "", true), 3)
	pushN(t, addr, "q", 1, true)
	wantDelivered(t, "a pop of one", gwDo(t, addr, "GET", "/api/v1/ephemeral/pop?queue=q&autoAck=true", "", true), 1)

	ch := parkedPop(t, addr, "p", 5000, true)
	waitParked(t, ts.e, 1)
	pushN(t, addr, "p", 2, true)
	wantDelivered(t, "a pop completed by a push", await(t, ch), 2)

	ch = parkedPop(t, addr, "empty", 50, true)
	wantDelivered(t, "a parked pop that timed out", await(t, ch), 0)

	// Refusals carry no count.
	if a := gwDo(t, addr, "GET", "/api/v1/ephemeral/pop?queue=q&batch=0", "", true); a.code != 400 || len(a.delivered) != 0 {
		t.Fatalf("a refused pop: %d %q %s", a.code, a.delivered, a.body)
	}
}

// Two loops: a push on another loop completes the parked pop through
// AsyncWrite or writeDirect.
func TestParkedPopCompletedFromAnotherLoopSaysHowMany(t *testing.T) {
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 2, Auth: gatewayAuth(t)})
	for i := range 4 { // gnet spreads connections over the loops: some land elsewhere
		q := fmt.Sprintf("x%d", i)
		ch := parkedPop(t, ts.addr, q, 5000, true)
		waitParked(t, ts.e, 1)
		pushN(t, ts.addr, q, i+1, true)
		wantDelivered(t, "a pop completed by a push", await(t, ch), i+1)
	}
}

func TestPopAnswerHasNoDeliveredCountOutsideGatewayMode(t *testing.T) {
	ts := serve(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1})
	check := func(what string, a gwAnswer, n int) {
		t.Helper()
		if a.code != 200 || a.messages() != n || len(a.delivered) != 0 {
			t.Fatalf("%s: %d X-Queen-Delivered %q in mode none, %s", what, a.code, a.delivered, a.body)
		}
	}
	check("an empty pop", gwDo(t, ts.addr, "GET", "/api/v1/ephemeral/pop?queue=q", "", false), 0)
	pushN(t, ts.addr, "q", 2, false)
	check("a batch", gwDo(t, ts.addr, "GET", "/api/v1/ephemeral/pop?queue=q&batch=5", "", false), 2)
	ch := parkedPop(t, ts.addr, "p", 5000, false)
	waitParked(t, ts.e, 1)
	pushN(t, ts.addr, "p", 1, false)
	check("a parked pop", await(t, ch), 1)
}

// In a cell the owner builds a relayed pop's answer, count included, and
// the landing member passes it on: answered at once, after parking on the
// link's loop (a relayed push completes it), and after parking elsewhere
// (the timing wheel).
func TestRelayedPopAnswerSaysHowManyItDelivered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ownerAddr := ln.Addr().String()
	members := []cell.Member{{ID: selfAddr}, {ID: ownerAddr}}
	relayClient := func() *relay.Client {
		rc, err := relay.NewClient(relay.ClientConfig{Secret: testSecret})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.Close() })
		return rc
	}
	owner := serveWith(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Auth: gatewayAuth(t)}, func(s *Server) {
		s.AttachCell(relayClient(), RelayOptions{Secret: testSecret})
		s.cell.m = fixedView{cell.StaticView(1, ownerAddr, members, false)}
	})
	rs, err := relay.NewServer(relay.ServerConfig{Secret: testSecret, Adopt: owner.s.AdoptRelayConn})
	if err != nil {
		t.Fatal(err)
	}
	go rs.Serve(ln)
	t.Cleanup(func() { rs.Close() })
	landingView := cell.StaticView(1, selfAddr, members, false)
	landing := serveWith(t, engine.New(engine.Config{}), openStore(t), Config{Loops: 1, Auth: gatewayAuth(t)}, func(s *Server) {
		s.AttachCell(relayClient(), RelayOptions{Secret: testSecret})
		s.cell.m = fixedView{landingView}
	})
	queues := ownedQueues(t, landingView, "acme", ownerAddr, 3)

	q := queues[0]
	pushN(t, landing.addr, q, 2, true)
	wantDelivered(t, "a relayed pop", gwDo(t, landing.addr, "GET", "/api/v1/ephemeral/pop?queue="+q+"&batch=10", "", true), 2)
	if served, relayed := owner.s.cell.served.Get(), landing.s.cell.relayed.Get(); served != 2 || relayed != 2 {
		t.Fatalf("the owner served %d requests, the landing member relayed %d; want the push and the pop", served, relayed)
	}

	q = queues[1]
	ch := parkedPop(t, landing.addr, q, 5000, true)
	waitParked(t, owner.e, 1)
	pushN(t, landing.addr, q, 3, true)
	wantDelivered(t, "a relayed pop completed by a relayed push", await(t, ch), 3)

	ch = parkedPop(t, landing.addr, queues[2], 50, true)
	wantDelivered(t, "a relayed pop that timed out", await(t, ch), 0)
}

// ownedQueues returns n queue names of tenant that v gives to owner.
func ownedQueues(t testing.TB, v *cell.View, tenant, owner string, n int) []string {
	t.Helper()
	var qs []string
	for i := 0; len(qs) < n; i++ {
		if i > 100*n {
			t.Fatal("too few queues owned by " + owner)
		}
		q := fmt.Sprintf("q%d", i)
		if m, ok := v.Owner(tenant, q); ok && m.ID == owner {
			qs = append(qs, q)
		}
	}
	return qs
}
