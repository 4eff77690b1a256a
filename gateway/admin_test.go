package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/gateway/catalog"
	"github.com/queenmq/ephemeral/gateway/routes"
	"github.com/queenmq/ephemeral/identity"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// The admin routes and their scope (docs/gateway.md, "Admin routes"), in
// process: who may use which route, and what each route answers. The
// gateway/e2e tests hold the same rules against the built binaries.

// adminDo sends method path (under http://addr) with bearer (when not
// empty) and body, and returns the status, the refusal's code and the
// body.
func adminDo(t *testing.T, g *Gateway, method, path, bearer, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+g.Addr().String()+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = path // sent as written, malformed escapes included
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Code, string(b)
}

// failingCatalog fails every call while fail is set, and, as the real
// catalogs do, once its context is done.
type failingCatalog struct {
	catalog.Store
	fail atomic.Bool
}

var errCatalogDown = errors.New("the catalog is down")

func (f *failingCatalog) PutPlan(ctx context.Context, p catalog.Plan) error {
	if f.fail.Load() || ctx.Err() != nil {
		return errCatalogDown
	}
	return f.Store.PutPlan(ctx, p)
}

func (f *failingCatalog) GetPlan(ctx context.Context, name string) (catalog.Plan, bool, error) {
	if f.fail.Load() || ctx.Err() != nil {
		return catalog.Plan{}, false, errCatalogDown
	}
	return f.Store.GetPlan(ctx, name)
}

func (f *failingCatalog) DeletePlan(ctx context.Context, name string) (bool, error) {
	if f.fail.Load() || ctx.Err() != nil {
		return false, errCatalogDown
	}
	return f.Store.DeletePlan(ctx, name)
}

func (f *failingCatalog) PutTenant(ctx context.Context, tn catalog.Tenant) error {
	if f.fail.Load() || ctx.Err() != nil {
		return errCatalogDown
	}
	return f.Store.PutTenant(ctx, tn)
}

func (f *failingCatalog) GetTenant(ctx context.Context, name string) (catalog.Tenant, bool, error) {
	if f.fail.Load() || ctx.Err() != nil {
		return catalog.Tenant{}, false, errCatalogDown
	}
	return f.Store.GetTenant(ctx, name)
}

