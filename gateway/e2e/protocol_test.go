package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// rawRequest is one HTTP/1.1 request as bytes, with the bearer token.
func rawRequest(method, path, bearer, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n", method, path, bearer)
	if body != "" || method == "POST" || method == "PUT" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// TestPipelinedInOrder: requests pipelined on one connection in one write
// (forwarded on a shared connection, on a dedicated one, refused by the
// gateway, answered by its admin routes) come back in the order sent, and
// what the gateway answers itself sees the forwarded ones before it.
func TestPipelinedInOrder(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "ops", "pro", planJSON(true, 0, 0, 0, 0))
	tok := p.admin.bearer
	reqs := []struct {
		raw    string
		status int
		check  string // in the body
	}{
		{rawRequest("POST", "/api/v1/ephemeral/push", tok, pushBody("pl", 2)), 201, `"pushed":2`},
		{rawRequest("GET", "/api/v1/ephemeral/pop?queue=pl&batch=10&autoAck=true", tok, ""), 200, `{"n":1}`},
		{rawRequest("GET", "/api/v1/gateway/usage/ops", tok, ""), 200, `"messages":2,"deliveries":2`},
		{rawRequest("GET", "/api/v1/ephemeral/nope", tok, ""), 404, `"route_blocked"`},
		{rawRequest("GET", "/api/v1/ephemeral/pop?queue=pl&wait=true&timeout=200", tok, ""), 200, `"messages":[]`},
		{rawRequest("POST", "/api/v1/ephemeral/push", tok, pushBody("pl", 1)), 201, `"pushed":1`},
		{rawRequest("POST", "/api/v1/ephemeral/configure", tok, `{"queue":"pl2"}`), 201, ``},
		{rawRequest("GET", "/api/v1/ephemeral/queues", tok, ""), 200, `"pl2"`},
		{rawRequest("GET", "/api/v1/ephemeral/pop?queue=pl&batch=10&autoAck=true", tok, ""), 200, `{"n":0}`},
		{rawRequest("GET", "/health", "", ""), 200, ``},
		{rawRequest("GET", "/api/v1/gateway/usage/ops", tok, ""), 200, `"messages":3,"deliveries":3`},
	}
	conn, err := net.Dial("tcp", p.gw.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	var all strings.Builder
	for _, r := range reqs {
		all.WriteString(r.raw)
	}
	if _, err := io.WriteString(conn, all.String()); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	for i, r := range reqs {
		resp, err := http.ReadResponse(rd, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if resp.StatusCode != r.status || !strings.Contains(string(body), r.check) {
			t.Fatalf("answer %d (%s): %d %s, want %d with %s", i, strings.SplitN(r.raw, "\r\n", 2)[0], resp.StatusCode, body, r.status, r.check)
		}
	}
}

// TestChunkedAndClose: a chunked push is forwarded de-chunked and metered;
// a request with Connection: close is answered, then the connection closes.
func TestChunkedAndClose(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c := p.gw.as(t, "acme", "read-write")

	// Sent raw, so that it is chunked for sure: several chunks, a chunk
	// extension and a trailer.
	body := pushBody("ch", 4)
	var chunked strings.Builder
	for i := 0; i < len(body); i += 7 {
		part := body[i:min(i+7, len(body))]
		fmt.Fprintf(&chunked, "%x;ext=1\r\n%s\r\n", len(part), part)
	}
	chunked.WriteString("0\r\nX-Trailer: 1\r\n\r\n")
	raw := "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + c.bearer +
		"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked.String()
	if r := rawExchange(t, p.gw.Addr(), raw); !strings.HasPrefix(r, "HTTP/1.1 201") || !strings.Contains(r, `"pushed":4`) {
		t.Fatalf("chunked push: %s", r)
	}
	p.admin.wantUsage(t, "acme", 4, 0)

	raw = strings.Replace(rawRequest("GET", "/api/v1/ephemeral/pop?queue=ch&batch=10&autoAck=true", c.bearer, ""), "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)
	if all := rawExchange(t, p.gw.Addr(), raw); !strings.HasPrefix(all, "HTTP/1.1 200") || strings.Count(all, `"payload"`) != 4 {
		t.Fatalf("pop with Connection: close: %s", all)
	}
	p.admin.wantUsage(t, "acme", 4, 4)
}

// rawExchange writes raw (which asks for Connection: close) on a new
// connection to addr and reads until the gateway closes the connection.
func rawExchange(t *testing.T, addr, raw string) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v (read %q)", raw, err, all)
	}
	return string(all)
}

// TestConcurrentPushesHoldTheAllowance: pushes in flight hold their items
// against the allowance, so concurrent pushes cannot pass it together:
// with messagesPerPeriod 10, exactly 10 of 30 concurrent pushes of one
// item are served.
func TestConcurrentPushesHoldTheAllowance(t *testing.T) {
	t.Parallel()
	avoidPeriodEnd(3600)
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "ten", planJSON(true, 10, 3600, 0, 0))
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := p.gw.as(t, "acme", "write-only")
			r, err := c.try(t.Context(), "POST", "/api/v1/ephemeral/push", pushBody("cc", 1))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				got[err.Error()]++
				return
			}
			got[fmt.Sprintf("%d %s", r.Status, r.code())]++
		}()
	}
	wg.Wait()
	if got["201 "] != 10 || got["429 message_allowance_exceeded"] != 20 {
		t.Fatalf("30 concurrent pushes of one against an allowance of 10: %v", got)
	}
	p.admin.wantUsage(t, "acme", 10, 0)
	if m := asGatewayOf(p.broker, "acme", "read-write").mustPop(t, "queue=cc&batch=100&autoAck=true"); len(m.Messages) != 10 {
		t.Fatalf("the broker holds %d, want 10", len(m.Messages))
	}
}

