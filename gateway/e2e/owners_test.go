package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// Routing to owners (docs/gateway.md, "Routing to owners"): in front of a
// cell the gateway sends each push, pop and ack on its link to the member
// that owns the queue, learned from the members' view read, instead of to
// a configured member that relays it.

// gwMetric reads one summed series of the gateway's /metrics, as its
// operator.
func gwMetric(t *testing.T, g *gateway, name, labelPart string) float64 {
	t.Helper()
	r := g.as(t, "ops", "admin").do(t, "GET", "/metrics", "")
	want(t, "gateway /metrics", r, 200, "")
	return brokertest.Metric(string(r.Body), name, labelPart)
}

func memberIDs(ms []*cellMember) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.id
	}
	return ids
}

// perMember reads one series on every member.
func perMember(t *testing.T, ms []*cellMember, name, labelPart string) []float64 {
	t.Helper()
	out := make([]float64, len(ms))
	for i, m := range ms {
		if m != nil {
			out[i] = brokerMetric(t, m.Broker, name, labelPart)
		}
	}
	return out
}

// warmOwners pushes to each of queues (queue i owned by ms[i]) from fresh
// clients, which go round the gateway's two loops, until every member in
// reach holds both loops' links: the gateway has learned the view and
// opened a link to every owner it can dial. It returns the messages
// pushed to each queue.
func warmOwners(t *testing.T, g *gateway, ms []*cellMember, queues []string, reach []bool) []int {
	t.Helper()
	pushed := make([]int, len(queues))
	brokertest.Eventually(t, 20*time.Second, "the gateway never held links to every owner", func() bool {
		for i, q := range queues {
			if reach[i] {
				g.as(t, "acme", "read-write").mustPush(t, q, 1)
				pushed[i]++
			}
		}
		for i, m := range ms {
			if reach[i] && brokerMetric(t, m.Broker, "queen_ephemeral_gateway_links", "") < 2 {
				return false
			}
		}
		return true
	})
	return pushed
}

// warmCellLinks opens every gateway loop's link to every member of ms
// (warmOwners, on queues named warm-*) and returns the messages pushed.
func warmCellLinks(t *testing.T, g *gateway, ms []*cellMember) int {
	t.Helper()
	reach := make([]bool, len(ms))
	for i := range reach {
		reach[i] = true
	}
	n := 0
	for _, k := range warmOwners(t, g, ms, queuesOfEach(t, ms, "warm"), reach) {
		n += k
	}
	return n
}

// queuesOfEach is a fresh queue of tenant acme for each member of ms, in
// order: queue i owned by ms[i].
func queuesOfEach(t *testing.T, ms []*cellMember, prefix string) []string {
	t.Helper()
	queues := make([]string, len(ms))
	for i, m := range ms {
		queues[i] = brokertest.QueueOwnedBy(t, memberIDs(ms), "acme", prefix, m.id)
	}
	return queues
}

// gatewayFor starts a gateway in front of upstreams with tenant acme on an
// unlimited plan, and returns it with its operator.
func gatewayFor(t *testing.T, upstreams ...string) (*gateway, *client) {
	t.Helper()
	g := startGateway(t, upstreams, nil)
	admin := g.as(t, "ops", "admin")
	admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	return g, admin
}

// ackBody acks every message of p on queue.
func ackBody(queue string, p popped) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"queue":%q,"acks":[`, queue)
	for i, m := range p.Messages {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%q}`, m.ID)
	}
	b.WriteString("]}")
	return b.String()
}

