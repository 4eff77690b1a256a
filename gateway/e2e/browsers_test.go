package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// Browsers at the gateway's door (D20, docs/gateway.md "Browsers"): the
// broker's rules. A state-changing request a browser marks as sent from
// another origin is 403 forbidden on its head, whatever credential it
// carries (a browser sends the cookie or the token of its user), unless
// its origin is trusted; without end-client identity, a loopback client is
// the operator only when its Host names loopback.

// withHeaders is c with extra request headers.
func (c *client) withHeaders(kv ...string) *client {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &client{base: c.base, bearer: c.bearer, header: h, hc: c.hc}
}

// TestGatewayCrossOriginRefused: push, pop, ack and an admin PUT from a
// page on another site are refused 403 forbidden naming
// QUEEN_TRUSTED_ORIGINS, with valid credentials, and nothing changes; the
// same requests from the gateway's own origin, or with no browser
// headers, are served; a trusted origin is let through.
func TestGatewayCrossOriginRefused(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, map[string]string{"QUEEN_TRUSTED_ORIGINS": "https://app.example.com"})
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	acme := p.gw.as(t, "acme", "read-write")
	acme.mustPush(t, "victim", 2)

	cross := []string{"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example"}
	mismatch := []string{"Origin", "http://evil.example"}
	for _, h := range [][]string{cross, mismatch} {
		for _, c := range []struct {
			who                *client
			method, path, body string
		}{
			{acme, "POST", "/api/v1/ephemeral/push", pushBody("victim", 1)},
			{acme, "GET", "/api/v1/ephemeral/pop?queue=victim&autoAck=true&batch=10", ""},
			{acme, "POST", "/api/v1/ephemeral/reset", `{"queue":"victim"}`},
			{acme, "DELETE", "/api/v1/ephemeral/queue/victim", ""},
			{p.admin, "PUT", "/api/v1/gateway/plans/unlimited", planJSON(true, 0, 0, 0, 0)},
			{p.admin, "PUT", "/api/v1/gateway/tenants/acme", `{"plan":"unlimited"}`},
		} {
			r := c.who.withHeaders(h...).do(t, c.method, c.path, c.body)
			want(t, fmt.Sprintf("%v %s %s", h, c.method, c.path), r, 403, "forbidden")
			if !strings.Contains(r.message(), "QUEEN_TRUSTED_ORIGINS") {
				t.Fatalf("%s %s: the refusal does not name QUEEN_TRUSTED_ORIGINS: %s", c.method, c.path, r)
			}
		}
	}
	// Nothing changed.
	want(t, "plan unlimited", p.admin.do(t, "GET", "/api/v1/gateway/plans/unlimited", ""), 404, "plan_not_found")
	if got := len(acme.mustPop(t, "queue=victim&batch=10&autoAck=true").Messages); got != 2 {
		t.Fatalf("after the refusals victim holds %d messages, want the 2 pushed", got)
	}
	// Served: its own origin, the address bar, no browser, a trusted origin.
	self := []string{"Sec-Fetch-Site", "same-origin", "Origin", p.gw.URL()}
	want(t, "same-origin push", acme.withHeaders(self...).push(t, "q", 1), 201, "")
	want(t, "Origin equal to Host", acme.withHeaders("Origin", p.gw.URL()).push(t, "q", 1), 201, "")
	want(t, "no browser headers", acme.push(t, "q", 1), 201, "")
	want(t, "trusted origin", acme.withHeaders("Sec-Fetch-Site", "cross-site", "Origin", "https://app.example.com").push(t, "q", 1), 201, "")
	// Reads are not refused (a page on another origin cannot read them).
	want(t, "cross-site listing", acme.withHeaders(cross...).do(t, "GET", "/api/v1/ephemeral/queues", ""), 200, "")
}

// TestGatewayCrossOriginRefusedBeforeTheBody: a cross-site upload with a
// valid token is refused on its head and the connection closed; the
// gateway never waits for the body.
func TestGatewayCrossOriginRefusedBeforeTheBody(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	c, err := net.DialTimeout("tcp", p.gw.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nSec-Fetch-Site: cross-site\r\n"+
		"Origin: http://evil.example\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", p.gw.Addr(), token(t, "acme", "read-write"), 60<<20)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the head alone: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	r := reply{Status: resp.StatusCode, Header: resp.Header, Body: body}
	want(t, "cross-site 60 MiB upload, head only", r, 403, "forbidden")
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the connection stayed open after the refusal: %v", err)
	}
}

// TestGatewayLoopbackNeedsALoopbackHost: without end-client identity and
// without an admin token the gateway's admin routes and /metrics answer
// loopback clients only, and only when their Host names loopback or a
// trusted host: a DNS-rebound page gets 403 forbidden naming
// QUEEN_TRUSTED_HOSTS and changes nothing.
func TestGatewayLoopbackNeedsALoopbackHost(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	g := startGateway(t, []string{b.URL()}, map[string]string{"QUEEN_JWT_SECRET": "", "QUEEN_OPERATOR_TENANT": "",
		"QUEEN_TRUSTED_HOSTS": "gw.test"})
	port := strconv.Itoa(g.Port())
	hc := newHTTPClient()
	do := func(method, path, body, host string) reply {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, g.URL()+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		// A rebound page is same-origin with itself.
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Origin", "http://"+host)
		r, err := brokertest.Do(hc, req)
		if err != nil {
			t.Fatalf("%s %s as %s: %v", method, path, host, err)
		}
		return reply(r)
	}
	rebound := "attacker.example:" + port
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/metrics", ""},
		{"PUT", "/api/v1/gateway/plans/unlimited", planJSON(true, 0, 0, 0, 0)},
		{"GET", "/api/v1/gateway/routes", ""},
	} {
		r := do(c.method, c.path, c.body, rebound)
		want(t, "rebound "+c.method+" "+c.path, r, 403, "forbidden")
		if !strings.Contains(r.message(), "QUEEN_TRUSTED_HOSTS") {
			t.Fatalf("%s %s: the refusal does not name QUEEN_TRUSTED_HOSTS: %s", c.method, c.path, r)
		}
	}
	want(t, "plan unlimited after the refusal", do("GET", "/api/v1/gateway/plans/unlimited", "", "localhost:"+port), 404, "plan_not_found")
	for _, h := range []string{"localhost:" + port, "127.0.0.1:" + port, "gw.test:" + port} {
		want(t, "/metrics as "+h, do("GET", "/metrics", "", h), 200, "")
	}
}