// AddUsage and UsageSince fail while fail is set, and, as the real
// catalogs do, once ctx is done.
func (f *failingCatalog) AddUsage(ctx context.Context, rows []catalog.Usage) error {
	if f.fail.Load() {
		return errCatalogDown
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return f.Store.AddUsage(ctx, rows)
}

func (f *failingCatalog) UsageSince(ctx context.Context, since int64) (map[string]map[catalog.Class]int64, error) {
	if f.fail.Load() {
		return nil, errCatalogDown
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return f.Store.UsageSince(ctx, since)
}

// Revision fails while fail is set, and, as the real catalogs do, once ctx
// is done.
func (f *failingCatalog) Revision(ctx context.Context) (int64, error) {
	if f.fail.Load() {
		return 0, errCatalogDown
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return f.Store.Revision(ctx)
}

// A change made in the catalog (by another gateway, or by hand) applies
// within the poll interval, without a restart; while the catalog cannot be
// read the gateway serves its last copy and says so in its log
// (docs/gateway.md, "Admin routes").
func TestCatalogChangesApplyWithoutARestart(t *testing.T) {
	var cat *failingCatalog
	var logs syncBuffer
	g := startFront(t, nil, func(c *Config) {
		cat = &failingCatalog{Store: c.Catalog}
		c.Catalog, c.Logger = cat, slog.New(slog.NewTextHandler(&logs, nil))
	})
	tok := frontToken(t, "acme", "read-write")
	push := func() (int, string) {
		req, _ := http.NewRequest("POST", "http://"+g.Addr().String()+"/api/v1/ephemeral/push", strings.NewReader(`{"queue":"q","messages":[{"payload":1}]}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := push(); st != 201 {
		t.Fatalf("a push on plan pro: %d %s", st, body)
	}
	_ = cat.Store.PutPlan(context.Background(), catalog.Plan{Name: "pro"}) // ephemeral off, behind the gateway's back
	brokertest.Eventually(t, 10*time.Second, "the plan's change applied", func() bool {
		st, body := push()
		return st == 403 && strings.Contains(body, `"feature_gated"`)
	})
	if l := logs.String(); strings.Contains(l, "reading the catalog failed") {
		t.Fatalf("a warning while the catalog answers: %s", l)
	}
	cat.fail.Store(true)
	brokertest.Eventually(t, 10*time.Second, "the failed read logged", func() bool { return strings.Contains(logs.String(), "reading the catalog failed") })
	if st, body := push(); st != 403 || !strings.Contains(body, `"feature_gated"`) {
		t.Fatalf("with the catalog down, the last copy: %d %s, want 403 feature_gated", st, body)
	}
}

// Who may use which admin route, with JWT identity, an operator tenant and
// an admin token: the operator (the token, or an admin of ops) every route;
// a tenant's admin the route table and its own tenant and usage, read
// only; lower roles none.
func TestAdminScope(t *testing.T) {
	g := startFront(t, nil, func(c *Config) {
		c.OperatorTenant = "ops"
		c.AdminToken = []byte("admin-token")
	})
	acme, acmeRW := frontToken(t, "acme", "admin"), frontToken(t, "acme", "read-write")
	ops, opsRW := frontToken(t, "ops", "admin"), frontToken(t, "ops", "read-write")
	const plan = `{"features":{"ephemeral":true}}`
	for _, c := range []struct {
		why, method, path, bearer, body string
		status                          int
		code                            string
	}{
		{"a tenant's admin reads the route table", "GET", "/api/v1/gateway/routes", acme, "", 200, ""},
		{"a tenant's admin reads its tenant", "GET", "/api/v1/gateway/tenants/acme", acme, "", 200, ""},
		{"a tenant's admin reads its tenant, escaped", "GET", "/api/v1/gateway/tenants/ac%6De", acme, "", 200, ""},
		{"a tenant's admin reads its usage", "GET", "/api/v1/gateway/usage/acme", acme, "", 200, ""},
		{"a tenant's admin reads another tenant", "GET", "/api/v1/gateway/tenants/free", acme, "", 403, "forbidden"},
		{"a tenant's admin reads another's usage", "GET", "/api/v1/gateway/usage/free", acme, "", 403, "forbidden"},
		{"a tenant's admin puts its own tenant", "PUT", "/api/v1/gateway/tenants/acme", acme, `{"plan":"pro"}`, 403, "forbidden"},
		{"a tenant's admin reads a plan", "GET", "/api/v1/gateway/plans/pro", acme, "", 403, "forbidden"},
		{"a tenant's admin puts a plan", "PUT", "/api/v1/gateway/plans/big", acme, plan, 403, "forbidden"},
		{"a tenant's admin reads /metrics", "GET", "/metrics", acme, "", 403, "forbidden"},
		{"a read-write role reads the route table", "GET", "/api/v1/gateway/routes", acmeRW, "", 403, "forbidden"},
		{"a read-write role of ops reads its tenant", "GET", "/api/v1/gateway/tenants/ops", opsRW, "", 403, "forbidden"},
		{"no credential", "GET", "/api/v1/gateway/routes", "", "", 401, "unauthorized"},
		{"a wrong token", "GET", "/api/v1/gateway/plans/pro", "admin-tokem", "", 401, "unauthorized"},
		{"an admin of ops puts a plan", "PUT", "/api/v1/gateway/plans/big", ops, plan, 200, ""},
		{"an admin of ops reads another tenant", "GET", "/api/v1/gateway/tenants/acme", ops, "", 200, ""},
		{"an admin of ops reads /metrics", "GET", "/metrics", ops, "", 200, ""},
		{"the token puts a tenant", "PUT", "/api/v1/gateway/tenants/acme", "admin-token", `{"plan":"pro"}`, 200, ""},
		{"the token reads /metrics", "GET", "/metrics", "admin-token", "", 200, ""},
	} {
		status, code, body := adminDo(t, g, c.method, c.path, c.bearer, c.body)
		if status != c.status || code != c.code {
			t.Errorf("%s: %s %s: %d %q, want %d %q (%s)", c.why, c.method, c.path, status, code, c.status, c.code, body)
		}
	}
}

// Without end-client identity: loopback clients naming a loopback host are
// the operator while there is no admin token; once there is one it is
// needed from every client.
func TestAdminScopeWithoutIdentity(t *testing.T) {
	g, _ := startBehind(t, newMemCatalog())
	if status, code, body := adminDo(t, g, "GET", "/api/v1/gateway/routes", "", ""); status != 200 {
		t.Errorf("a loopback client without a token: %d %q (%s), want 200", status, code, body)
	}
	req, _ := http.NewRequest("GET", "http://"+g.Addr().String()+"/api/v1/gateway/routes", nil)
	req.Host = "queen.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("a loopback client naming another host: %d, want 403", resp.StatusCode)
	}

	none, err := identity.New(identity.Config{Mode: identity.ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	g = startFront(t, nil, func(c *Config) { c.Auth, c.AdminToken = none, []byte("admin-token") })
	for _, c := range []struct {
		bearer string
		status int
		code   string
	}{{"", 401, "unauthorized"}, {"admin-tokem", 401, "unauthorized"}, {"admin-token", 200, ""}} {
		if status, code, body := adminDo(t, g, "GET", "/api/v1/gateway/routes", c.bearer, ""); status != c.status || code != c.code {
			t.Errorf("with an admin token set, a loopback client with %q: %d %q (%s), want %d %q", c.bearer, status, code, body, c.status, c.code)
		}
	}
}

// What each admin route answers, for the operator.
func TestAdminRoutes(t *testing.T) {
	var cat *failingCatalog
	var logs syncBuffer
	g := startFront(t, nil, func(c *Config) {
		c.AdminToken = []byte("admin-token")
		cat = &failingCatalog{Store: c.Catalog}
		c.Catalog, c.Logger = cat, slog.New(slog.NewTextHandler(&logs, nil))
	})
	const tok = "admin-token"
	for _, c := range []struct {
		method, path, body string
		status             int
		code, answer       string
	}{
		{"GET", "/api/v1/gateway/routes", "", 200, "", string(routes.Default().JSON())},
		{"POST", "/api/v1/gateway/routes", "", 405, "method_not_allowed", ""},
		{"GET", "/api/v1/gateway/routes/x", "", 404, "not_found", ""},
		{"GET", "/api/v1/gateway/plans", "", 404, "not_found", ""},
		{"GET", "/api/v1/gateway/plans/", "", 404, "not_found", ""},
		{"GET", "/api/v1/gateway/plans/a/b", "", 404, "not_found", ""},
		{"GET", "/api/v1/gateway/nothing/x", "", 404, "not_found", ""},
		{"PUT", "/api/v1/gateway/plans/p", `{"parkedSlots":-1}`, 400, "bad_request", ""},
		{"PUT", "/api/v1/gateway/plans/p", `{"features":{"ephemeral":true},"parkedSlots":2}`, 200, "",
			`{"name":"p","features":{"ephemeral":true},"messagesPerPeriod":0,"periodSeconds":0,"messagesPerSecond":0,"parkedSlots":2}`},
		{"GET", "/api/v1/gateway/plans/p", "", 200, "",
			`{"name":"p","features":{"ephemeral":true},"messagesPerPeriod":0,"periodSeconds":0,"messagesPerSecond":0,"parkedSlots":2}`},
		{"GET", "/api/v1/gateway/plans/none", "", 404, "plan_not_found", ""},
		{"POST", "/api/v1/gateway/plans/p", "", 405, "method_not_allowed", ""},
		{"PUT", "/api/v1/gateway/tenants/t", `{"plan":"none"}`, 404, "plan_not_found", ""},
		{"PUT", "/api/v1/gateway/tenants/t", `{"plan":1}`, 400, "bad_request", ""},
		{"PUT", "/api/v1/gateway/tenants/t", `{"plan":"p"}`, 200, "", `{"tenant":"t","plan":"p"}`},
		{"GET", "/api/v1/gateway/tenants/t", "", 200, "", `{"tenant":"t","plan":"p"}`},
		{"GET", "/api/v1/gateway/tenants/none", "", 404, "tenant_not_found", ""},
		{"DELETE", "/api/v1/gateway/tenants/t", "", 405, "method_not_allowed", ""},
		{"DELETE", "/api/v1/gateway/plans/p", "", 200, "", `{"plan":"p","deleted":true}`},
		{"DELETE", "/api/v1/gateway/plans/p", "", 200, "", `{"plan":"p","deleted":false}`},
		{"GET", "/api/v1/gateway/usage/t", "", 200, "", `{"tenant":"t","messages":0,"deliveries":0,"parked":0}`},
		{"GET", "/api/v1/gateway/usage/nobody", "", 200, "", `{"tenant":"nobody","messages":0,"deliveries":0,"parked":0}`},
		{"GET", "/api/v1/gateway/usage/a%01", "", 400, "bad_request", ""},
		{"DELETE", "/api/v1/gateway/usage/t", "", 405, "method_not_allowed", ""},
	} {
		status, code, body := adminDo(t, g, c.method, c.path, tok, c.body)
		if status != c.status || code != c.code || (c.answer != "" && body != c.answer) {
			t.Errorf("%s %s: %d %q %s, want %d %q %s", c.method, c.path, status, code, body, c.status, c.code, c.answer)
		}
	}
	if l := logs.String(); l != "" {
		t.Fatalf("warnings with the catalog up: %s", l)
	}
	cat.fail.Store(true)
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/api/v1/gateway/plans/p", `{}`},
		{"GET", "/api/v1/gateway/plans/p", ""},
		{"DELETE", "/api/v1/gateway/plans/p", ""},
		{"PUT", "/api/v1/gateway/tenants/t", `{"plan":"p"}`},
		{"GET", "/api/v1/gateway/tenants/t", ""},
	} {
		status, code, body := adminDo(t, g, c.method, c.path, tok, c.body)
		if status != 503 || code != "gateway_store_unavailable" {
			t.Errorf("%s %s with the catalog down: %d %q %s, want 503 gateway_store_unavailable", c.method, c.path, status, code, body)
		}
	}
}
