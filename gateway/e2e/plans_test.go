package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/gateway/routes"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestPlanChangesLive: plan and tenant writes through a gateway apply to
// its next request, without a restart: the feature switched off and on, the
// allowance raised, a tenant moved to another plan.
func TestPlanChangesLive(t *testing.T) {
	t.Parallel()
	avoidPeriodEnd(3600)
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 3, 3600, 0, 0))
	c := p.gw.as(t, "acme", "read-write")
	c.mustPush(t, "q", 1)

	p.admin.putPlan(t, "pro", planJSON(false, 3, 3600, 0, 0))
	want(t, "push with ephemeral off", c.push(t, "q", 1), 403, "feature_gated")
	want(t, "pop with ephemeral off", c.pop(t, "queue=q"), 403, "feature_gated")
	p.admin.putPlan(t, "pro", planJSON(true, 3, 3600, 0, 0))
	c.mustPush(t, "q", 2)
	want(t, "push past the allowance of 3", c.push(t, "q", 1), 429, "message_allowance_exceeded")

	p.admin.putPlan(t, "pro", planJSON(true, 5, 3600, 0, 0))
	c.mustPush(t, "q", 2)
	want(t, "push past the allowance of 5", c.push(t, "q", 1), 429, "message_allowance_exceeded")
	p.admin.wantUsage(t, "acme", 5, 0)

	// Another plan for the tenant: unlimited.
	p.admin.onPlan(t, "acme", "unlimited", planJSON(true, 0, 0, 0, 0))
	c.mustPush(t, "q", 10)
	// Back on a plan without the feature.
	p.admin.onPlan(t, "acme", "free", planJSON(false, 0, 0, 0, 0))
	want(t, "push on the free plan", c.push(t, "q", 1), 403, "feature_gated")
	// Its plan deleted: no plan, gated.
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c.mustPush(t, "q", 1)
	want(t, "DELETE plan pro", p.admin.do(t, "DELETE", "/api/v1/gateway/plans/pro", ""), 200, "")
	want(t, "push after its plan was deleted", c.push(t, "q", 1), 403, "feature_gated")
	// And put again: the tenant is on it again.
	p.admin.putPlan(t, "pro", planJSON(true, 0, 0, 0, 0))
	c.mustPush(t, "q", 1)
}

// TestPlanChangeSharedCatalog: two gateways on one PostgreSQL catalog: a
// plan change made through the first applies at the second within its poll
// interval, and each sees the usage the other wrote.
func TestPlanChangeSharedCatalog(t *testing.T) {
	t.Parallel()
	dbURL, _ := schemaURL(t)
	b := startBroker(t, nil)
	env := map[string]string{"QUEEN_DATABASE_URL": dbURL, "QUEEN_GATEWAY_POLL_MS": "50", "QUEEN_GATEWAY_USAGE_FLUSH_MS": "50"}
	g1 := startGateway(t, []string{b.URL()}, env)
	g2 := startGateway(t, []string{b.URL()}, env)
	a1, a2 := g1.as(t, "ops", "admin"), g2.as(t, "ops", "admin")
	c1, c2 := g1.as(t, "acme", "read-write"), g2.as(t, "acme", "read-write")

	want(t, "at the second, before any plan", c2.push(t, "q", 1), 403, "feature_gated")
	pushed := int64(0) // the messages the broker took, counted from the answers
	push := func(c *client) reply {
		r := c.push(t, "q", 1)
		if r.Status == 201 {
			pushed++
		}
		return r
	}
	a1.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	want(t, "at the first, where the plan was written", push(c1), 201, "")
	// Within the poll interval at the other (bounded well above it: a
	// loaded machine).
	brokertest.Eventually(t, 5*time.Second, "the second gateway never served the tenant", func() bool {
		r := push(c2)
		if r.Status != 201 {
			want(t, "at the second before the poll", r, 403, "feature_gated")
		}
		return r.Status == 201
	})
	a1.putPlan(t, "pro", planJSON(false, 0, 0, 0, 0))
	want(t, "at the first after the change", push(c1), 403, "feature_gated")
	brokertest.Eventually(t, 5*time.Second, "the second gateway still serves the tenant after its plan lost the feature", func() bool {
		r := push(c2)
		if r.Status == 201 {
			return false
		}
		want(t, "at the second after the change", r, 403, "feature_gated")
		return true
	})
	// A plan written through the second gateway reaches the first.
	a2.putPlan(t, "pro", planJSON(true, 0, 0, 0, 0))
	want(t, "at the second, where the plan was written", push(c2), 201, "")
	brokertest.Eventually(t, 5*time.Second, "the first gateway never saw the plan written through the second", func() bool {
		return push(c1).Status == 201
	})

	// Usage: each gateway reads back what the other wrote, within a write
	// interval; both count exactly what the broker took.
	m := asGatewayOf(b, "acme", "read-write").mustPop(t, "queue=q&batch=1000&autoAck=true")
	if int64(len(m.Messages)) != pushed {
		t.Fatalf("the broker held %d messages, %d pushes were answered 201", len(m.Messages), pushed)
	}
	var u1, u2 usage
	brokertest.Eventually(t, 10*time.Second, "the gateways never both counted every push", func() bool {
		u1, u2 = a1.usage(t, "acme"), a2.usage(t, "acme")
		return u1.Messages == pushed && u2.Messages == pushed
	})
	// And they stay there.
	for range 5 {
		u1, u2 = a1.usage(t, "acme"), a2.usage(t, "acme")
		if u1.Messages != pushed || u2.Messages != pushed || u1.Deliveries != 0 || u2.Deliveries != 0 {
			t.Fatalf("the gateways count %+v and %+v, want %d messages", u1, u2, pushed)
		}
		time.Sleep(60 * time.Millisecond) // a write interval and a bit
	}
}

