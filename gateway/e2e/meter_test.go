package e2e

import (
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestMeteringExact: pushes meter their items as messages when accepted,
// pops the messages they carry as deliveries; an empty pop, a refused push
// and a refused pop meter nothing.
func TestMeteringExact(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c := p.gw.as(t, "acme", "read-write")

	c.mustPush(t, "m", 3)
	c.mustPush(t, "m", 2)
	p.admin.wantUsage(t, "acme", 5, 0)

	r := c.pop(t, "queue=m&batch=10")
	want(t, "pop", r, 200, "")
	if got := r.Header.Get("X-Queen-Delivered"); got != "5" {
		t.Fatalf("X-Queen-Delivered %q, want 5", got)
	}
	p.admin.wantUsage(t, "acme", 5, 5)

	// Empty: nothing left unleased, a waiting pop that times out, a new queue.
	if m := c.mustPop(t, "queue=m&batch=10"); len(m.Messages) != 0 {
		t.Fatalf("a second pop got %d messages", len(m.Messages))
	}
	if m := c.mustPop(t, "queue=m&batch=10&wait=true&timeout=50"); len(m.Messages) != 0 {
		t.Fatalf("a waiting pop got %d messages", len(m.Messages))
	}
	if m := c.mustPop(t, "queue=empty&batch=10"); len(m.Messages) != 0 {
		t.Fatalf("a pop of an empty queue got %d messages", len(m.Messages))
	}
	p.admin.wantUsage(t, "acme", 5, 5)

	// Refused by the broker: a bad body, an item with another key, a bad
	// pop.
	for _, body := range []string{
		`{"queue":"m","messages":[{"payload":1},{"payload":2,"extra":3}]}`,
		`{"queue":"m","messages":[{"payload":1}],"unknown":true}`,
		`{"queue":"m","messages":[{"payload":1}`,
		`not json`,
		`{"queue":"","messages":[{"payload":1}]}`,
	} {
		want(t, "bad push "+body, c.do(t, "POST", "/api/v1/ephemeral/push", body), 400, "")
	}
	want(t, "pop with batch 0", c.pop(t, "queue=m&batch=0"), 400, "")
	p.admin.wantUsage(t, "acme", 5, 5)

	// Acks and the status reads are not metered.
	c.mustPush(t, "m2", 1)
	m := c.mustPop(t, "queue=m2")
	want(t, "ack", c.do(t, "POST", "/api/v1/ephemeral/ack", `{"queue":"m2","acks":[{"id":"`+m.Messages[0].ID+`"}]}`), 200, "")
	want(t, "depth", c.do(t, "GET", "/api/v1/ephemeral/queues/m2/depth", ""), 200, "")
	p.admin.wantUsage(t, "acme", 6, 6)
	// Another tenant's usage is its own.
	p.admin.wantUsage(t, "other", 0, 0)
}

// avoidPeriodEnd waits out the last seconds of an epoch-aligned period of
// seconds, so that a test of the allowance does not straddle two periods.
func avoidPeriodEnd(seconds int64) {
	now := time.Now()
	end := time.Unix((now.Unix()/seconds+1)*seconds, 0)
	if end.Sub(now) < 20*time.Second {
		time.Sleep(time.Until(end) + 100*time.Millisecond)
	}
}

// TestAllowance: messagesPerPeriod 10: a push that would pass the
// allowance is refused whole with Retry-After to the period's end, a
// smaller one that fits is served, and then the spent allowance refuses
// pops too.
func TestAllowance(t *testing.T) {
	t.Parallel()
	avoidPeriodEnd(3600)
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "metered", planJSON(true, 10, 3600, 0, 0))
	c := p.gw.as(t, "acme", "read-write")

	c.mustPush(t, "a", 8)
	r := c.push(t, "a", 3)
	want(t, "push 3 after 8 of 10", r, 429, "message_allowance_exceeded")
	untilEnd := int(3600 - time.Now().Unix()%3600)
	wantRetryAfter(t, "push 3 after 8 of 10", r, max(1, untilEnd-5), untilEnd+1)
	p.admin.wantUsage(t, "acme", 8, 0)
	c.mustPush(t, "a", 2)
	p.admin.wantUsage(t, "acme", 10, 0)

	r = c.pop(t, "queue=a&batch=10")
	want(t, "pop with the allowance spent", r, 429, "message_allowance_exceeded")
	wantRetryAfter(t, "pop with the allowance spent", r, 1, 3600)
	r = c.push(t, "a", 1)
	want(t, "push 1 with the allowance spent", r, 429, "message_allowance_exceeded")
	wantRetryAfter(t, "push 1 with the allowance spent", r, 1, 3600)
	r = c.push(t, "a", 0)
	want(t, "push 0 with the allowance spent", r, 201, "")
	p.admin.wantUsage(t, "acme", 10, 0)
	// Nothing was taken: the 10 are all there.
	if m := asGatewayOf(p.broker, "acme", "read-write").mustPop(t, "queue=a&batch=100&autoAck=true"); len(m.Messages) != 10 {
		t.Fatalf("the queue holds %d messages, want 10", len(m.Messages))
	}
}

