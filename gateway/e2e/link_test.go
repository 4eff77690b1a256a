package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// The link to a broker (docs/gateway.md, "The link to a broker"): waiting
// pops share one upgraded connection per gateway loop instead of taking a
// broker connection each.

// TestLinkCarriesWaitingPops: 16 clients wait at once; the broker sees
// them parked but not 16 connections, and each is answered by its push.
func TestLinkCarriesWaitingPops(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	openLinks(t, p)
	const n = 16
	pops := make([]<-chan popResult, n)
	for i := range pops {
		pops[i] = asyncPop(context.Background(), p.gw.as(t, "acme", "read-write"), fmt.Sprintf("queue=inbox-%d&wait=true&timeout=20000&autoAck=true", i))
	}
	brokertest.Eventually(t, 10*time.Second, "the pops did not all park at the broker", func() bool { return p.brokerParked(t) == n })
	if conns := brokerMetric(t, p.broker, "queen_ephemeral_connections", ""); conns >= n {
		t.Fatalf("the broker holds %v HTTP connections for %d waiting pops: they did not share the link", conns, n)
	}
	c := p.gw.as(t, "acme", "read-write")
	for i := range pops {
		c.mustPush(t, fmt.Sprintf("inbox-%d", i), 1)
	}
	for i, ch := range pops {
		if m := await(t, fmt.Sprintf("pop %d", i), ch); len(m.Messages) != 1 {
			t.Fatalf("pop %d got %d messages, want 1", i, len(m.Messages))
		}
	}
	p.admin.wantUsage(t, "acme", warmPushes+n, n)
	r := p.admin.do(t, "GET", "/metrics", "")
	if links := brokertest.Metric(string(r.Body), "queen_gateway_links", ""); links < 1 {
		t.Fatalf("queen_gateway_links %v, want at least 1", links)
	}
}

// warmPushes is how many pushes openLinks makes.
const warmPushes = 4

// openLinks has clients of both gateway loops (QUEEN_EVENT_LOOPS=2; new
// connections go round the loops) push, which opens each loop's link, and
// waits until the broker counts both.
func openLinks(t *testing.T, p *pair) {
	t.Helper()
	for range warmPushes {
		p.gw.as(t, "acme", "read-write").mustPush(t, "warm", 1)
	}
	brokertest.Eventually(t, 10*time.Second, "the broker never had both gateway links", func() bool {
		return brokerMetric(t, p.broker, "queen_ephemeral_gateway_links", "") == 2
	})
}

// TestLinkClientGone: a client that disconnects while its pop waits on
// the link has the broker let the pop go (a cancel frame), well before
// its timeout, and its slot back; the message pushed afterwards goes to
// the next pop, not to the client that left.
func TestLinkClientGone(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "one-slot", planJSON(true, 0, 0, 0, 1))
	openLinks(t, p)
	// One operator client for every read of the broker's gauges, so that
	// the reads add no connections of their own.
	op := operatorOf(p.broker)
	gauge := func(name string) float64 {
		r := op.do(t, "GET", "/metrics", "")
		want(t, "broker /metrics", r, 200, "")
		return brokertest.Metric(string(r.Body), name, "")
	}
	conns := gauge("queen_ephemeral_connections")
	for round := range 2 { // on both loops
		ctx, cancel := context.WithCancel(context.Background())
		gone := asyncPop(ctx, p.gw.as(t, "acme", "read-write"), "queue=d&wait=true&timeout=20000&autoAck=true")
		p.admin.waitParked(t, "acme", 1)
		brokertest.Eventually(t, 10*time.Second, "the waiting pop never parked at the broker", func() bool { return gauge("queen_ephemeral_parked_pops") == 1 })
		cancel()
		if res := <-gone; res.err == nil {
			t.Fatalf("round %d: the cancelled pop was answered: %s", round, res.r)
		}
		p.admin.waitParked(t, "acme", 0)
		brokertest.Eventually(t, 5*time.Second, "the disconnected pop is still parked at the broker", func() bool { return gauge("queen_ephemeral_parked_pops") == 0 })
		if after := gauge("queen_ephemeral_connections"); after != conns {
			t.Fatalf("round %d: the broker's connections went from %v to %v: the pop was not on the link", round, conns, after)
		}
		c := p.gw.as(t, "acme", "read-write")
		c.mustPush(t, "d", 1)
		if m := c.mustPop(t, "queue=d&autoAck=true"); len(m.Messages) != 1 {
			t.Fatalf("round %d: after the disconnect, the message pushed was not popped: got %d", round, len(m.Messages))
		}
	}
}

