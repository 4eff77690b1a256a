package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestFeatureGates: the plan's gate at the gateway (a plan without
// ephemeral, a tenant without a plan, a tenant whose plan was deleted:
// 403 feature_gated, and the broker never sees the request), then the
// broker's own gate (no grant row: its 403 feature_gated comes back as it
// was), then both open after the operator grants the tenant: 201.
func TestFeatureGates(t *testing.T) {
	t.Parallel()
	p := startPair(t, map[string]string{"QUEEN_EPHEMERAL_REQUIRE_GRANT": "true"}, nil)
	p.admin.onPlan(t, "free-co", "free", planJSON(false, 0, 0, 0, 0))
	p.admin.onPlan(t, "pro-co", "pro", planJSON(true, 0, 0, 0, 0))
	p.admin.onPlan(t, "gone-co", "gone", planJSON(true, 0, 0, 0, 0))
	want(t, "DELETE plan gone", p.admin.do(t, "DELETE", "/api/v1/gateway/plans/gone", ""), 200, "")

	pushesBefore := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="push"`)
	popsBefore := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="pop"`)
	for _, tenant := range []string{"free-co", "nobody-co", "gone-co"} {
		c := p.gw.as(t, tenant, "read-write")
		want(t, tenant+": push", c.push(t, "gated", 1), 403, "feature_gated")
		want(t, tenant+": pop", c.pop(t, "queue=gated"), 403, "feature_gated")
		want(t, tenant+": queues", c.do(t, "GET", "/api/v1/ephemeral/queues", ""), 403, "feature_gated")
	}
	if n := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="push"`); n != pushesBefore {
		t.Fatalf("the broker served %v pushes of gated tenants", n-pushesBefore)
	}
	if n := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="pop"`); n != popsBefore {
		t.Fatalf("the broker served %v pops of gated tenants", n-popsBefore)
	}
	// Behind the gateway's back: granted, the tenant has no queue "gated".
	for _, tenant := range []string{"free-co", "nobody-co", "gone-co"} {
		want(t, "grant "+tenant, operatorOf(p.broker).do(t, "PUT", "/api/v1/system/ephemeral/grants/"+tenant, `{}`), 200, "")
		if qs := asGatewayOf(p.broker, tenant, "read-write").queueNames(t); len(qs) != 0 {
			t.Fatalf("%s has queues %v at the broker after gated pushes", tenant, qs)
		}
	}
	p.admin.wantUsage(t, "free-co", 0, 0)

	// The plan is on, the broker has no grant row for the tenant: the
	// broker's refusal, byte for byte as the broker answers it.
	pro := p.gw.as(t, "pro-co", "read-write")
	got := pro.push(t, "q", 3)
	want(t, "pro-co without a grant: push", got, 403, "feature_gated")
	direct := asGatewayOf(p.broker, "pro-co", "read-write").push(t, "q", 3)
	if got.Status != direct.Status || string(got.Body) != string(direct.Body) {
		t.Fatalf("the broker's refusal did not come back unchanged:\nthrough the gateway %s\ndirect %s", got, direct)
	}
	if n := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="push"`); n != pushesBefore+2 {
		t.Fatalf("the broker served %v pushes, want 2 (one through the gateway, one direct)", n-pushesBefore)
	}
	p.admin.wantUsage(t, "pro-co", 0, 0)

	want(t, "grant pro-co", operatorOf(p.broker).do(t, "PUT", "/api/v1/system/ephemeral/grants/pro-co", `{}`), 200, "")
	want(t, "pro-co granted: push", pro.push(t, "q", 3), 201, "")
	if m := pro.mustPop(t, "queue=q&batch=10&autoAck=true"); len(m.Messages) != 3 {
		t.Fatalf("pro-co popped %d messages, want 3", len(m.Messages))
	}
	p.admin.wantUsage(t, "pro-co", 3, 3)
}

// TestRouteBlocked: what the classification does not have is 404
// route_blocked, the broker's system routes included; a gateway given an
// older table (without pop) blocks pop and still serves push.
func TestRouteBlocked(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	for _, c := range []*client{p.gw.as(t, "acme", "read-write"), p.admin} {
		for _, r := range [][2]string{
			{"GET", "/api/v1/ephemeral/nope"},
			{"GET", "/api/v1/ephemeral"},
			{"GET", "/api/v1/ephemeral/push"},            // a known path, the wrong method
			{"POST", "/api/v1/ephemeral/pop"},            // likewise
			{"PUT", "/api/v1/ephemeral/queue/q"},         // likewise
			{"POST", "/api/v1/ephemeral/queues/q/depth"}, // likewise
			{"GET", "/api/v1/system/ephemeral"},
			{"POST", "/api/v1/system/ephemeral"},
			{"PUT", "/api/v1/system/ephemeral/grants/acme"},
			{"GET", "/api/v1/system/ephemeral/grants/acme"},
			{"GET", "/api/v1/system/cell"},
			{"GET", "/api/v1/system/gateway-link"}, // a broker's, for gateways: a client never reaches it
			{"GET", "/"},
			{"GET", "/api/v2/ephemeral/push"},
		} {
			body := ""
			if r[0] != "GET" {
				body = `{}`
			}
			want(t, r[0]+" "+r[1], c.do(t, r[0], r[1], body), 404, "route_blocked")
		}
	}

	// An older table: the current one without pop.
	var table struct {
		Family string           `json:"family"`
		Routes []map[string]any `json:"routes"`
	}
	r := p.admin.do(t, "GET", "/api/v1/gateway/routes", "")
	want(t, "GET routes", r, 200, "")
	if err := json.Unmarshal(r.Body, &table); err != nil {
		t.Fatalf("routes: %v: %s", err, r.Body)
	}
	n := len(table.Routes)
	table.Routes = slices.DeleteFunc(table.Routes, func(r map[string]any) bool { return r["path"] == "/api/v1/ephemeral/pop" })
	if len(table.Routes) != n-1 {
		t.Fatalf("the table has no pop route to leave out: %s", r.Body)
	}
	old, _ := json.Marshal(table)
	file := filepath.Join(t.TempDir(), "routes-old.json")
	if err := os.WriteFile(file, old, 0o600); err != nil {
		t.Fatal(err)
	}
	g2 := startGateway(t, []string{p.broker.URL()}, map[string]string{"QUEEN_GATEWAY_ROUTES_FILE": file})
	a2 := g2.as(t, "ops", "admin")
	a2.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c2 := g2.as(t, "acme", "read-write")
	want(t, "push through the older table", c2.push(t, "old", 2), 201, "")
	want(t, "pop through the older table", c2.pop(t, "queue=old&batch=10"), 404, "route_blocked")
	want(t, "waiting pop through the older table", c2.pop(t, "queue=old&wait=true&timeout=100"), 404, "route_blocked")
	a2.wantUsage(t, "acme", 2, 0)
	if got := a2.do(t, "GET", "/api/v1/gateway/routes", ""); got.Status != 200 || jsonEqual(t, got.Body, old) == false {
		t.Fatalf("GET routes of the gateway with the older table: %s, want %s", got, old)
	}
	// The messages are there: the current gateway pops them.
	if m := p.gw.as(t, "acme", "read-write").mustPop(t, "queue=old&batch=10&autoAck=true"); len(m.Messages) != 2 {
		t.Fatalf("popped %d, want the 2 pushed through the older table", len(m.Messages))
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// TestIdentity: no token 401, a bad or unsigned token 401, a level too low
// 403 forbidden at the gateway, the admin routes and /metrics for the
// admin role only.
func TestIdentity(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	p.admin.mustPushAs(t, p.gw, "acme", "q", 1)

	anon := p.gw.anonymous()
	want(t, "no token: push", anon.push(t, "q", 1), 401, "unauthorized")
	want(t, "no token: queues", anon.do(t, "GET", "/api/v1/ephemeral/queues", ""), 401, "unauthorized")
	want(t, "no token: admin route", anon.do(t, "GET", "/api/v1/gateway/plans/pro", ""), 401, "unauthorized")
	want(t, "no token: /metrics", anon.do(t, "GET", "/metrics", ""), 401, "unauthorized")
	want(t, "no token: /health", anon.do(t, "GET", "/health", ""), 200, "")

	forged := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) *client {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return &client{base: p.gw.URL(), bearer: s, hc: newHTTPClient()}
	}
	exp := time.Now().Add(time.Hour).Unix()
	for name, c := range map[string]*client{
		"alg none":         forged(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"tenant": "acme", "role": "admin", "exp": exp}),
		"another key":      forged(jwt.SigningMethodHS256, []byte("not-the-secret"), jwt.MapClaims{"tenant": "acme", "role": "admin", "exp": exp}),
		"expired":          forged(jwt.SigningMethodHS256, []byte(jwtSecret), jwt.MapClaims{"tenant": "acme", "role": "admin", "exp": time.Now().Add(-time.Hour).Unix()}),
		"no exp":           forged(jwt.SigningMethodHS256, []byte(jwtSecret), jwt.MapClaims{"tenant": "acme", "role": "admin"}),
		"a tenant number":  forged(jwt.SigningMethodHS256, []byte(jwtSecret), jwt.MapClaims{"tenant": 7, "role": "admin", "exp": exp}),
		"not a token":      {base: p.gw.URL(), bearer: "garbage", hc: newHTTPClient()},
		"the right secret": {base: p.gw.URL(), bearer: jwtSecret, hc: newHTTPClient()},
	} {
		want(t, name+": push", c.push(t, "q", 1), 401, "unauthorized")
		want(t, name+": admin route", c.do(t, "GET", "/api/v1/gateway/plans/pro", ""), 401, "unauthorized")
	}
	noRole := forged(jwt.SigningMethodHS256, []byte(jwtSecret), jwt.MapClaims{"tenant": "acme", "exp": exp})
	want(t, "no role: push", noRole.push(t, "q", 1), 403, "forbidden")
	badRole := forged(jwt.SigningMethodHS256, []byte(jwtSecret), jwt.MapClaims{"tenant": "acme", "role": "owner", "exp": exp})
	want(t, "unknown role: push", badRole.push(t, "q", 1), 403, "forbidden")

	ro := p.gw.as(t, "acme", "read-only")
	want(t, "read-only: push", ro.push(t, "q", 1), 403, "forbidden")
	want(t, "read-only: pop", ro.pop(t, "queue=q"), 403, "forbidden")
	want(t, "read-only: queues", ro.do(t, "GET", "/api/v1/ephemeral/queues", ""), 200, "")
	want(t, "read-only: depth", ro.do(t, "GET", "/api/v1/ephemeral/queues/q/depth", ""), 200, "")
	wo := p.gw.as(t, "acme", "write-only")
	want(t, "write-only: pop", wo.pop(t, "queue=q"), 403, "forbidden")
	want(t, "write-only: queues", wo.do(t, "GET", "/api/v1/ephemeral/queues", ""), 403, "forbidden")
	want(t, "write-only: push", wo.push(t, "q", 1), 201, "")
	p.admin.wantUsage(t, "acme", 2, 0)

	for _, role := range []string{"read-only", "write-only", "read-write"} {
		c := p.gw.as(t, "acme", role)
		want(t, role+": GET plan", c.do(t, "GET", "/api/v1/gateway/plans/pro", ""), 403, "forbidden")
		want(t, role+": PUT plan", c.do(t, "PUT", "/api/v1/gateway/plans/pro", planJSON(true, 0, 0, 0, 0)), 403, "forbidden")
		want(t, role+": PUT tenant", c.do(t, "PUT", "/api/v1/gateway/tenants/acme", `{"plan":"pro"}`), 403, "forbidden")
		want(t, role+": usage", c.do(t, "GET", "/api/v1/gateway/usage/acme", ""), 403, "forbidden")
		want(t, role+": routes", c.do(t, "GET", "/api/v1/gateway/routes", ""), 403, "forbidden")
		want(t, role+": /metrics", c.do(t, "GET", "/metrics", ""), 403, "forbidden")
	}
	r := p.admin.do(t, "GET", "/metrics", "")
	want(t, "admin: /metrics", r, 200, "")
	for _, name := range []string{"queen_gateway_forwarded_total", "queen_gateway_refusals_total", "queen_gateway_clients",
		"queen_gateway_parked", "queen_gateway_upstream_dials_total", "queen_gateway_usage_writes"} {
		if !regexp.MustCompile(`(?m)^` + name + `[{ ]`).Match(r.Body) {
			t.Fatalf("/metrics lacks %s:\n%s", name, r.Body)
		}
	}
	if n := brokertest.Metric(string(r.Body), "queen_gateway_refusals_total", `code="unauthorized"`); n < 14 {
		t.Fatalf("queen_gateway_refusals_total{code=\"unauthorized\"} is %v, want at least 14", n)
	}
	want(t, "admin: GET plan", p.admin.do(t, "GET", "/api/v1/gateway/plans/pro", ""), 200, "")
}

// mustPushAs pushes n items to queue as tenant (read-write) through g.
func (c *client) mustPushAs(t *testing.T, g *gateway, tenant, queue string, n int) {
	t.Helper()
	g.as(t, tenant, "read-write").mustPush(t, queue, n)
}

// TestForgedTenancyHeaders: the tenancy headers a client sends never reach
// the broker: tenant A's push with X-Queen-Tenant B, X-Queen-Access admin
// and the right X-Queen-Gateway-Secret lands in A.
func TestForgedTenancyHeaders(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "tenant-a", "pro", planJSON(true, 0, 0, 0, 0))
	p.admin.putTenant(t, "tenant-b", "pro")

	a := p.gw.as(t, "tenant-a", "write-only")
	a.header = map[string][]string{
		"X-Queen-Tenant":         {"tenant-b"},
		"X-Queen-Access":         {"admin"},
		"X-Queen-Gateway-Secret": {gwSecret},
	}
	want(t, "A's push with B's headers", a.push(t, "forged", 2), 201, "")
	// The level is the token's: write-only may not pop, whatever it sends.
	want(t, "A's pop with X-Queen-Access admin", a.pop(t, "queue=forged"), 403, "forbidden")
	want(t, "A's admin route with X-Queen-Access admin", a.do(t, "GET", "/api/v1/gateway/usage/tenant-b", ""), 403, "forbidden")

	if qs := p.gw.as(t, "tenant-b", "read-only").queueNames(t); len(qs) != 0 {
		t.Fatalf("tenant-b lists %v", qs)
	}
	if qs := p.gw.as(t, "tenant-a", "read-only").queueNames(t); !slices.Equal(qs, []string{"forged"}) {
		t.Fatalf("tenant-a lists %v, want [forged]", qs)
	}
	// Behind the gateway too.
	if qs := asGatewayOf(p.broker, "tenant-b", "read-only").queueNames(t); len(qs) != 0 {
		t.Fatalf("at the broker, tenant-b has %v", qs)
	}
	if qs := asGatewayOf(p.broker, "tenant-a", "read-only").queueNames(t); !slices.Equal(qs, []string{"forged"}) {
		t.Fatalf("at the broker, tenant-a has %v", qs)
	}
	p.admin.wantUsage(t, "tenant-a", 2, 0)
	p.admin.wantUsage(t, "tenant-b", 0, 0)
}

// TestOperatorTenant: with QUEEN_OPERATOR_TENANT set, that tenant's
// admins are the gateway's operator; another tenant's admin role serves
// its own queues and reads its own tenant and usage, but cannot change its
// plan or read another tenant's.
func TestOperatorTenant(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, map[string]string{"QUEEN_OPERATOR_TENANT": "ops"})
	p.admin.onPlan(t, "acme", "small", planJSON(true, 0, 0, 0, 0))
	p.admin.putTenant(t, "rival", "small")
	acmeAdmin := p.gw.as(t, "acme", "admin")
	want(t, "acme admin: PUT plan", acmeAdmin.do(t, "PUT", "/api/v1/gateway/plans/small", planJSON(true, 0, 0, 0, 0)), 403, "forbidden")
	want(t, "acme admin: PUT tenant", acmeAdmin.do(t, "PUT", "/api/v1/gateway/tenants/acme", `{"plan":"small"}`), 403, "forbidden")
	want(t, "acme admin: its usage", acmeAdmin.do(t, "GET", "/api/v1/gateway/usage/acme", ""), 200, "")
	want(t, "acme admin: rival's usage", acmeAdmin.do(t, "GET", "/api/v1/gateway/usage/rival", ""), 403, "forbidden")
	want(t, "acme admin: /metrics", acmeAdmin.do(t, "GET", "/metrics", ""), 403, "forbidden")
	p.admin.mustPushAs(t, p.gw, "acme", "q", 1)
	want(t, "acme admin: push", acmeAdmin.push(t, "q", 1), 201, "")
	want(t, "ops admin: GET plan", p.admin.do(t, "GET", "/api/v1/gateway/plans/small", ""), 200, "")
	want(t, "ops admin: rival's usage", p.admin.do(t, "GET", "/api/v1/gateway/usage/rival", ""), 200, "")
	want(t, "ops admin: /metrics", p.admin.do(t, "GET", "/metrics", ""), 200, "")
}
