// Package e2e tests the multi-tenant gateway end to end (docs/gateway.md):
// the real queen-gateway binary in front of real queen brokers in gateway
// mode, spoken to over HTTP with HS256 tokens, on the embedded catalog or on
// one throwaway PostgreSQL shared by the run.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"

	"github.com/queenmq/ephemeral/internal/brokertest"
	"github.com/queenmq/ephemeral/store/storetest"
)

// gatewayPkg is the gateway's command, what Binary builds for a gateway.
const gatewayPkg = "./cmd/queen-gateway"

const (
	gwSecret      = "e2e-gateway-secret" // between the gateway and its brokers
	jwtSecret     = "e2e-jwt-secret"     // the end clients' HS256 key
	operatorToken = "e2e-operator-token" // the brokers' QUEEN_ADMIN_TOKEN (their system routes)
	cellSecret    = "e2e-cell-secret-of-the-run"
)

// pg is the run's PostgreSQL (nil without one: the tests that need it skip,
// or, under CI=true, the run fails).
var pg *storetest.Postgres

// TestMain builds the broker and the gateway while PostgreSQL starts (as
// the conformance suite does: brokertest.Main has no room for a shared
// server), runs the tests and removes both.
func TestMain(m *testing.M) {
	brokertest.Prebuild(brokertest.Queen)
	brokertest.Prebuild(gatewayPkg)
	for _, p := range []string{brokertest.Queen, gatewayPkg} {
		if _, err := brokertest.Wait(p); err != nil {
			fmt.Fprintln(os.Stderr, err)
			brokertest.Cleanup()
			os.Exit(1)
		}
	}
	code := storetest.MainWithPostgres(m, &pg)
	brokertest.Cleanup()
	os.Exit(code)
}

// ---------------------------------------------------------------------------
// Processes