// TestAdminRoutes: the plans, tenants, usage and routes routes, their
// answers, and the refusals of bad bodies, unknown names and methods.
func TestAdminRoutes(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	a := p.admin
	exact := func(what string, r reply, status int, body string) {
		t.Helper()
		if r.Status != status || !jsonEqual(t, r.Body, []byte(body)) {
			t.Fatalf("%s: got %s, want %d %s", what, r, status, body)
		}
	}
	gold := `{"name":"gold","features":{"ephemeral":true},"messagesPerPeriod":1000,"periodSeconds":86400,"messagesPerSecond":50,"parkedSlots":10}`
	exact("PUT plan", a.do(t, "PUT", "/api/v1/gateway/plans/gold", planJSON(true, 1000, 86400, 50, 10)), 200, gold)
	exact("GET plan", a.do(t, "GET", "/api/v1/gateway/plans/gold", ""), 200, gold)
	exact("PUT an empty plan", a.do(t, "PUT", "/api/v1/gateway/plans/bare", `{}`), 200,
		`{"name":"bare","features":{"ephemeral":false},"messagesPerPeriod":0,"periodSeconds":0,"messagesPerSecond":0,"parkedSlots":0}`)
	exact("PUT plan (replaced)", a.do(t, "PUT", "/api/v1/gateway/plans/bare", `{"features":{"ephemeral":true},"parkedSlots":2}`), 200,
		`{"name":"bare","features":{"ephemeral":true},"messagesPerPeriod":0,"periodSeconds":0,"messagesPerSecond":0,"parkedSlots":2}`)
	exact("PUT a percent-escaped name", a.do(t, "PUT", "/api/v1/gateway/plans/gold%20plus", `{}`), 200,
		`{"name":"gold plus","features":{"ephemeral":false},"messagesPerPeriod":0,"periodSeconds":0,"messagesPerSecond":0,"parkedSlots":0}`)
	want(t, "GET a missing plan", a.do(t, "GET", "/api/v1/gateway/plans/nope", ""), 404, "plan_not_found")

	exact("PUT tenant", a.do(t, "PUT", "/api/v1/gateway/tenants/acme", `{"plan":"gold"}`), 200, `{"tenant":"acme","plan":"gold"}`)
	exact("GET tenant", a.do(t, "GET", "/api/v1/gateway/tenants/acme", ""), 200, `{"tenant":"acme","plan":"gold"}`)
	want(t, "GET a missing tenant", a.do(t, "GET", "/api/v1/gateway/tenants/nobody", ""), 404, "tenant_not_found")
	want(t, "PUT tenant on a missing plan", a.do(t, "PUT", "/api/v1/gateway/tenants/acme", `{"plan":"nope"}`), 404, "plan_not_found")
	exact("GET tenant after a refused PUT", a.do(t, "GET", "/api/v1/gateway/tenants/acme", ""), 200, `{"tenant":"acme","plan":"gold"}`)
	want(t, "PUT tenant on a missing plan (new tenant)", a.do(t, "PUT", "/api/v1/gateway/tenants/newco", `{"plan":"nope"}`), 404, "plan_not_found")
	want(t, "GET the tenant that was refused", a.do(t, "GET", "/api/v1/gateway/tenants/newco", ""), 404, "tenant_not_found")

	for _, bad := range []struct{ path, body, msg string }{
		{"plans/x", `{"messagesPerSec":1}`, `unknown field "messagesPerSec"`},
		{"plans/x", `[]`, "the body must be a JSON object"},
		{"plans/x", ``, "the body must be a JSON object"},
		{"plans/x", `{"parkedSlots":-1}`, "parkedSlots must not be negative, got -1"},
		{"plans/x", `{"messagesPerSecond":1.5}`, "messagesPerSecond must be a whole number, got 1.5"},
		{"plans/x", `{"messagesPerSecond":"5"}`, "messagesPerSecond"},
		{"plans/x", `{"messagesPerPeriod":10}`, "periodSeconds must be positive when messagesPerPeriod is set"},
		{"plans/x", `{"parkedSlots":1,"parkedSlots":2}`, "parkedSlots"},
		{"plans/x", `{"features":{"ephemeral":"yes"}}`, "ephemeral"},
		{"tenants/x", `{}`, "plan"},
		{"tenants/x", `{"plan":"gold","extra":1}`, `unknown field "extra"`},
		{"tenants/x", `not json`, "JSON"},
		{"plans/a%01b", `{}`, "plan"},
		{"tenants/a%01b", `{"plan":"gold"}`, "tenant"},
		{"plans/" + strings.Repeat("x", 513), `{}`, "plan"},
	} {
		r := a.do(t, "PUT", "/api/v1/gateway/"+bad.path, bad.body)
		want(t, "PUT "+bad.path+" "+bad.body, r, 400, "bad_request")
		if !strings.Contains(r.message(), bad.msg) {
			t.Fatalf("PUT %s %s: %s, want a message with %q", bad.path, bad.body, r, bad.msg)
		}
	}
	want(t, "GET a plan not written", a.do(t, "GET", "/api/v1/gateway/plans/x", ""), 404, "plan_not_found")
	want(t, "usage of a bad name", a.do(t, "GET", "/api/v1/gateway/usage/a%01b", ""), 400, "bad_request")

	for _, r := range [][2]string{
		{"POST", "/api/v1/gateway/plans/gold"},
		{"PATCH", "/api/v1/gateway/plans/gold"},
		{"DELETE", "/api/v1/gateway/tenants/acme"},
		{"POST", "/api/v1/gateway/tenants/acme"},
		{"PUT", "/api/v1/gateway/usage/acme"},
		{"POST", "/api/v1/gateway/routes"},
	} {
		want(t, r[0]+" "+r[1], a.do(t, r[0], r[1], `{}`), 405, "method_not_allowed")
	}
	for _, path := range []string{"/api/v1/gateway/plans", "/api/v1/gateway/plans/", "/api/v1/gateway/nothing/x", "/api/v1/gateway/plans/a/b", "/api/v1/gateway/"} {
		want(t, "GET "+path, a.do(t, "GET", path, ""), 404, "not_found")
	}

	exact("usage of a tenant never seen", a.do(t, "GET", "/api/v1/gateway/usage/acme", ""), 200, `{"tenant":"acme","messages":0,"deliveries":0,"parked":0}`)
	p.gw.as(t, "acme", "read-write").mustPush(t, "q", 2)
	exact("usage", a.do(t, "GET", "/api/v1/gateway/usage/acme", ""), 200, `{"tenant":"acme","messages":2,"deliveries":0,"parked":0}`)

	r := a.do(t, "GET", "/api/v1/gateway/routes", "")
	want(t, "GET routes", r, 200, "")
	if !jsonEqual(t, r.Body, routes.Default().JSON()) {
		t.Fatalf("GET routes: %s\nwant the built-in table %s", r.Body, routes.Default().JSON())
	}
	for _, s := range []string{`"/api/v1/ephemeral/push"`, `"messages"`, `"/api/v1/ephemeral/pop"`, `"deliveries"`, `"/api/v1/ephemeral/queue/:queue"`} {
		if !strings.Contains(string(r.Body), s) {
			t.Fatalf("GET routes lacks %s: %s", s, r.Body)
		}
	}

	exact("DELETE plan", a.do(t, "DELETE", "/api/v1/gateway/plans/gold", ""), 200, `{"plan":"gold","deleted":true}`)
	want(t, "GET the deleted plan", a.do(t, "GET", "/api/v1/gateway/plans/gold", ""), 404, "plan_not_found")
	exact("DELETE it again", a.do(t, "DELETE", "/api/v1/gateway/plans/gold", ""), 200, `{"plan":"gold","deleted":false}`)
	exact("its tenant stays", a.do(t, "GET", "/api/v1/gateway/tenants/acme", ""), 200, `{"tenant":"acme","plan":"gold"}`)
	want(t, "its tenant is gated", p.gw.as(t, "acme", "read-write").push(t, "q", 1), 403, "feature_gated")
}
