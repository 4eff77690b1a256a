package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestCellViewThroughTheGateway: the cell's view read, GET
// /api/v1/ephemeral/cell, is answered by the gateway itself as a single
// broker answers it (generation 0, the caller's tenant, no members), over
// HTTP and on a link, even when the broker behind it is a member of a cell
// that lists itself with its public URL: the gateway's clients are never
// sent around it. It passes the gates a read of the family passes (the
// level, the plan), refuses a query a broker refuses, and the broker never
// sees it.
func TestCellViewThroughTheGateway(t *testing.T) {
	t.Parallel()
	dbURL, schema := schemaURL(t)
	self := brokertest.Advertise(t)
	p := startPair(t, brokertest.NewCell(dbURL, schema, map[string]string{"QUEEN_CELL_SECRET": cellSecret}).Env(self, nil), nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	p.admin.onPlan(t, "free-co", "free", planJSON(false, 0, 0, 0, 0))

	// Behind the gateway's back, the broker is a member with a public URL.
	member := `{"id":"` + self + `","url":"` + p.broker.URL() + `"}`
	brokertest.Eventually(t, 10*time.Second, "the broker lists itself", func() bool {
		r := asGatewayOf(p.broker, "acme", "read-only").do(t, "GET", "/api/v1/ephemeral/cell", "")
		return r.Status == 200 && strings.Contains(string(r.Body), `"members":[`+member+`]`)
	})
	views := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="cell"`)

	single := `{"generation":0,"tenant":"acme","members":[]}`
	for _, role := range []string{"read-only", "read-write", "admin"} {
		r := p.gw.as(t, "acme", role).do(t, "GET", "/api/v1/ephemeral/cell", "")
		if r.Status != 200 || string(r.Body) != single {
			t.Fatalf("%s over HTTP: %s, want 200 %s", role, r, single)
		}
	}
	// At once, whatever after says: generation 0 never changes.
	t0 := time.Now()
	if r := p.gw.as(t, "acme", "read-only").do(t, "GET", "/api/v1/ephemeral/cell?after=0&timeout=30000", ""); r.Status != 200 || string(r.Body) != single || time.Since(t0) > 5*time.Second {
		t.Fatalf("after=0 over HTTP: %s after %v", r, time.Since(t0))
	}
	want(t, "a write-only view read", p.gw.as(t, "acme", "write-only").do(t, "GET", "/api/v1/ephemeral/cell", ""), 403, "forbidden")
	want(t, "a gated view read", p.gw.as(t, "free-co", "read-only").do(t, "GET", "/api/v1/ephemeral/cell", ""), 403, "feature_gated")
	want(t, "no token", p.gw.anonymous().do(t, "GET", "/api/v1/ephemeral/cell", ""), 401, "unauthorized")
	want(t, "a bad after", p.gw.as(t, "acme", "read-only").do(t, "GET", "/api/v1/ephemeral/cell?after=x", ""), 400, "ephemeral_bad_request")
	want(t, "a POST", p.gw.as(t, "acme", "read-only").do(t, "POST", "/api/v1/ephemeral/cell", ""), 404, "route_blocked")

	l := dialLink(t, p.gw.URL(), token(t, "acme", "read-only"))
	if r := l.call("GET", "/api/v1/ephemeral/cell?after=0", ""); r.Status != 200 || string(r.Body) != single {
		t.Fatalf("on a link: %s, want 200 %s", r, single)
	}
	want(t, "a bad after on a link", l.call("GET", "/api/v1/ephemeral/cell?timeout=x", ""), 400, "ephemeral_bad_request")
	want(t, "a gated view read on a link", dialLink(t, p.gw.URL(), token(t, "free-co", "read-only")).call("GET", "/api/v1/ephemeral/cell", ""), 403, "feature_gated")

	if n := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="cell"`); n != views {
		t.Fatalf("the broker served %v view reads sent to the gateway", n-views)
	}
}