// TestAllowancePops: a pop is admitted while the allowance is not spent
// and counts what it delivered, so pops pass the allowance by at most one
// batch.
func TestAllowancePops(t *testing.T) {
	t.Parallel()
	avoidPeriodEnd(3600)
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "metered", planJSON(true, 10, 3600, 0, 0))
	c := p.gw.as(t, "acme", "read-write")
	c.mustPush(t, "a", 6)
	if m := c.mustPop(t, "queue=a&batch=10&autoAck=true"); len(m.Messages) != 6 {
		t.Fatalf("popped %d, want 6", len(m.Messages))
	}
	p.admin.wantUsage(t, "acme", 6, 6)
	want(t, "pop over the allowance", c.pop(t, "queue=a"), 429, "message_allowance_exceeded")
	want(t, "push over the allowance", c.push(t, "a", 1), 429, "message_allowance_exceeded")
}

// TestRateLimited: messagesPerSecond 1: the bucket starts full, admits a
// batch of 20 into debt, then refuses pushes and pops with 429
// rate_limited and a Retry-After covering the debt.
func TestRateLimited(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "slow", planJSON(true, 0, 0, 1, 0))
	c := p.gw.as(t, "acme", "read-write")
	c.mustPush(t, "r", 20)
	r := c.push(t, "r", 1)
	want(t, "push in debt", r, 429, "rate_limited")
	wantRetryAfter(t, "push in debt", r, 5, 20)
	r = c.pop(t, "queue=r")
	want(t, "pop in debt", r, 429, "rate_limited")
	wantRetryAfter(t, "pop in debt", r, 5, 20)
	p.admin.wantUsage(t, "acme", 20, 0)
	// Another tenant on the same plan has a bucket of its own.
	other := p.gw.as(t, "other", "read-write")
	p.admin.putTenant(t, "other", "slow")
	other.mustPush(t, "r", 1)
}

// TestUsageSurvivesRestart: usage written to the embedded catalog under
// QUEEN_DATA_DIR survives a gateway stopped with SIGTERM, and a crash
// loses nothing already written.
func TestUsageSurvivesRestart(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	g := startGateway(t, []string{b.URL()}, map[string]string{"QUEEN_DATA_DIR": t.TempDir()})
	g.KeepPort = true
	admin := g.as(t, "ops", "admin")
	admin.onPlan(t, "acme", "pro", planJSON(true, 1000, 86400, 0, 0))
	c := g.as(t, "acme", "read-write")
	writes := func() float64 {
		r := admin.do(t, "GET", "/metrics", "")
		want(t, "gateway /metrics", r, 200, "")
		return brokertest.Metric(string(r.Body), "queen_gateway_usage_writes", "")
	}
	before := writes()
	c.mustPush(t, "u", 4)
	if m := c.mustPop(t, "queue=u&batch=3&autoAck=true"); len(m.Messages) != 3 {
		t.Fatalf("popped %d, want 3", len(m.Messages))
	}
	admin.wantUsage(t, "acme", 4, 3)
	brokertest.Eventually(t, 10*time.Second, "the usage was never written", func() bool { return writes() > before })

	g.Stop(t)
	g.Start(t)
	admin.wantUsage(t, "acme", 4, 3)
	// It counts on from there.
	c.mustPush(t, "u", 1)
	admin.wantUsage(t, "acme", 5, 3)
	before = writes()
	brokertest.Eventually(t, 10*time.Second, "the usage was never written after the restart", func() bool { return writes() > before })

	// A crash after the write loses nothing written.
	g.Kill()
	g.Start(t)
	admin.wantUsage(t, "acme", 5, 3)
}

// untilNextPeriod sleeps until just after the start of the next
// epoch-aligned period of seconds.
func untilNextPeriod(seconds int64) {
	next := time.Unix((time.Now().Unix()/seconds+1)*seconds, 0)
	time.Sleep(time.Until(next) + 20*time.Millisecond)
}

// TestShortPeriod: a period shorter than the minute the usage rows are
// written in: the allowance starts again in each period, at this gateway
// and after its usage has been written and read back.
func TestShortPeriod(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "short", planJSON(true, 5, 4, 0, 0))
	c := p.gw.as(t, "acme", "read-write")
	untilNextPeriod(4)
	c.mustPush(t, "s", 5)
	r := c.push(t, "s", 1)
	want(t, "push past the allowance", r, 429, "message_allowance_exceeded")
	wantRetryAfter(t, "push past the allowance", r, 1, 4)
	// Written, and read back, before the period ends.
	writes := func() float64 {
		r := p.admin.do(t, "GET", "/metrics", "")
		return brokertest.Metric(string(r.Body), "queen_gateway_usage_writes", "")
	}
	brokertest.Eventually(t, 2*time.Second, "the usage was not written", func() bool { return writes() > 0 })
	untilNextPeriod(4)
	// Two pushes in the new period, each waited for until written: the
	// gateway has read the period's usage back after the first write.
	for range 2 {
		before := writes()
		c.mustPush(t, "s", 1)
		brokertest.Eventually(t, 2*time.Second, "the push was not written", func() bool { return writes() > before })
	}
	p.admin.wantUsage(t, "acme", 2, 0)
	c.mustPush(t, "s", 3)
	want(t, "push past the allowance of the new period", c.push(t, "s", 1), 429, "message_allowance_exceeded")
}