// TestGatewayRoutesToOwners: a gateway given one member of a cell of three
// sends the pushes, pops (waiting or not) and acks of queues owned by each
// member to that member, over HTTP from the client and on a client link:
// no member relays anything, each member serves the pushes of its own
// queue alone, and the gateway counts every call as sent to its owner.
// Before the gateway routed by owner, the configured member relayed two
// thirds of them (its queen_ephemeral_relayed_total moved).
func TestGatewayRoutesToOwners(t *testing.T) {
	t.Parallel()
	ms := startSteadyCell(t, 3)
	g, admin := gatewayFor(t, ms[0].URL())
	queues := queuesOfEach(t, ms, "own")
	pushed := warmOwners(t, g, ms, queues, []bool{true, true, true})
	if n := gwMetric(t, g, "queen_gateway_cell_members", ""); n != 3 {
		t.Fatalf("the gateway's view has %v members, want 3", n)
	}

	relayed := perMember(t, ms, "queen_ephemeral_relayed_total", "")
	landed := perMember(t, ms, "queen_ephemeral_request_duration_seconds_count", `route="push"`)
	toOwner := gwMetric(t, g, "queen_gateway_owner_routed_total", `how="owner"`)
	fallback := gwMetric(t, g, "queen_gateway_owner_routed_total", `how="fallback"`)

	c := g.as(t, "acme", "read-write") // one connection for every queue
	l := dialLink(t, g.URL(), token(t, "acme", "read-write"))
	sent := 0
	for i, q := range queues {
		g.as(t, "acme", "read-write").mustPush(t, q, 2)
		c.mustPush(t, q, 1)
		want(t, "push "+q+" on a client link", l.call("POST", "/api/v1/ephemeral/push", pushBody(q, 1)), 201, "")
		p := c.mustPop(t, "queue="+q+"&batch=100")
		if len(p.Messages) != pushed[i]+4 {
			t.Fatalf("queue %s (owner %s): popped %d, want %d", q, ms[i].id, len(p.Messages), pushed[i]+4)
		}
		r := c.do(t, "POST", "/api/v1/ephemeral/ack", ackBody(q, p))
		want(t, "ack "+q, r, 200, "")
		if strings.Count(string(r.Body), `"outcome":"acked"`) != len(p.Messages) {
			t.Fatalf("ack %s: %s", q, r)
		}
		waiting := asyncPop(t.Context(), g.as(t, "acme", "read-write"), "queue="+q+"&wait=true&timeout=20000&autoAck=true")
		admin.waitParked(t, "acme", 1)
		want(t, "push "+q+" on a client link", l.call("POST", "/api/v1/ephemeral/push", pushBody(q, 1)), 201, "")
		if m := await(t, "the waiting pop of "+q, waiting); len(m.Messages) != 1 {
			t.Fatalf("queue %s: the waiting pop got %d", q, len(m.Messages))
		}
		admin.waitParked(t, "acme", 0)
		sent += 7 // four pushes, two pops, an ack
	}

	for i, m := range ms {
		if n := brokerMetric(t, m.Broker, "queen_ephemeral_relayed_total", ""); n != relayed[i] {
			t.Errorf("member %s relayed %v requests; the gateway should have sent each to its owner", m.id, n-relayed[i])
		}
		if n := brokerMetric(t, m.Broker, "queen_ephemeral_request_duration_seconds_count", `route="push"`); n-landed[i] != 4 {
			t.Errorf("member %s served %v pushes, want the 4 of its own queue", m.id, n-landed[i])
		}
	}
	if n := gwMetric(t, g, "queen_gateway_owner_routed_total", `how="owner"`) - toOwner; int(n) != sent {
		t.Errorf("the gateway counted %v calls sent to their owner, want %d", n, sent)
	}
	if n := gwMetric(t, g, "queen_gateway_owner_routed_total", `how="fallback"`); n != fallback {
		t.Errorf("the gateway counted %v calls relayed through another member, want 0", n-fallback)
	}

	// Pipelined on one connection, requests for the three owners go on
	// three links at once; their answers come back in the client's order.
	tok := token(t, "acme", "read-write")
	pops := func(q string) string { return "/api/v1/ephemeral/pop?queue=" + q + "&batch=10&autoAck=true" }
	pipelined := []struct {
		raw   string
		check string
	}{
		{rawRequest("POST", "/api/v1/ephemeral/push", tok, pushBody(queues[0], 2)), `"pushed":2`},
		{rawRequest("POST", "/api/v1/ephemeral/push", tok, pushBody(queues[1], 1)), `"pushed":1`},
		{rawRequest("POST", "/api/v1/ephemeral/push", tok, pushBody(queues[2], 3)), `"pushed":3`},
		{rawRequest("GET", pops(queues[1]), tok, ""), `"queue":"` + queues[1] + `"`},
		{rawRequest("GET", pops(queues[2])+"&wait=true&timeout=5000", tok, ""), `"queue":"` + queues[2] + `"`},
		{rawRequest("POST", "/api/v1/ephemeral/push", tok, pushBody(queues[0], 1)), `"pushed":1`},
		{rawRequest("GET", pops(queues[0]), tok, ""), `"queue":"` + queues[0] + `"`},
	}
	conn, err := net.Dial("tcp", g.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	var all strings.Builder
	for _, r := range pipelined {
		all.WriteString(r.raw)
	}
	if _, err := conn.Write([]byte(all.String())); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	counts := []int{-1, -1, -1, 1, 3, -1, 3}
	for i, r := range pipelined {
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatalf("pipelined answer %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 || !strings.Contains(string(body), r.check) || counts[i] >= 0 && strings.Count(string(body), `"payload"`) != counts[i] {
			t.Fatalf("pipelined answer %d (%s): %d %s, want %s", i, strings.SplitN(r.raw, "\r\n", 2)[0], resp.StatusCode, body, r.check)
		}
	}
	for i, m := range ms {
		if n := brokerMetric(t, m.Broker, "queen_ephemeral_relayed_total", ""); n != relayed[i] {
			t.Errorf("after the pipelined requests member %s relayed %v", m.id, n-relayed[i])
		}
	}
}

// TestGatewayOwnerUnreachable: a member whose public URL the gateway
// cannot dial (QUEEN_CELL_PUBLIC_URL names a closed port) still has its
// queues served through the gateway, relayed by the configured member, and
// counted as such; the other members' queues go to their owners.
func TestGatewayOwnerUnreachable(t *testing.T) {
	t.Parallel()
	closed := "http://127.0.0.1:" + strconv.Itoa(closedPort(t))
	ms := startSteadyCell(t, 3, nil, nil, map[string]string{"QUEEN_CELL_PUBLIC_URL": closed})
	g, _ := gatewayFor(t, ms[0].URL())
	queues := queuesOfEach(t, ms, "far")
	warmOwners(t, g, ms, queues, []bool{true, true, false})

	relayed := perMember(t, ms, "queen_ephemeral_relayed_total", "")
	toOwner := gwMetric(t, g, "queen_gateway_owner_routed_total", `how="owner"`)
	fallback := gwMetric(t, g, "queen_gateway_owner_routed_total", `how="fallback"`)
	c := g.as(t, "acme", "read-write")
	for _, q := range queues {
		for range 3 {
			c.mustPush(t, q, 1)
		}
		if p := c.mustPop(t, "queue="+q+"&batch=100&autoAck=true"); len(p.Messages) < 3 {
			t.Fatalf("queue %s: popped %d", q, len(p.Messages))
		}
	}
	if n := brokerMetric(t, ms[2].Broker, "queen_ephemeral_gateway_links", ""); n != 0 {
		t.Fatalf("the unreachable member holds %v gateway links", n)
	}
	if n := brokerMetric(t, ms[0].Broker, "queen_ephemeral_relayed_total", "") - relayed[0]; n != 4 {
		t.Errorf("the configured member relayed %v requests, want the 4 of the unreachable member's queue", n)
	}
	if n := brokerMetric(t, ms[1].Broker, "queen_ephemeral_relayed_total", "") - relayed[1]; n != 0 {
		t.Errorf("the reachable member relayed %v requests, want 0", n)
	}
	if n := gwMetric(t, g, "queen_gateway_owner_routed_total", `how="fallback"`) - fallback; n != 4 {
		t.Errorf("the gateway counted %v calls relayed through another member, want 4", n)
	}
	if n := gwMetric(t, g, "queen_gateway_owner_routed_total", `how="owner"`) - toOwner; n != 8 {
		t.Errorf("the gateway counted %v calls sent to their owner, want 8", n)
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// TestGatewaySingleBrokerAsksOnce: in front of a single broker (generation
// 0, not a cell) the gateway asks for the view once and keeps no read
// waiting: the broker serves one view read however much traffic follows,
// and nothing is counted as routed.
func TestGatewaySingleBrokerAsksOnce(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c := p.gw.as(t, "acme", "read-write")
	c.mustPush(t, "q", 1)
	brokertest.Eventually(t, 10*time.Second, "the gateway never asked for the view", func() bool {
		return brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="cell"`) == 1
	})
	for i := range 100 {
		cl := c
		if i%10 == 0 {
			cl = p.gw.as(t, "acme", "read-write") // fresh connections, on both loops
		}
		cl.mustPush(t, "q", 1)
		cl.mustPop(t, "queue=q&autoAck=true")
	}
	if n := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="cell"`); n != 1 {
		t.Fatalf("the broker served %v view reads of the gateway, want 1", n)
	}
	if n := gwMetric(t, p.gw, "queen_gateway_cell_view_reads_total", ""); n != 1 {
		t.Fatalf("the gateway sent %v view reads, want 1", n)
	}
	if n := gwMetric(t, p.gw, "queen_gateway_owner_routed_total", ""); n != 0 {
		t.Fatalf("in front of one broker the gateway counted %v calls as routed", n)
	}
}

// TestGatewayOwnerStopped: under load through the gateway, an owner killed
// (SIGKILL), then another stopped cleanly (SIGTERM): the callers see only
// what the contract allows (201, 503 ephemeral_forward_failed or
// owner_moved, which say nothing was applied, and a lost answer for a
// request in flight to the dead owner), the queues are served again once
// the members have seen the change, the gateway's view follows (its
// members' count), and from then on the calls go to the new owner with
// nothing relayed. No message is delivered twice.
func TestGatewayOwnerStopped(t *testing.T) {
	t.Parallel()
	ms := startCell(t, 3)
	urls := []string{ms[0].URL(), ms[1].URL(), ms[2].URL()}
	g, _ := gatewayFor(t, urls...)
	queues := queuesOfEach(t, ms, "mv")
	warmOwners(t, g, ms, queues, []bool{true, true, true})

	ld := startLoad(t, g, queues)
	ld.waitServed(t, 50)
	live := append([]*cellMember(nil), ms...)
	for _, step := range []struct {
		victim int
		how    string
	}{{2, "kill -9"}, {1, "stop"}} {
		v := live[step.victim]
		before := ld.served()
		t0 := time.Now()
		if step.how == "kill -9" {
			v.Kill()
		} else {
			v.SignalWait(t, syscall.SIGTERM, 10*time.Second)
		}
		live[step.victim] = nil
		q := queues[step.victim]
		left := 3 - countNil(live)
		brokertest.Eventually(t, 15*time.Second, "the gateway's view never dropped "+v.id+" ("+step.how+")", func() bool {
			return gwMetric(t, g, "queen_gateway_cell_members", "") == float64(left)
		})
		viewAfter := time.Since(t0)
		brokertest.Eventually(t, 15*time.Second, "queue "+q+" was not served again after its owner's "+step.how, func() bool {
			return g.as(t, "acme", "read-write").push(t, q, 1).Status == 201
		})
		t.Logf("%s of %s: the gateway's view dropped it after %v, its queue served again after %v; %d calls served meanwhile",
			step.how, v.id, viewAfter.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), ld.served()-before)

		// From now on every call goes to its owner: nothing is relayed.
		var rest []*cellMember
		for _, m := range live {
			if m != nil {
				rest = append(rest, m)
			}
		}
		brokertest.Eventually(t, 15*time.Second, "the gateway never held links to the new owner", func() bool {
			for _, m := range rest {
				if brokerMetric(t, m.Broker, "queen_ephemeral_gateway_links", "") < 2 {
					g.as(t, "acme", "read-write").mustPush(t, q, 1)
					return false
				}
			}
			return true
		})
		relayed := perMember(t, rest, "queen_ephemeral_relayed_total", "")
		c := g.as(t, "acme", "read-write")
		for range 10 {
			c.mustPush(t, q, 1)
		}
		for i, m := range rest {
			if n := brokerMetric(t, m.Broker, "queen_ephemeral_relayed_total", ""); n != relayed[i] {
				t.Errorf("after the %s, member %s relayed %v calls while nothing moved", step.how, m.id, n-relayed[i])
			}
		}
	}
	ld.stop(t)
	ld.checkNoDuplicates(t)
}

// TestGatewayMemberJoins: under load through a gateway given one member
// of a cell of two, a third member joins: the callers see only what the
// contract allows, the gateway learns the new member (its address, which
// the gateway was never given) and sends the queues it now owns to it, with
// nothing relayed.
func TestGatewayMemberJoins(t *testing.T) {
	t.Parallel()
	ms := startSteadyCell(t, 2)
	g, _ := gatewayFor(t, ms[0].URL())
	warmCellLinks(t, g, ms)
	ld := startLoad(t, g, queuesOfEach(t, ms, "jn"))
	ld.waitServed(t, 50)

	env := merge(ms[0].env, nil)
	env["QUEEN_CELL_ADVERTISE"] = "127.0.0.1:" + strconv.Itoa(brokertest.Port(t))
	ms = append(ms, &cellMember{id: env["QUEEN_CELL_ADVERTISE"], env: env, Broker: startBroker(t, env)})
	brokertest.Eventually(t, 15*time.Second, "the gateway's view never had the new member", func() bool {
		return gwMetric(t, g, "queen_gateway_cell_members", "") == 3
	})
	q := queuesOfEach(t, ms, "joined")[2]
	brokertest.Eventually(t, 15*time.Second, "the gateway never held links to the new member", func() bool {
		// While the join settles the contract allows a refusal that did
		// nothing (CI once had the new member miss a heartbeat under load
		// and answer owner_moved); anything else fails.
		if r := g.as(t, "acme", "read-write").push(t, q, 1); r.Status != 201 && (r.Status != 503 || (r.code() != "owner_moved" && r.code() != "ephemeral_forward_failed")) {
			t.Fatalf("push %s while the member joins: %d %s", q, r.Status, r.Body)
		}
		return brokerMetric(t, ms[2].Broker, "queen_ephemeral_gateway_links", "") == 2
	})
	relayed := perMember(t, ms, "queen_ephemeral_relayed_total", "")
	landed := brokerMetric(t, ms[2].Broker, "queen_ephemeral_request_duration_seconds_count", `route="push"`)
	c := g.as(t, "acme", "read-write")
	for range 10 {
		c.mustPush(t, q, 1)
	}
	for i, m := range ms {
		if n := brokerMetric(t, m.Broker, "queen_ephemeral_relayed_total", ""); n != relayed[i] {
			t.Errorf("after the join, member %s relayed %v calls", m.id, n-relayed[i])
		}
	}
	if n := brokerMetric(t, ms[2].Broker, "queen_ephemeral_request_duration_seconds_count", `route="push"`) - landed; n < 10 {
		t.Errorf("the new member served %v pushes of its queue, want 10", n)
	}
	ld.stop(t)
	ld.checkNoDuplicates(t)
}

func countNil(ms []*cellMember) int {
	n := 0
	for _, m := range ms {
		if m == nil {
			n++
		}
	}
	return n
}

// load is a few clients of the gateway pushing uniquely numbered messages
// to queues and popping them (autoAck), each checking every answer against
// what the contract allows.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	ok     int
	lost   int            // answers lost (the transport's error)
	moved  int            // 503 ephemeral_forward_failed or owner_moved
	seen   map[string]int // payload → times delivered
	bad    []string
}

func startLoad(t *testing.T, g *gateway, queues []string) *load {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &load{cancel: cancel, seen: map[string]int{}}
	for w := range 4 {
		c := g.as(t, "acme", "read-write")
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				q := queues[(w+n)%len(queues)]
				payload := fmt.Sprintf("w%d-%d", w, n)
				r, err := c.try(ctx, "POST", "/api/v1/ephemeral/push", `{"queue":"`+q+`","messages":[{"payload":"`+payload+`"}]}`)
				ld.check("push", r, err, 201, ctx)
				r, err = c.try(ctx, "GET", "/api/v1/ephemeral/pop?queue="+q+"&batch=10&autoAck=true", "")
				if ld.check("pop", r, err, 200, ctx) {
					var p struct {
						Messages []struct {
							Payload string `json:"payload"`
						} `json:"messages"`
					}
					if json.Unmarshal(r.Body, &p) == nil {
						ld.mu.Lock()
						for _, m := range p.Messages {
							ld.seen[m.Payload]++
						}
						ld.mu.Unlock()
					}
				}
				if err != nil || r.Status != 200 && r.Status != 201 {
					time.Sleep(10 * time.Millisecond) // the SDKs' first backoff step
				}
			}
		}()
	}
	t.Cleanup(cancel)
	return ld
}

