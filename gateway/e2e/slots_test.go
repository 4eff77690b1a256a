package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// asyncPop starts a pop of c in the background; its answer (or transport
// error) arrives on the channel.
func asyncPop(ctx context.Context, c *client, query string) <-chan popResult {
	ch := make(chan popResult, 1)
	go func() {
		r, err := c.try(ctx, "GET", "/api/v1/ephemeral/pop?"+query, "")
		ch <- popResult{r, err}
	}()
	return ch
}

type popResult struct {
	r   reply
	err error
}

// await waits (bounded) for an asyncPop's answer, which must be 200; it
// answers the messages.
func await(t *testing.T, what string, ch <-chan popResult) popped {
	t.Helper()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatalf("%s: %v", what, res.err)
		}
		want(t, what, res.r, 200, "")
		var p popped
		if err := json.Unmarshal(res.r.Body, &p); err != nil {
			t.Fatalf("%s: %v: %s", what, err, res.r.Body)
		}
		return p
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no answer in 20 s", what)
	}
	return popped{}
}

// brokerParked is broker b's count of parked pops.
func (p *pair) brokerParked(t *testing.T) float64 {
	t.Helper()
	return brokerMetric(t, p.broker, "queen_ephemeral_parked_pops", "")
}

// TestParkedSlots: parkedSlots 1: a waiting pop holds the slot, a second
// waiting pop is 429 parked_slots_exhausted (a pop that does not wait needs
// no slot), and the slot comes back when the pop is answered by a push, when
// it times out, and when its client disconnects; then the gateway has closed
// the pop's broker connection, so a message pushed afterwards is not leased
// to the client that left: the next pop gets it. On the link (opened before
// the first pop); TestParkedSlotsLinkOff runs the same over HTTP.
func TestParkedSlots(t *testing.T) {
	t.Parallel()
	parkedSlots(t, true)
}

// parkedSlots is TestParkedSlots, its pops on the link (link) or on broker
// connections of their own (QUEEN_GATEWAY_LINK=false).
func parkedSlots(t *testing.T, link bool) {
	p := startPair(t, nil, map[string]string{"QUEEN_GATEWAY_LINK": strconv.FormatBool(link)})
	p.admin.onPlan(t, "acme", "one-slot", planJSON(true, 0, 0, 0, 1))
	warm := int64(0) // the pushes that opened the links
	if link {
		openLinks(t, p)
		warm = warmPushes
	}
	c := p.gw.as(t, "acme", "read-write")

	// Answered by a push.
	first := asyncPop(context.Background(), c, "queue=w&wait=true&timeout=20000&autoAck=true")
	p.admin.waitParked(t, "acme", 1)
	want(t, "a second waiting pop", c.pop(t, "queue=w2&wait=true&timeout=20000"), 429, "parked_slots_exhausted")
	if m := c.mustPop(t, "queue=w2"); len(m.Messages) != 0 {
		t.Fatalf("a pop that does not wait got %d messages", len(m.Messages))
	}
	c.mustPush(t, "w", 1)
	if m := await(t, "the waiting pop", first); len(m.Messages) != 1 {
		t.Fatalf("the woken pop got %d messages, want 1", len(m.Messages))
	}
	p.admin.waitParked(t, "acme", 0)
	p.admin.wantUsage(t, "acme", warm+1, 1)

	// Timed out: the empty batch gives the slot back.
	if m := await(t, "a pop timing out", asyncPop(context.Background(), c, "queue=t&wait=true&timeout=300")); len(m.Messages) != 0 {
		t.Fatalf("the timed-out pop got %d messages", len(m.Messages))
	}
	p.admin.waitParked(t, "acme", 0)
	again := asyncPop(context.Background(), c, "queue=t&wait=true&timeout=300")
	if m := await(t, "a waiting pop after the timeout", again); len(m.Messages) != 0 {
		t.Fatalf("got %d messages", len(m.Messages))
	}
	p.admin.waitParked(t, "acme", 0)

	// The client disconnects.
	brokertest.Eventually(t, 10*time.Second, "the broker still has parked pops", func() bool { return p.brokerParked(t) == 0 })
	ctx, cancel := context.WithCancel(context.Background())
	gone := asyncPop(ctx, c, "queue=d&wait=true&timeout=20000&autoAck=true")
	p.admin.waitParked(t, "acme", 1)
	brokertest.Eventually(t, 10*time.Second, "the waiting pop never parked at the broker", func() bool { return p.brokerParked(t) == 1 })
	cancel()
	if res := <-gone; res.err == nil {
		t.Fatalf("the cancelled pop was answered: %s", res.r)
	}
	p.admin.waitParked(t, "acme", 0)
	// Well before the pop's 20 s: the gateway closed its broker connection.
	brokertest.Eventually(t, 5*time.Second, "the disconnected pop is still parked at the broker", func() bool { return p.brokerParked(t) == 0 })
	c.mustPush(t, "d", 1)
	if m := c.mustPop(t, "queue=d&autoAck=true"); len(m.Messages) != 1 {
		t.Fatalf("after the disconnect, the message pushed was not popped: got %d", len(m.Messages))
	}
	p.admin.wantUsage(t, "acme", warm+2, 2)
	// And the slot serves the next waiting pop.
	next := asyncPop(context.Background(), c, "queue=d&wait=true&timeout=20000&autoAck=true")
	p.admin.waitParked(t, "acme", 1)
	c.mustPush(t, "d", 1)
	if m := await(t, "the next waiting pop", next); len(m.Messages) != 1 {
		t.Fatalf("the next waiting pop got %d messages", len(m.Messages))
	}
	p.admin.waitParked(t, "acme", 0)
	p.admin.wantUsage(t, "acme", warm+3, 3)
}

// TestParkedSlotsPerTenant: the slots are counted per tenant: another
// tenant on the same plan parks while the first holds its slot.
func TestParkedSlotsPerTenant(t *testing.T) {
	t.Parallel()
	parkedSlotsPerTenant(t, nil)
}

// parkedSlotsPerTenant is TestParkedSlotsPerTenant with gwExtra over the
// gateway's environment.
func parkedSlotsPerTenant(t *testing.T, gwExtra map[string]string) {
	p := startPair(t, nil, gwExtra)
	p.admin.onPlan(t, "acme", "one-slot", planJSON(true, 0, 0, 0, 1))
	p.admin.putTenant(t, "globex", "one-slot")
	a, g := p.gw.as(t, "acme", "read-write"), p.gw.as(t, "globex", "read-write")
	popA := asyncPop(context.Background(), a, "queue=w&wait=true&timeout=20000&autoAck=true")
	p.admin.waitParked(t, "acme", 1)
	popG := asyncPop(context.Background(), g, "queue=w&wait=true&timeout=20000&autoAck=true")
	p.admin.waitParked(t, "globex", 1)
	want(t, "acme's second", a.pop(t, "queue=w&wait=true&timeout=100"), 429, "parked_slots_exhausted")
	want(t, "globex's second", g.pop(t, "queue=w&wait=true&timeout=100"), 429, "parked_slots_exhausted")
	a.mustPush(t, "w", 1)
	g.mustPush(t, "w", 1)
	await(t, "acme's pop", popA)
	await(t, "globex's pop", popG)
	p.admin.waitParked(t, "acme", 0)
	p.admin.waitParked(t, "globex", 0)
}