// TestShutdownWritesUsage: with a write interval far longer than the test,
// the usage reaches the catalog only by the write at SIGTERM, and a
// restarted gateway reads it back.
func TestShutdownWritesUsage(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	g := startGateway(t, []string{b.URL()}, map[string]string{"QUEEN_GATEWAY_USAGE_FLUSH_MS": "600000"})
	g.KeepPort = true
	admin := g.as(t, "ops", "admin")
	admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c := g.as(t, "acme", "read-write")
	c.mustPush(t, "s", 3)
	c.mustPop(t, "queue=s&batch=2&autoAck=true")
	admin.wantUsage(t, "acme", 3, 2)
	g.Stop(t)
	g.Start(t)
	admin.wantUsage(t, "acme", 3, 2)
}

// TestSharedCatalogUsageOfAnUnseenTenant: a gateway sharing the catalog
// answers the usage of a tenant that only ever used the other gateway (a
// tenant put after it started), within a write interval.
func TestSharedCatalogUsageOfAnUnseenTenant(t *testing.T) {
	t.Parallel()
	dbURL, _ := schemaURL(t)
	b := startBroker(t, nil)
	env := map[string]string{"QUEEN_DATABASE_URL": dbURL}
	g1 := startGateway(t, []string{b.URL()}, env)
	g2 := startGateway(t, []string{b.URL()}, env)
	a1, a2 := g1.as(t, "ops", "admin"), g2.as(t, "ops", "admin")
	avoidPeriodEnd(3600)
	a1.onPlan(t, "solo", "capped", planJSON(true, 3, 3600, 0, 0))
	g1.as(t, "solo", "read-write").mustPush(t, "q", 3)
	var u usage
	brokertest.Eventually(t, 10*time.Second, "the second gateway never counted the tenant's usage", func() bool {
		u = a2.usage(t, "solo")
		return u.Messages == 3
	})
	// The allowance spent at the first is spent at the second.
	want(t, "a push at the second", g2.as(t, "solo", "read-write").push(t, "q", 1), 429, "message_allowance_exceeded")
}

// TestNoEndClientIdentity: without QUEEN_JWT_* every client is tenant
// default with the admin role, and the admin routes answer on loopback.
func TestNoEndClientIdentity(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	g := startGateway(t, []string{b.URL()}, map[string]string{"QUEEN_JWT_SECRET": ""})
	c := g.anonymous()
	want(t, "push before a plan", c.push(t, "q", 1), 403, "feature_gated")
	c.onPlan(t, "default", "pro", planJSON(true, 0, 0, 0, 0))
	c.mustPush(t, "q", 2)
	// A token means nothing here: still tenant default.
	g.as(t, "acme", "read-only").mustPush(t, "q", 1)
	if qs := asGatewayOf(b, "default", "read-only").queueNames(t); len(qs) != 1 || qs[0] != "q" {
		t.Fatalf("tenant default at the broker: %v", qs)
	}
	c.wantUsage(t, "default", 3, 0)
	want(t, "/metrics on loopback", c.do(t, "GET", "/metrics", ""), 200, "")
}

// TestExpectContinueAndHTTP10: a push sent with Expect: 100-continue gets
// its 100 Continue from the gateway, then its answer; an HTTP/1.0 request
// is answered and its connection closed.
func TestExpectContinueAndHTTP10(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c := p.gw.as(t, "acme", "read-write")

	conn, err := net.Dial("tcp", p.gw.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	body := pushBody("ex", 3)
	head := fmt.Sprintf("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", c.bearer, len(body))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("before the body: %q %v", line, err)
	}
	if blank, err := rd.ReadString('\n'); err != nil || blank != "\r\n" {
		t.Fatalf("after 100 Continue: %q %v", blank, err)
	}
	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("push after 100 Continue: %d %s", resp.StatusCode, b)
	}
	p.admin.wantUsage(t, "acme", 3, 0)

	raw := "GET /api/v1/ephemeral/pop?queue=ex&batch=10&autoAck=true HTTP/1.0\r\nAuthorization: Bearer " + c.bearer + "\r\n\r\n"
	if all := rawExchange(t, p.gw.Addr(), raw); !strings.HasPrefix(all, "HTTP/1.") || !strings.Contains(all, " 200 ") || strings.Count(all, `"payload"`) != 3 {
		t.Fatalf("HTTP/1.0 pop: %s", all)
	}
	p.admin.wantUsage(t, "acme", 3, 3)
}
