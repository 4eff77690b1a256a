package e2e

import (
	"encoding/json"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestBrokerRestart: the gateway outlives the broker behind it: with the
// broker stopped a request (which reaches no broker) is 503 ephemeral_forward_failed with
// Retry-After 1 and meters nothing; started again on the same port, the
// gateway serves again, on the connections it dials anew.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.broker.KeepPort = true
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c := p.gw.as(t, "acme", "read-write")
	c.mustPush(t, "q", 1)
	if m := c.mustPop(t, "queue=q&autoAck=true"); len(m.Messages) != 1 {
		t.Fatalf("popped %d", len(m.Messages))
	}
	// A waiting pop in flight when the broker goes.
	waiting := asyncPop(t.Context(), c, "queue=w&wait=true&timeout=20000")
	p.admin.waitParked(t, "acme", 1)
	// The gateway counts a pop parked when it admits it, before it has
	// left for the broker; one stopped before the pop reached it is
	// rightly a 503 (nothing was done). Wait until the broker holds it.
	brokertest.Eventually(t, 10*time.Second, "the broker never held the waiting pop", func() bool {
		return brokerMetric(t, p.broker, "queen_ephemeral_parked_pops", "") == 1
	})

	p.broker.Stop(t)
	select {
	case res := <-waiting:
		// SIGTERM answers parked pops with an empty batch; a broker gone
		// before its answer is a lost answer, the client's connection
		// closed, never a 503 that would say nothing was done.
		if res.err == nil && res.r.Status != 200 {
			t.Fatalf("the waiting pop, its broker stopped: %s, want 200 or a lost answer", res.r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting pop was not answered when its broker stopped")
	}
	p.admin.waitParked(t, "acme", 0)
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/api/v1/ephemeral/push", pushBody("q", 2)},
		{"GET", "/api/v1/ephemeral/pop?queue=q", ""},
		{"GET", "/api/v1/ephemeral/pop?queue=q&wait=true&timeout=1000", ""},
		{"GET", "/api/v1/ephemeral/queues", ""},
		{"POST", "/api/v1/ephemeral/configure", `{"queue":"q"}`},
	} {
		// A fresh client connection, and one kept alive.
		for _, cl := range []*client{c, p.gw.as(t, "acme", "read-write")} {
			r := cl.do(t, req.method, req.path, req.body)
			want(t, req.method+" "+req.path+" with the broker stopped", r, 503, "ephemeral_forward_failed")
			wantRetryAfter(t, req.method+" "+req.path+" with the broker stopped", r, 1, 1)
		}
	}
	p.admin.wantUsage(t, "acme", 1, 1)

	p.broker.Start(t)
	var last reply
	brokertest.Eventually(t, 10*time.Second, "the gateway never served again after the broker's restart", func() bool {
		last = c.push(t, "q", 2)
		if last.Status != 201 {
			want(t, "push while the broker comes back", last, 503, "ephemeral_forward_failed")
		}
		return last.Status == 201
	})
	// Each gateway loop passes a broker over for 100 ms after a failed
	// dial (docs/gateway.md): wait until fresh clients, which go round the
	// loops, are served too (a pop of an empty queue meters nothing).
	brokertest.Eventually(t, 10*time.Second, "a gateway loop never served again after the broker's restart", func() bool {
		for range 2 {
			r := p.gw.as(t, "acme", "read-write").pop(t, "queue=empty")
			if r.Status != 200 {
				want(t, "pop while the broker comes back", r, 503, "ephemeral_forward_failed")
				return false
			}
		}
		return true
	})
	if m := c.mustPop(t, "queue=q&batch=10&autoAck=true"); len(m.Messages) != 2 {
		t.Fatalf("after the restart, popped %d, want 2", len(m.Messages))
	}
	// On dedicated connections too: a declaration, a waiting pop.
	want(t, "configure after the restart", c.do(t, "POST", "/api/v1/ephemeral/configure", `{"queue":"w"}`), 201, "")
	waiting = asyncPop(t.Context(), p.gw.as(t, "acme", "read-write"), "queue=w&wait=true&timeout=20000&autoAck=true")
	p.admin.waitParked(t, "acme", 1)
	p.gw.as(t, "acme", "read-write").mustPush(t, "w", 1)
	if m := await(t, "the waiting pop after the restart", waiting); len(m.Messages) != 1 {
		t.Fatalf("the waiting pop after the restart got %d", len(m.Messages))
	}
	p.admin.waitParked(t, "acme", 0)
	p.admin.wantUsage(t, "acme", 4, 4)
}

// TestOneUpstreamDown: a gateway listing a broker that is down and one that
// is up serves every client from the one that is up.
func TestOneUpstreamDown(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	down := "http://127.0.0.1:" + strconv.Itoa(brokertest.Port(t))
	g := startGateway(t, []string{down, b.URL()}, nil)
	admin := g.as(t, "ops", "admin")
	admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	for i := range 6 { // a fresh connection each: round robin over both
		g.as(t, "acme", "read-write").mustPush(t, "q", 1)
		if m := g.as(t, "acme", "read-write").mustPop(t, "queue=q&autoAck=true"); len(m.Messages) != 1 {
			t.Fatalf("round %d: popped %d", i, len(m.Messages))
		}
	}
	admin.wantUsage(t, "acme", 6, 6)
}

// cellMember is a broker of a cell, its advertised address and the
// environment it was started with.
type cellMember struct {
	*brokertest.Broker
	id  string
	env map[string]string
}

// startCell starts n brokers in gateway mode on one fresh PostgreSQL schema
// as one cell, and waits until they are its live members, each counting
// them all in its view; extra, when given, adds to member i's environment.
func startCell(t *testing.T, n int, extra ...map[string]string) []*cellMember {
	t.Helper()
	return startCellWith(t, nil, n, extra...)
}

// startSteadyCell is startCell for a test that kills, pauses or cuts off
// no member: its members fence only after 5 s without a renewal
// (brokertest.SteadyCellTimings), so a loaded machine's stall does not.
func startSteadyCell(t *testing.T, n int, extra ...map[string]string) []*cellMember {
	t.Helper()
	return startCellWith(t, brokertest.SteadyCellTimings(), n, extra...)
}

func startCellWith(t *testing.T, timings map[string]string, n int, extra ...map[string]string) []*cellMember {
	t.Helper()
	_, schema := schemaURL(t)
	cellEnv := map[string]string{"QUEEN_CELL_SECRET": cellSecret}
	maps.Copy(cellEnv, timings)
	c := brokertest.NewCell(pg.URL(), schema, cellEnv)
	ms := make([]*cellMember, n)
	for i := range ms {
		id := brokertest.Advertise(t)
		var more map[string]string
		if i < len(extra) {
			more = extra[i]
		}
		env := c.Env(id, more)
		ms[i] = &cellMember{id: id, env: env, Broker: startBroker(t, env)}
		c.Add(id, ms[i].Broker)
	}
	c.WaitLive(t, memberIDs(ms)...)
	return ms
}

// TestCell: one gateway in front of a cell of two brokers on one
// PostgreSQL: push, pop and a woken waiting pop work for queues owned by
// either member, and metering is exact; on the links to the members (once
// they are open: the first requests of each gateway loop go over HTTP
// meanwhile), where each goes to its queue's owner, and over HTTP alone,
// where a client lands on either member, which relays.
func TestCell(t *testing.T) {
	t.Parallel()
	t.Run("link", func(t *testing.T) { t.Parallel(); testCell(t, true) })
	t.Run("http", func(t *testing.T) { t.Parallel(); testCell(t, false) })
}

func testCell(t *testing.T, link bool) {
	ms := startSteadyCell(t, 2)
	ids := []string{ms[0].id, ms[1].id}
	g := startGateway(t, []string{ms[0].URL(), ms[1].URL()}, map[string]string{"QUEEN_GATEWAY_LINK": strconv.FormatBool(link)})
	admin := g.as(t, "ops", "admin")
	admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))

	var msgs, delivs int64
	if link {
		// Pushes to a queue of each member from fresh clients, which go
		// round the gateway's two loops, open every loop's link to every
		// member (the gateway routes them to their owners once it has the
		// cell's view), so that what follows goes over the links.
		msgs += int64(warmCellLinks(t, g, ms))
	}
	relayedBefore := perMember(t, ms, "queen_ephemeral_relayed_total", "")
	for _, owner := range ms {
		q := brokertest.QueueOwnedBy(t, ids, "acme", "cq", owner.id)
		// Fresh connections land on both members in turn (round robin), so
		// each queue is served directly once and relayed once.
		for round := range 2 {
			g.as(t, "acme", "read-write").mustPush(t, q, 3)
			g.as(t, "acme", "read-write").mustPush(t, q, 2)
			msgs += 5
			r := g.as(t, "acme", "read-write").pop(t, "queue="+q+"&batch=10&autoAck=true")
			want(t, "pop "+q, r, 200, "")
			var p popped
			if err := json.Unmarshal(r.Body, &p); err != nil || len(p.Messages) != 5 {
				t.Fatalf("queue %s (owner %s) round %d: popped %s", q, owner.id, round, r)
			}
			delivs += 5
			if m := g.as(t, "acme", "read-write").mustPop(t, "queue="+q+"&batch=10"); len(m.Messages) != 0 {
				t.Fatalf("queue %s: a second pop got %d", q, len(m.Messages))
			}
			admin.wantUsage(t, "acme", msgs, delivs)
		}
		// A waiting pop, woken by a push from another connection.
		waiting := asyncPop(t.Context(), g.as(t, "acme", "read-write"), "queue="+q+"&wait=true&timeout=20000&autoAck=true")
		admin.waitParked(t, "acme", 1)
		g.as(t, "acme", "read-write").mustPush(t, q, 1)
		msgs++
		if m := await(t, "the waiting pop of "+q, waiting); len(m.Messages) != 1 {
			t.Fatalf("queue %s: the waiting pop got %d", q, len(m.Messages))
		}
		delivs++
		admin.waitParked(t, "acme", 0)
		admin.wantUsage(t, "acme", msgs, delivs)
	}
	// What each member counted: together, what the gateway metered.
	var pushed, delivered float64
	for _, m := range ms {
		pushed += brokerMetric(t, m.Broker, "queen_ephemeral_pushed_messages_total", `tenant="acme"`)
		delivered += brokerMetric(t, m.Broker, "queen_ephemeral_delivered_messages_total", `tenant="acme"`)
	}
	if int64(pushed) != msgs || int64(delivered) != delivs {
		t.Fatalf("the members counted %v pushed and %v delivered; the gateway %d and %d", pushed, delivered, msgs, delivs)
	}
	// The clients' requests landed on both members. Over HTTP each member
	// relayed to the other; on the links the gateway sent each to its
	// owner (docs/gateway.md, "Routing to owners"): nothing was relayed.
	// With the link on, each member holds links of the gateway.
	for i, m := range ms {
		landed := brokerMetric(t, m.Broker, "queen_ephemeral_request_duration_seconds_count", `route="push"`)
		relayed := brokerMetric(t, m.Broker, "queen_ephemeral_relayed_total", "") - relayedBefore[i]
		if landed == 0 || (relayed == 0) != link {
			t.Fatalf("member %s: %v pushes landed, %v requests relayed; want pushes, and relays %s", m.id, landed, relayed, map[bool]string{true: "none (the link routes to owners)", false: "above 0 (HTTP relays)"}[link])
		}
		if n := brokerMetric(t, m.Broker, "queen_ephemeral_request_duration_seconds_count", `route="cell"`); (n > 0) != link && i == 0 {
			t.Fatalf("member %s served %v view reads of the gateway, with the gateway's link on: %v (without links there is nothing to route by)", m.id, n, link)
		}
		if links := brokerMetric(t, m.Broker, "queen_ephemeral_gateway_links", ""); (links > 0) != link {
			t.Fatalf("member %s holds %v gateway links, with the gateway's link on: %v", m.id, links, link)
		}
	}
}