// TestLinkOff: with QUEEN_GATEWAY_LINK=false every waiting pop has a
// broker connection of its own, and no link is opened.
func TestLinkOff(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, map[string]string{"QUEEN_GATEWAY_LINK": "false"})
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	const n = 4
	pops := make([]<-chan popResult, n)
	for i := range pops {
		pops[i] = asyncPop(context.Background(), p.gw.as(t, "acme", "read-write"), fmt.Sprintf("queue=inbox-%d&wait=true&timeout=20000&autoAck=true", i))
	}
	brokertest.Eventually(t, 10*time.Second, "the pops did not all park at the broker", func() bool { return p.brokerParked(t) == n })
	if conns := brokerMetric(t, p.broker, "queen_ephemeral_connections", ""); conns < n {
		t.Fatalf("the broker holds %v connections for %d waiting pops over HTTP, want one each", conns, n)
	}
	if links := brokerMetric(t, p.broker, "queen_ephemeral_gateway_links", ""); links != 0 {
		t.Fatalf("queen_ephemeral_gateway_links %v with the link off, want 0", links)
	}
	c := p.gw.as(t, "acme", "read-write")
	for i := range pops {
		c.mustPush(t, fmt.Sprintf("inbox-%d", i), 1)
	}
	for i, ch := range pops {
		await(t, fmt.Sprintf("pop %d", i), ch)
	}
}

// TestLinkCellOwnerKilledMidRelay: a push that lands, over the link, on a
// member that relays it to the queue's owner, and the owner is killed
// while it holds the push: the push may have been applied, so the client
// gets no 503 (which the SDKs would send again) but a closed connection,
// a lost answer, end to end: the owner's death fails the member's relay
// after it sent the push, the member answers the gateway's stream
// RefuseLost, and the gateway closes its client's connection.
func TestLinkCellOwnerKilledMidRelay(t *testing.T) {
	// Not parallel: a cell of its own and a kill, kept out of the crowd of
	// the package's parallel tests.
	// B, the owner, holds every relayed request for 3 s.
	ms := startCell(t, 2, nil, map[string]string{"QUEEN_TEST_RELAY_DELAY_MS": "3000"})
	a, b := ms[0], ms[1]
	g := startGateway(t, []string{a.URL()}, nil) // every client lands on A
	admin := g.as(t, "ops", "admin")
	admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	for range 4 { // opens both gateway loops' links to A
		g.as(t, "acme", "read-write").mustPush(t, brokertest.QueueOwnedBy(t, []string{a.id, b.id}, "acme", "warm", a.id), 1)
	}
	brokertest.Eventually(t, 10*time.Second, "A never had both gateway links", func() bool {
		return brokerMetric(t, a.Broker, "queen_ephemeral_gateway_links", "") == 2
	})
	// The gateway routes by owner (docs/gateway.md, "Routing to owners"),
	// but it has sent nothing to B yet, so no loop holds an open link to
	// B: the first push for B's queue goes through A, which relays it.
	q := brokertest.QueueOwnedBy(t, []string{a.id, b.id}, "acme", "midrelay", b.id)
	done := make(chan error, 1)
	go func() {
		r, err := g.as(t, "acme", "read-write").try(context.Background(), "POST", "/api/v1/ephemeral/push", pushBody(q, 1))
		if err == nil {
			err = fmt.Errorf("answered %s", r)
		}
		done <- err
	}()
	// The push is on B, held: B logs each relayed request it holds.
	brokertest.Eventually(t, 20*time.Second, "B never held the relayed push", func() bool {
		return strings.Contains(b.Log(), "fault injection: holding a relayed request")
	})
	b.Kill()
	select {
	case err := <-done:
		if strings.HasPrefix(err.Error(), "answered") {
			t.Fatalf("a push relayed to an owner killed while holding it: %v; want the connection closed without an answer", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client got nothing within 10 s of the owner's death")
	}
	r := admin.do(t, "GET", "/metrics", "")
	if lost := brokertest.Metric(string(r.Body), "queen_gateway_answers_lost_total", ""); lost != 1 {
		t.Fatalf("queen_gateway_answers_lost_total %v, want 1", lost)
	}
}
