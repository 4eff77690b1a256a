package conformance

// Who may use the admin routes and /metrics (docs/server.md,
// "Admin scope"), tokens without exp, and empty names in the path.

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// nonLoopbackIP returns an address of this machine that is not loopback,
// so that a request to it comes from a non-loopback client; the test skips
// when there is none.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address to connect from")
	return ""
}

// doAt sends a request to host (at the broker's port) with headers (name,
// value pairs).
func (b *broker) doAt(t testing.TB, host, method, path string, body string, headers ...string) reply {
	t.Helper()
	port := b.Port()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+net.JoinHostPort(host, strconv.Itoa(port))+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	r, err := brokertest.Do(c, req)
	if err != nil {
		t.Fatalf("%s %s at %s: %v", method, path, host, err)
	}
	return reply(r)
}

func wantMsg(t testing.TB, e errBody, sub string) {
	t.Helper()
	if !strings.Contains(e.Error, sub) {
		t.Fatalf("error %q does not mention %q", e.Error, sub)
	}
}

// adminRoutes are the routes protected mode and the admin token guard,
// with a body that each would accept.
var adminRoutes = []struct{ method, path, body string }{
	{"GET", "/api/v1/system/ephemeral", ""},
	{"POST", "/api/v1/system/ephemeral", `{"enabled":false}`},
	{"GET", "/api/v1/system/ephemeral/grants/default", ""},
	{"PUT", "/api/v1/system/ephemeral/grants/default", `{"maxQueues":1}`},
	{"DELETE", "/api/v1/system/ephemeral/grants/default", ""},
	{"GET", "/metrics", ""},
}

// TestProtectedMode: with QUEEN_AUTH_MODE=none and no admin token, the
// admin routes and /metrics answer loopback clients only; any other client
// gets 403 forbidden saying to set QUEEN_ADMIN_TOKEN. The family's routes
// and /health are served to everyone, and a refused pause pauses nothing.
func TestProtectedMode(t *testing.T) {
	t.Parallel()
	ip := nonLoopbackIP(t)
	b := startBroker(t, map[string]string{"HOST": "0.0.0.0"})
	for _, r := range adminRoutes {
		e := b.doAt(t, ip, r.method, r.path, r.body).wantErr(t, 403, "forbidden")
		wantMsg(t, e, "QUEEN_ADMIN_TOKEN")
	}
	b.doAt(t, ip, "GET", "/api/v1/ephemeral/queues", "").want(t, 200, nil)
	b.doAt(t, ip, "GET", "/health", "").want(t, 200, nil)
	b.doAt(t, ip, "POST", "/api/v1/ephemeral/push", string(pushBody("q", "", "1"))).want(t, 201, nil)
	// The same routes from loopback are served, and the broker was never
	// paused by the refused POST.
	var k killSwitch
	b.doAt(t, "127.0.0.1", "GET", "/api/v1/system/ephemeral", "").want(t, 200, &k)
	if !*k.Enabled {
		t.Fatalf("a refused remote POST paused the broker: %+v", k)
	}
	b.doAt(t, "127.0.0.1", "GET", "/metrics", "").want(t, 200, nil)
	b.doAt(t, "127.0.0.1", "PUT", "/api/v1/system/ephemeral/grants/default", `{}`).want(t, 200, nil)
	b.doAt(t, "127.0.0.1", "DELETE", "/api/v1/system/ephemeral/grants/default", "").want(t, 200, nil)
	b.doAt(t, "127.0.0.1", "POST", "/api/v1/system/ephemeral", `{"enabled":true}`).want(t, 200, nil)
}