// merge is base with over's entries on top (over wins).
func merge(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// startBroker starts a broker in gateway mode, trusting gwSecret, with
// operatorToken for its system routes and, unless extra says otherwise, no
// grant required.
func startBroker(t *testing.T, extra map[string]string) *brokertest.Broker {
	t.Helper()
	b := brokertest.New(t, brokertest.Binary(t, brokertest.Queen), brokerEnv(extra))
	b.LogTail = 4000
	b.Start(t)
	return b
}

func brokerEnv(extra map[string]string) map[string]string {
	return merge(map[string]string{
		"QUEEN_AUTH_MODE":               "gateway",
		"QUEEN_GATEWAY_SECRET":          gwSecret,
		"QUEEN_ADMIN_TOKEN":             operatorToken,
		"QUEEN_EPHEMERAL_REQUIRE_GRANT": "false",
	}, extra)
}

// startGateway starts the gateway binary in front of upstreams, verifying
// HS256 tokens signed with jwtSecret, polling the catalog and writing usage
// every 50 ms, on its own embedded catalog unless extra names a database.
func startGateway(t *testing.T, upstreams []string, extra map[string]string) *gateway {
	t.Helper()
	p := brokertest.New(t, brokertest.Binary(t, gatewayPkg), gatewayEnv(upstreams, extra))
	p.LogTail = 4000
	p.Start(t)
	return &gateway{Broker: p}
}

func gatewayEnv(upstreams []string, extra map[string]string) map[string]string {
	return merge(map[string]string{
		"QUEEN_GATEWAY_UPSTREAMS":      strings.Join(upstreams, ","),
		"QUEEN_GATEWAY_SECRET":         gwSecret,
		"QUEEN_JWT_SECRET":             jwtSecret,
		"QUEEN_OPERATOR_TENANT":        "ops", // startPair's admin is an admin of ops
		"QUEEN_GATEWAY_POLL_MS":        "50",
		"QUEEN_GATEWAY_USAGE_FLUSH_MS": "50",
		"QUEEN_EVENT_LOOPS":            "2",
	}, extra)
}

// pair is a broker and a gateway in front of it, with an admin client of
// the gateway.
type pair struct {
	broker *brokertest.Broker
	gw     *gateway
	admin  *client
}

// startPair starts a broker (brokerExtra over brokerEnv) and a gateway in
// front of it (gwExtra over gatewayEnv).
func startPair(t *testing.T, brokerExtra, gwExtra map[string]string) *pair {
	t.Helper()
	b := startBroker(t, brokerExtra)
	g := startGateway(t, []string{b.URL()}, gwExtra)
	return &pair{broker: b, gw: g, admin: g.as(t, "ops", "admin")}
}

// gateway is one queen-gateway process (brokertest runs any binary that
// serves GET /health).
type gateway struct {
	*brokertest.Broker
}

// ---------------------------------------------------------------------------
// Tokens and clients

// token mints an HS256 token for tenant with role, valid for an hour.
func token(t *testing.T, tenant, role string) string {
	t.Helper()
	claims := jwt.MapClaims{"sub": "e2e", "exp": time.Now().Add(time.Hour).Unix()}
	if tenant != "" {
		claims["tenant"] = tenant
	}
	if role != "" {
		claims["role"] = role
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// client speaks to one base URL with one bearer token (none when empty)
// and any extra headers.
type client struct {
	base   string
	bearer string
	header http.Header
	hc     *http.Client
}

func newHTTPClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
}

// as is a client of the gateway with a token of tenant and role.
func (g *gateway) as(t *testing.T, tenant, role string) *client {
	t.Helper()
	return &client{base: g.URL(), bearer: token(t, tenant, role), hc: newHTTPClient()}
}

// anonymous is a client of the gateway without a token.
func (g *gateway) anonymous() *client {
	return &client{base: g.URL(), hc: newHTTPClient()}
}

// asGatewayOf is a client that speaks to broker b directly as a gateway
// would, for tenant with level: what the test reads behind the gateway's
// back.
func asGatewayOf(b *brokertest.Broker, tenant, level string) *client {
	h := http.Header{}
	h.Set("X-Queen-Gateway-Secret", gwSecret)
	h.Set("X-Queen-Tenant", tenant)
	h.Set("X-Queen-Access", level)
	return &client{base: b.URL(), header: h, hc: newHTTPClient()}
}

// operatorOf is a client of broker b with its operator token.
func operatorOf(b *brokertest.Broker) *client {
	return &client{base: b.URL(), bearer: operatorToken, hc: newHTTPClient()}
}

// reply is one answer (brokertest.Reply), with the suite's readers.
type reply brokertest.Reply

// code is the answer's error code ("" when it has none).
func (r reply) code() string { return brokertest.Reply(r).Code() }

// message is the answer's error message.
func (r reply) message() string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Error
}

func (r reply) String() string { return brokertest.Reply(r).String() }

// retryAfter is the Retry-After header as seconds, -1 when absent or not a
// number.
func (r reply) retryAfter() int {
	v := r.Header.Get("Retry-After")
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// try sends one request; the error is the transport's.
func (c *client) try(ctx context.Context, method, path, body string) (reply, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return reply{}, err
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	r, err := brokertest.Do(c.hc, req)
	return reply(r), err
}

// do sends one request and fails t on a transport error.
func (c *client) do(t *testing.T, method, path, body string) reply {
	t.Helper()
	r, err := c.try(context.Background(), method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// want fails t unless r has status and, when code is not "", that code.
func want(t *testing.T, what string, r reply, status int, code string) {
	t.Helper()
	if r.Status != status || (code != "" && r.code() != code) {
		t.Fatalf("%s: got %s, want %d %s", what, r, status, code)
	}
}

// wantRetryAfter fails t unless r carries a Retry-After in [lo, hi].
func wantRetryAfter(t *testing.T, what string, r reply, lo, hi int) {
	t.Helper()
	if n := r.retryAfter(); n < lo || n > hi {
		t.Fatalf("%s: Retry-After %q, want %d..%d", what, r.Header.Get("Retry-After"), lo, hi)
	}
}

// ---------------------------------------------------------------------------
// The family

// pushBody is a push of n numbered items to queue.
func pushBody(queue string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"queue":%q,"messages":[`, queue)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"payload":{"n":%d}}`, i)
	}
	b.WriteString("]}")
	return b.String()
}

func (c *client) push(t *testing.T, queue string, n int) reply {
	t.Helper()
	return c.do(t, "POST", "/api/v1/ephemeral/push", pushBody(queue, n))
}

// mustPush pushes n items and fails t unless the answer is 201.
func (c *client) mustPush(t *testing.T, queue string, n int) {
	t.Helper()
	want(t, "push "+queue, c.push(t, queue, n), 201, "")
}

// popped is a pop's answer.
type popped struct {
	Queue    string `json:"queue"`
	Messages []struct {
		ID      string          `json:"id"`
		Payload json.RawMessage `json:"payload"`
	} `json:"messages"`
}

func (c *client) pop(t *testing.T, query string) reply {
	t.Helper()
	return c.do(t, "GET", "/api/v1/ephemeral/pop?"+query, "")
}

// mustPop pops with query and fails t unless the answer is 200; it answers
// the messages.
func (c *client) mustPop(t *testing.T, query string) popped {
	t.Helper()
	r := c.pop(t, query)
	want(t, "pop "+query, r, 200, "")
	var p popped
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("pop %s: %v: %s", query, err, r.Body)
	}
	return p
}

// queueNames lists the client's tenant's queues.
func (c *client) queueNames(t *testing.T) []string {
	t.Helper()
	r := c.do(t, "GET", "/api/v1/ephemeral/queues", "")
	want(t, "list queues", r, 200, "")
	var l struct {
		Queues []struct {
			Queue string `json:"queue"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatalf("list queues: %v: %s", err, r.Body)
	}
	var out []string
	for _, q := range l.Queues {
		out = append(out, q.Queue)
	}
	return out
}

// ---------------------------------------------------------------------------
// The admin routes

// planJSON is a plan body.
func planJSON(ephemeral bool, perPeriod, periodSeconds, perSecond, slots int) string {
	return fmt.Sprintf(`{"features":{"ephemeral":%t},"messagesPerPeriod":%d,"periodSeconds":%d,"messagesPerSecond":%d,"parkedSlots":%d}`,
		ephemeral, perPeriod, periodSeconds, perSecond, slots)
}

func (c *client) putPlan(t *testing.T, name, body string) {
	t.Helper()
	want(t, "PUT plan "+name, c.do(t, "PUT", "/api/v1/gateway/plans/"+url.PathEscape(name), body), 200, "")
}

func (c *client) putTenant(t *testing.T, tenant, plan string) {
	t.Helper()
	want(t, "PUT tenant "+tenant, c.do(t, "PUT", "/api/v1/gateway/tenants/"+url.PathEscape(tenant), `{"plan":`+strconv.Quote(plan)+`}`), 200, "")
}

// onPlan puts plan (body) and tenant on it.
func (c *client) onPlan(t *testing.T, tenant, plan, body string) {
	t.Helper()
	c.putPlan(t, plan, body)
	c.putTenant(t, tenant, plan)
}

// usage is GET /api/v1/gateway/usage/:tenant.
type usage struct {
	Tenant     string `json:"tenant"`
	Messages   int64  `json:"messages"`
	Deliveries int64  `json:"deliveries"`
	Parked     int64  `json:"parked"`
}

func (c *client) usage(t *testing.T, tenant string) usage {
	t.Helper()
	r := c.do(t, "GET", "/api/v1/gateway/usage/"+url.PathEscape(tenant), "")
	want(t, "usage "+tenant, r, 200, "")
	var u usage
	if err := json.Unmarshal(r.Body, &u); err != nil {
		t.Fatalf("usage %s: %v: %s", tenant, err, r.Body)
	}
	return u
}

// wantUsage fails t unless the tenant's usage is exactly m messages and d
// deliveries with nothing parked.
func (c *client) wantUsage(t *testing.T, tenant string, m, d int64) {
	t.Helper()
	if u := c.usage(t, tenant); u != (usage{tenant, m, d, 0}) {
		t.Fatalf("usage of %s: %+v, want messages %d deliveries %d parked 0", tenant, u, m, d)
	}
}

// ---------------------------------------------------------------------------
// Waiting for a state

// waitParked waits until the tenant's usage shows n parked pops.
func (c *client) waitParked(t *testing.T, tenant string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := c.usage(t, tenant)
		if u.Parked == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %s never had %d parked pops (last %+v)", tenant, n, u)
		}
		time.Sleep(10 * time.Millisecond) // the polling interval of eventually
	}
}

// brokerMetric reads one summed series of broker b's /metrics.
func brokerMetric(t *testing.T, b *brokertest.Broker, name, labelPart string) float64 {
	t.Helper()
	r := operatorOf(b).do(t, "GET", "/metrics", "")
	want(t, "broker /metrics", r, 200, "")
	return brokertest.Metric(string(r.Body), name, labelPart)
}

// ---------------------------------------------------------------------------
// PostgreSQL

// schemaURL makes a schema of its own for t (dropped when t ends) and
// returns the run's URL with that schema as search_path, where the
// gateway's catalog creates its tables; it skips t without PostgreSQL.
func schemaURL(t *testing.T) (string, string) {
	t.Helper()
	storetest.NeedPostgres(t, pg)
	schema := pg.FreshSchema(t)
	if err := pg.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), schema
}
