package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"
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
	// A first request of each loop's clients opens the loop's link; the
	// broker's gauge says when both are open.
	for range 4 {
		p.gw.as(t, "acme", "read-write").mustPush(t, "warm", 1)
	}
	eventually(t, 10*time.Second, "the broker has no gateway link", func() bool {
		return brokerMetric(t, p.broker, "queen_ephemeral_gateway_links", "") >= 1
	})
	const n = 16
	pops := make([]<-chan popResult, n)
	for i := range pops {
		pops[i] = asyncPop(context.Background(), p.gw.as(t, "acme", "read-write"), fmt.Sprintf("queue=inbox-%d&wait=true&timeout=20000&autoAck=true", i))
	}
	eventually(t, 10*time.Second, "the pops did not all park at the broker", func() bool { return p.brokerParked(t) == n })
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
	p.admin.wantUsage(t, "acme", 4+n, n)
	r := p.admin.do(t, "GET", "/metrics", "")
	if links := metric(string(r.body), "queen_gateway_links", ""); links < 1 {
		t.Fatalf("queen_gateway_links %v, want at least 1", links)
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
	eventually(t, 10*time.Second, "the pops did not all park at the broker", func() bool { return p.brokerParked(t) == n })
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
