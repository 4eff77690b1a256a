package e2e

import (
	"testing"
)

// The admin scope (docs/gateway.md, "Admin routes"): plans, tenants and
// other tenants' usage belong to the gateway's operator, as the broker's
// switches do (docs/server.md, "Admin scope").

// gwAdminToken is the gateway's QUEEN_ADMIN_TOKEN where a test sets one.
const gwAdminToken = "e2e-gateway-admin-token"

// adminCase is one admin request and the answer each caller gets.
type adminCase struct {
	method, path, body string
	tenantAdmin        int // acme's admin
	tenantCode         string
}

// adminCases are every admin route, as acme's admin (not the operator)
// asks them: its own tenant and usage and the route table are its to read,
// nothing else. The delete is last: the operator's run deletes the plan.
func adminCases() []adminCase {
	plan := planJSON(true, 0, 0, 0, 0)
	return []adminCase{
		{"PUT", "/api/v1/gateway/plans/unlimited", plan, 403, "forbidden"},
		{"GET", "/api/v1/gateway/plans/pro", "", 403, "forbidden"},
		{"PUT", "/api/v1/gateway/tenants/acme", `{"plan":"pro"}`, 403, "forbidden"},
		{"PUT", "/api/v1/gateway/tenants/rival", `{"plan":"pro"}`, 403, "forbidden"},
		{"GET", "/api/v1/gateway/tenants/rival", "", 403, "forbidden"},
		{"GET", "/api/v1/gateway/usage/rival", "", 403, "forbidden"},
		{"GET", "/metrics", "", 403, "forbidden"},
		{"GET", "/api/v1/gateway/tenants/acme", "", 200, ""},
		{"GET", "/api/v1/gateway/usage/acme", "", 200, ""},
		{"GET", "/api/v1/gateway/routes", "", 200, ""},
		{"DELETE", "/api/v1/gateway/plans/pro", "", 403, "forbidden"},
	}
}

// TestAdminScopeWithoutOperatorTenant: with QUEEN_OPERATOR_TENANT unset
// (the default), no tenant's admin is the operator: acme's admin can
// neither create an unlimited plan nor move itself onto one nor read a
// rival's usage (before, any admin token could), while the admin token
// can do everything. Nothing a refused request asked for happened.
func TestAdminScopeWithoutOperatorTenant(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	g := startGateway(t, []string{b.URL()}, map[string]string{"QUEEN_OPERATOR_TENANT": "", "QUEEN_ADMIN_TOKEN": gwAdminToken})
	op := &client{base: g.URL(), bearer: gwAdminToken, hc: newHTTPClient()}
	op.onPlan(t, "acme", "pro", planJSON(true, 10, 3600, 0, 0))
	op.putTenant(t, "rival", "pro")

	acmeAdmin := g.as(t, "acme", "admin")
	for _, c := range adminCases() {
		want(t, "acme admin: "+c.method+" "+c.path, acmeAdmin.do(t, c.method, c.path, c.body), c.tenantAdmin, c.tenantCode)
	}
	// The admin of a tenant named like an operator is not one either.
	want(t, "ops admin: PUT plan", g.as(t, "ops", "admin").do(t, "PUT", "/api/v1/gateway/plans/unlimited", planJSON(true, 0, 0, 0, 0)), 403, "forbidden")
	want(t, "acme read-write: GET own usage", g.as(t, "acme", "read-write").do(t, "GET", "/api/v1/gateway/usage/acme", ""), 403, "forbidden")
	want(t, "no token: GET own usage", g.anonymous().do(t, "GET", "/api/v1/gateway/usage/acme", ""), 401, "unauthorized")

	// Nothing changed: acme is still on pro, no plan unlimited.
	want(t, "plan unlimited", op.do(t, "GET", "/api/v1/gateway/plans/unlimited", ""), 404, "plan_not_found")
	if r := op.do(t, "GET", "/api/v1/gateway/tenants/acme", ""); r.Status != 200 || string(r.Body) != `{"tenant":"acme","plan":"pro"}` {
		t.Fatalf("acme's tenant after the refusals: %s", r)
	}

	// The admin token may do all of it.
	for _, c := range adminCases() {
		want(t, "admin token: "+c.method+" "+c.path, op.do(t, c.method, c.path, c.body), 200, "")
	}
}

// TestAdminScopeTokenWithoutIdentity: without end-client identity, once
// QUEEN_ADMIN_TOKEN is set it is needed from loopback clients too (401
// unauthorized without it), as on the broker; the data routes are
// unaffected.
func TestAdminScopeTokenWithoutIdentity(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	g := startGateway(t, []string{b.URL()}, map[string]string{"QUEEN_JWT_SECRET": "", "QUEEN_OPERATOR_TENANT": "", "QUEEN_ADMIN_TOKEN": gwAdminToken})
	anon := g.anonymous()
	want(t, "loopback, no token: PUT plan", anon.do(t, "PUT", "/api/v1/gateway/plans/pro", planJSON(true, 0, 0, 0, 0)), 401, "unauthorized")
	want(t, "loopback, no token: /metrics", anon.do(t, "GET", "/metrics", ""), 401, "unauthorized")
	wrong := &client{base: g.URL(), bearer: "not-the-token", hc: newHTTPClient()}
	want(t, "loopback, a wrong token: GET routes", wrong.do(t, "GET", "/api/v1/gateway/routes", ""), 401, "unauthorized")
	op := &client{base: g.URL(), bearer: gwAdminToken, hc: newHTTPClient()}
	op.onPlan(t, "default", "pro", planJSON(true, 0, 0, 0, 0))
	want(t, "admin token: /metrics", op.do(t, "GET", "/metrics", ""), 200, "")
	want(t, "no token: push", anon.push(t, "q", 1), 201, "")
}