// TestAdminTokenInModeNone: with QUEEN_ADMIN_TOKEN set, the admin routes
// and /metrics require it from every client, loopback included (401
// unauthorized without it or with a wrong one), and serve any client that
// sends it.
func TestAdminTokenInModeNone(t *testing.T) {
	t.Parallel()
	const tok = "operator-token-1"
	b := startBroker(t, map[string]string{"HOST": "0.0.0.0", "QUEEN_ADMIN_TOKEN": tok})
	hosts := []string{"127.0.0.1"}
	if ip := nonLoopbackIPOrEmpty(); ip != "" {
		hosts = append(hosts, ip)
	}
	for _, host := range hosts {
		for _, r := range adminRoutes {
			b.doAt(t, host, r.method, r.path, r.body).wantErr(t, 401, "unauthorized")
			b.doAt(t, host, r.method, r.path, r.body, "Authorization", "Bearer "+tok+"x").wantErr(t, 401, "unauthorized")
			b.doAt(t, host, r.method, r.path, r.body, "Authorization", "Bearer "+tok[:len(tok)-1]).wantErr(t, 401, "unauthorized")
		}
		b.doAt(t, host, "POST", "/api/v1/system/ephemeral", `{"enabled":true}`, "Authorization", "Bearer "+tok).want(t, 200, nil)
		b.doAt(t, host, "PUT", "/api/v1/system/ephemeral/grants/default", `{}`, "Authorization", "Bearer "+tok).want(t, 200, nil)
		b.doAt(t, host, "GET", "/api/v1/system/ephemeral/grants/default", "", "Authorization", "Bearer "+tok).want(t, 200, nil)
		b.doAt(t, host, "DELETE", "/api/v1/system/ephemeral/grants/default", "", "Authorization", "Bearer "+tok).want(t, 200, nil)
		if r := b.doAt(t, host, "GET", "/metrics", "", "Authorization", "Bearer "+tok); r.Status != 200 {
			t.Fatalf("/metrics with the token from %s: %s", host, r)
		}
		// The family's routes take no token in mode none.
		b.doAt(t, host, "GET", "/api/v1/ephemeral/queues", "").want(t, 200, nil)
	}
}

func nonLoopbackIPOrEmpty() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// TestAdminScope: in gateway (and jwt) mode a tenant's admin reads the
// kill switch and its own grant, and nothing broker-wide: it may not pause
// the broker, set or delete any grant (its own included: that would lift
// its quota), or read another tenant's grant (403 forbidden). An admin of
// QUEEN_OPERATOR_TENANT and the admin token may do all of it.
func TestAdminScope(t *testing.T) {
	t.Parallel()
	const tok = "operator-token-2"
	b := startGateway(t, map[string]string{"QUEEN_OPERATOR_TENANT": "ops", "QUEEN_ADMIN_TOKEN": tok})
	A, ops := gw("a", "admin"), gw("ops", "admin")
	const ks, ga, gb = "/api/v1/system/ephemeral", "/api/v1/system/ephemeral/grants/a", "/api/v1/system/ephemeral/grants/b"

	b.doH(t, "GET", ks, nil, A...).want(t, 200, nil)
	wantMsg(t, b.doH(t, "POST", ks, `{"enabled":false}`, A...).wantErr(t, 403, "forbidden"), "QUEEN_OPERATOR_TENANT")
	b.doH(t, "PUT", ga, `{"maxQueues":1000000}`, A...).wantErr(t, 403, "forbidden")
	b.doH(t, "DELETE", ga, nil, A...).wantErr(t, 403, "forbidden")
	b.doH(t, "PUT", gb, `{}`, A...).wantErr(t, 403, "forbidden")
	b.doH(t, "GET", gb, nil, A...).wantErr(t, 403, "forbidden")
	b.doH(t, "GET", ga, nil, A...).wantErr(t, 404, "grant_not_found") // its own: read, and there is none
	b.doH(t, "GET", "/metrics", nil, A...).wantErr(t, 403, "forbidden")
	// Levels below admin stay refused, the operator tenant's too.
	b.doH(t, "GET", ks, nil, gw("ops", "read-write")...).wantErr(t, 403, "forbidden")
	b.doH(t, "GET", ks, nil).wantErr(t, 401, "unauthorized")

	// The operator tenant's admin.
	var g grant
	b.doH(t, "PUT", ga, `{"maxQueues":1}`, ops...).want(t, 200, &g)
	b.doH(t, "GET", ga, nil, A...).want(t, 200, &g) // now a reads its own
	if g.MaxQueues != 1 {
		t.Fatalf("a's grant %+v", g)
	}
	b.doH(t, "PUT", ga, `{"maxQueues":0}`, A...).wantErr(t, 403, "forbidden") // and still cannot raise it
	b.doH(t, "GET", ga, nil, ops...).want(t, 200, nil)
	b.doH(t, "POST", ks, `{"enabled":false}`, ops...).want(t, 200, nil)
	b.doH(t, "POST", ks, `{"enabled":true}`, ops...).want(t, 200, nil)
	if r := b.doH(t, "GET", "/metrics", nil, ops...); r.Status != 200 {
		t.Fatalf("/metrics as the operator tenant's admin: %s", r)
	}

	// The admin token, with no tenancy headers at all.
	bearer := []string{"Authorization", "Bearer " + tok}
	b.doH(t, "PUT", gb, `{}`, bearer...).want(t, 200, nil)
	b.doH(t, "DELETE", gb, nil, bearer...).want(t, 200, nil)
	b.doH(t, "POST", ks, `{"enabled":true}`, bearer...).want(t, 200, nil)
	if r := b.doH(t, "GET", "/metrics", nil, bearer...); r.Status != 200 {
		t.Fatalf("/metrics with the admin token: %s", r)
	}
	b.doH(t, "POST", ks, `{"enabled":true}`, "Authorization", "Bearer wrong").wantErr(t, 401, "unauthorized")
	b.doH(t, "GET", "/metrics", nil).wantErr(t, 401, "unauthorized")

	// The grant a's admin could not lift still holds.
	b.doH(t, "POST", "/api/v1/ephemeral/push", pushBody("q1", "", "1"), gw("a", "read-write")...).want(t, 201, nil)
	b.doH(t, "POST", "/api/v1/ephemeral/push", pushBody("q2", "", "1"), gw("a", "read-write")...).wantErr(t, 403, "ephemeral_quota_exceeded")
}