// check records an answer: ok is status; a lost answer (the transport's
// error) and 503 ephemeral_forward_failed or owner_moved are what the
// contract allows while an owner goes; anything else is a failure.
func (ld *load) check(what string, r reply, err error, ok int, ctx context.Context) bool {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	switch {
	case ctx.Err() != nil:
	case err != nil:
		ld.lost++
	case r.Status == ok:
		ld.ok++
		return true
	case r.Status == 503 && (r.code() == "ephemeral_forward_failed" || r.code() == "owner_moved"):
		ld.moved++
	default:
		ld.bad = append(ld.bad, what+": "+r.String())
	}
	return false
}

func (ld *load) served() int {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.ok
}

func (ld *load) waitServed(t *testing.T, n int) {
	t.Helper()
	brokertest.Eventually(t, 20*time.Second, "the load was never served", func() bool { return ld.served() >= n })
}

func (ld *load) stop(t *testing.T) {
	t.Helper()
	ld.cancel()
	ld.wg.Wait()
	if len(ld.bad) > 0 {
		t.Fatalf("%d answers the contract does not allow, first: %s", len(ld.bad), ld.bad[0])
	}
}

func (ld *load) checkNoDuplicates(t *testing.T) {
	t.Helper()
	for p, n := range ld.seen {
		if n > 1 {
			t.Fatalf("message %s delivered %d times", p, n)
		}
	}
	t.Logf("%d calls served, %d refused 503 (nothing applied), %d answers lost; %d messages delivered once each", ld.ok, ld.moved, ld.lost, len(ld.seen))
}