// TestNoOperatorTenantByDefault: without QUEEN_OPERATOR_TENANT no tenant's
// admin is the operator, whatever its name.
func TestNoOperatorTenantByDefault(t *testing.T) {
	t.Parallel()
	b := startGateway(t, nil)
	for _, tenant := range []string{"ops", "default", "admin"} {
		b.doH(t, "POST", "/api/v1/system/ephemeral", `{"enabled":false}`, gw(tenant, "admin")...).wantErr(t, 403, "forbidden")
		b.doH(t, "PUT", "/api/v1/system/ephemeral/grants/x", `{}`, gw(tenant, "admin")...).wantErr(t, 403, "forbidden")
	}
	b.doH(t, "GET", "/api/v1/ephemeral/queues", nil, gw("t", "read-only")...).want(t, 200, nil) // never paused
}

// TestJWTAdminScopeAndExp: in jwt mode the operator tenant comes from the
// token's tenant claim, the admin token works beside JWTs, and a token
// without exp is 401 unless QUEEN_JWT_ALLOW_NO_EXP=true.
func TestJWTAdminScopeAndExp(t *testing.T) {
	t.Parallel()
	secret := []byte("jwt-admin-scope")
	const tok = "operator-token-3"
	b := startBroker(t, map[string]string{
		"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": string(secret),
		"QUEEN_OPERATOR_TENANT": "ops", "QUEEN_ADMIN_TOKEN": tok,
	})
	exp := time.Now().Add(time.Hour).Unix()
	bearer := func(c jwt.MapClaims) []string {
		return []string{"Authorization", "Bearer " + sign(t, jwt.SigningMethodHS256, secret, c)}
	}
	const ks = "/api/v1/system/ephemeral"
	b.doH(t, "POST", ks, `{"enabled":true}`, bearer(jwt.MapClaims{"tenant": "a", "role": "admin", "exp": exp})...).wantErr(t, 403, "forbidden")
	b.doH(t, "POST", ks, `{"enabled":true}`, bearer(jwt.MapClaims{"tenant": "ops", "role": "admin", "exp": exp})...).want(t, 200, nil)
	b.doH(t, "POST", ks, `{"enabled":true}`, "Authorization", "Bearer "+tok).want(t, 200, nil)

	noExp := bearer(jwt.MapClaims{"tenant": "ops", "role": "admin"})
	for range 2 { // refused again: a refused token is not cached
		e := b.doH(t, "GET", "/api/v1/ephemeral/queues", nil, noExp...).wantErr(t, 401, "unauthorized")
		wantMsg(t, e, "exp")
	}
	b.doH(t, "POST", ks, `{"enabled":true}`, noExp...).wantErr(t, 401, "unauthorized")

	lax := startBroker(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": string(secret), "QUEEN_JWT_ALLOW_NO_EXP": "true"})
	lax.doH(t, "GET", "/api/v1/ephemeral/queues", nil, noExp...).want(t, 200, nil)
}

// TestEmptyQueueNameInPath: an empty :queue segment is a name that breaks
// the name rule (D10), 400 ephemeral_bad_request whose message says so,
// after identity (D7).
func TestEmptyQueueNameInPath(t *testing.T) {
	t.Parallel()
	b := startGateway(t, nil)
	for _, r := range []struct{ method, path string }{
		{"DELETE", "/api/v1/ephemeral/queue/"},
		{"GET", "/api/v1/ephemeral/queues//depth"},
		{"GET", "/api/v1/ephemeral/queues//depth?group=g"},
	} {
		b.doH(t, r.method, r.path, nil).wantErr(t, 401, "unauthorized")
		e := b.doH(t, r.method, r.path, nil, gw("t", "read-write")...).wantErr(t, 400, "ephemeral_bad_request")
		wantMsg(t, e, "queue name in the path is empty")
	}
}
