package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	sdk "github.com/queenmq/ephemeral/client"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// Client links at the gateway (docs/gateway.md, "Client links"): the
// upgrade, every gate per frame, metering, the parked-pop slots, a JWT's
// end, and the Go SDK on links through the gateway.

// gwMetric reads one summed series of the gateway's /metrics (the
// operator's, over HTTP).
func (p *pair) gwMetric(t *testing.T, name string) float64 {
	t.Helper()
	r := p.admin.do(t, "GET", "/metrics", "")
	want(t, "gateway /metrics", r, 200, "")
	return brokertest.Metric(string(r.Body), name, "")
}

// linkReply fails t unless e is an answer with status and, when code is not
// "", that code.
func wantLink(t *testing.T, what string, e linkEnd, status int, code string) reply {
	t.Helper()
	if e.refuse != 0 {
		t.Fatalf("%s: refused with reason %d, want %d %s", what, e.refuse, status, code)
	}
	want(t, what, e.answer, status, code)
	return e.answer
}

// wantAnswer fails t unless e is an answer.
func wantAnswer(t *testing.T, what string, e linkEnd) linkEnd {
	t.Helper()
	if e.refuse != 0 {
		t.Fatalf("%s: refused with reason %d, want an answer", what, e.refuse)
	}
	return e
}

// TestClientLinkUpgrade: the upgrade's answers (101, 426 naming the
// version spoken, 401 without a credential or with a bad one) and a ping;
// the link is counted in queen_gateway_client_links, not in
// queen_gateway_clients.
func TestClientLinkUpgrade(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	tok := token(t, "acme", "read-write")

	for _, up := range []string{"", "queen-link/9", "websocket"} {
		resp, _ := upgradeRaw(t, p.gw.URL(), up, tok)
		r := replyOf(t, resp)
		want(t, "upgrade "+strconv.Quote(up), r, 426, "ephemeral_bad_request")
		if got := r.Header.Get("Upgrade"); got != "queen-link/1" {
			t.Fatalf("upgrade %q refused with Upgrade %q, want queen-link/1", up, got)
		}
	}
	for _, bearer := range []string{"", "not-a-token"} {
		resp, _ := upgradeRaw(t, p.gw.URL(), "queen-link/1", bearer)
		want(t, "upgrade with bearer "+strconv.Quote(bearer), replyOf(t, resp), 401, "unauthorized")
	}

	before := p.gwMetric(t, "queen_gateway_clients")
	resp, l := upgradeRaw(t, p.gw.URL(), "queen-link/2, queen-link/1", tok)
	if resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "queen-link/1" || resp.Header.Get("Connection") != "Upgrade" {
		t.Fatalf("upgrade: %d %v, want 101 with Upgrade: queen-link/1", resp.StatusCode, resp.Header)
	}
	l.frame(frPing, 0, nil)
	if typ, _, _, err := l.readFrame(10 * time.Second); err != nil || typ != frPong {
		t.Fatalf("ping: frame %d, %v; want a pong", typ, err)
	}
	if n := p.gwMetric(t, "queen_gateway_client_links"); n != 1 {
		t.Fatalf("queen_gateway_client_links %v, want 1", n)
	}
	if n := p.gwMetric(t, "queen_gateway_clients"); n != before {
		t.Fatalf("queen_gateway_clients %v with the link open, %v before: a link is not a client connection", n, before)
	}
	want(t, "push on the link", l.call("POST", "/api/v1/ephemeral/push", pushBody("q", 2)), 201, "")
	l.nc.Close()
	brokertest.Eventually(t, 10*time.Second, "the closed link is still counted", func() bool { return p.gwMetric(t, "queen_gateway_client_links") == 0 })
}

// replyOf reads a refused upgrade's answer.
func replyOf(t *testing.T, resp *http.Response) reply {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// TestClientLinkDifferential: the same requests over HTTP through the
// gateway and over a raw client link answer the same status, code and
// body, byte for byte: the gateway's own refusals (route_blocked,
// feature_gated, forbidden) and the broker's answers and refusals.
func TestClientLinkDifferential(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	p.admin.onPlan(t, "free-co", "free", planJSON(false, 0, 0, 0, 0))
	rw := p.gw.as(t, "acme", "read-write")
	rw.mustPush(t, "d", 2)

	type req struct{ method, target, body string }
	cases := []struct {
		who   *client
		reqs  []req
		exact bool // the body is compared byte for byte
	}{
		{rw, []req{
			{"GET", "/api/v1/ephemeral/nope", ""},
			{"POST", "/api/v1/ephemeral/pop", "{}"},
			{"GET", "/api/v1/system/cell", ""},
			{"GET", "/api/v1/system/gateway-link", ""},
			{"POST", "/api/v1/ephemeral/push", `{"queue":"m","messages":[{"payload":1}`},
			{"POST", "/api/v1/ephemeral/push", `not json`},
			{"POST", "/api/v1/ephemeral/push", `{"queue":"","messages":[{"payload":1}]}`},
			{"GET", "/api/v1/ephemeral/pop?queue=d&batch=0", ""},
			{"GET", "/api/v1/ephemeral/pop?queue=empty", ""},
			{"POST", "/api/v1/ephemeral/ack", `{"queue":"d","acks":[{"id":"nope"}]}`},
			{"POST", "/api/v1/ephemeral/configure", `{"queue":"cfg","maxDepth":-1}`},
			{"POST", "/api/v1/ephemeral/configure", `{"queue":"cfg"}`},
			{"GET", "/api/v1/ephemeral/queues/d/depth", ""},
			{"GET", "/api/v1/ephemeral/queues/nope/depth", ""},
			{"GET", "/api/v1/ephemeral/queues", ""},
			{"POST", "/api/v1/ephemeral/reset", `{"queue":"nope"}`},
			{"DELETE", "/api/v1/ephemeral/queue/nope", ""},
		}, true},
		{p.gw.as(t, "acme", "read-only"), []req{
			{"POST", "/api/v1/ephemeral/push", pushBody("d", 1)},
			{"GET", "/api/v1/ephemeral/pop?queue=d", ""},
			{"GET", "/api/v1/ephemeral/queues/d/depth", ""},
		}, true},
		{p.gw.as(t, "free-co", "read-write"), []req{
			{"POST", "/api/v1/ephemeral/push", pushBody("d", 1)},
			{"GET", "/api/v1/ephemeral/queues", ""},
		}, true},
	}
	for _, c := range cases {
		l := dialLink(t, p.gw.URL(), c.who.bearer)
		for _, r := range c.reqs {
			what := r.method + " " + r.target
			overHTTP := c.who.do(t, r.method, r.target, r.body)
			end := wantAnswer(t, what, l.await(l.send(r.method, r.target, r.body), nil))
			onLink := end.answer
			// Framed by its length, as docs/link.md says an answer is (a
			// listing over HTTP comes chunked from the broker).
			head, _, _ := strings.Cut(string(end.raw), "\r\n\r\n")
			if !strings.Contains(head, "\r\nContent-Length: ") || strings.Contains(strings.ToLower(head), "transfer-encoding") {
				t.Fatalf("%s: the link's answer is not framed by a Content-Length: %q", what, head)
			}
			if overHTTP.Status != onLink.Status || overHTTP.code() != onLink.code() || string(overHTTP.Body) != string(onLink.Body) {
				t.Fatalf("%s: over HTTP %s, on the link %s", what, overHTTP, onLink)
			}
			if overHTTP.Header.Get("Retry-After") != onLink.Header.Get("Retry-After") {
				t.Fatalf("%s: Retry-After over HTTP %q, on the link %q", what, overHTTP.Header.Get("Retry-After"), onLink.Header.Get("Retry-After"))
			}
			if onLink.Header.Get("Connection") != "" {
				t.Fatalf("%s: the link's answer carries Connection: %q", what, onLink.Header.Get("Connection"))
			}
		}
	}
	// A level too low and a gated plan are the gateway's own refusals on
	// a link too: the broker never sees those requests.
	pushes := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="push"`)
	pops := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="pop"`)
	ro := dialLink(t, p.gw.URL(), token(t, "acme", "read-only"))
	want(t, "a read-only push", ro.call("POST", "/api/v1/ephemeral/push", pushBody("d", 1)), 403, "forbidden")
	want(t, "a read-only pop", ro.call("GET", "/api/v1/ephemeral/pop?queue=d", ""), 403, "forbidden")
	free := dialLink(t, p.gw.URL(), token(t, "free-co", "read-write"))
	want(t, "a gated push", free.call("POST", "/api/v1/ephemeral/push", pushBody("d", 1)), 403, "feature_gated")
	if n := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="push"`); n != pushes {
		t.Fatalf("the broker served %v pushes the gateway should have refused", n-pushes)
	}
	if n := brokerMetric(t, p.broker, "queen_ephemeral_request_duration_seconds_count", `route="pop"`); n != pops {
		t.Fatalf("the broker served %v pops the gateway should have refused", n-pops)
	}
	// The usage counts the one push of the setup only.
	p.admin.wantUsage(t, "acme", 2, 0)
	p.admin.wantUsage(t, "free-co", 0, 0)
}

// TestClientLinkMetering: on a link, pushes meter their items when
// accepted and pops their deliveries; refused requests, acks and status
// reads meter nothing; a push whose stream the client cancelled at once is
// still metered (the broker served it) and its answer never comes. Then
// the allowance and the rate per frame, with their Retry-After.
func TestClientLinkMetering(t *testing.T) {
	t.Parallel()
	avoidPeriodEnd(3600)
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 3600, 0, 0)) // the period from the start: counts move to a new period with it
	l := dialLink(t, p.gw.URL(), token(t, "acme", "read-write"))

	want(t, "push 3", l.call("POST", "/api/v1/ephemeral/push", pushBody("m", 3)), 201, "")
	want(t, "push 2", l.call("POST", "/api/v1/ephemeral/push", pushBody("m", 2)), 201, "")
	want(t, "bad push", l.call("POST", "/api/v1/ephemeral/push", `{"queue":"m","messages":[{"payload":1}`), 400, "")
	p.admin.wantUsage(t, "acme", 5, 0)
	r := l.call("GET", "/api/v1/ephemeral/pop?queue=m&batch=10", "")
	want(t, "pop", r, 200, "")
	var got popped
	if err := json.Unmarshal(r.Body, &got); err != nil || len(got.Messages) != 5 {
		t.Fatalf("pop: %v, %d messages, want 5", err, len(got.Messages))
	}
	want(t, "ack", l.call("POST", "/api/v1/ephemeral/ack", `{"queue":"m","acks":[{"id":"`+got.Messages[0].ID+`"}]}`), 200, "")
	want(t, "depth", l.call("GET", "/api/v1/ephemeral/queues/m/depth", ""), 200, "")
	want(t, "empty pop", l.call("GET", "/api/v1/ephemeral/pop?queue=m&batch=10&wait=true&timeout=50", ""), 200, "")
	p.admin.wantUsage(t, "acme", 5, 5)

	// A waiting pop answered by a push over HTTP.
	pop := l.send("GET", "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=20000", "")
	p.admin.waitParked(t, "acme", 1)
	p.gw.as(t, "acme", "read-write").mustPush(t, "w", 1)
	wantLink(t, "the waiting pop", l.await(pop, nil), 200, "")
	p.admin.wantUsage(t, "acme", 6, 6)

	// Cancelled at once: served and metered, never answered.
	l.sendCancelled("POST", "/api/v1/ephemeral/push", pushBody("c", 4))
	brokertest.Eventually(t, 10*time.Second, "the cancelled push was never metered", func() bool { return p.admin.usage(t, "acme").Messages == 10 })
	l.frame(frPing, 0, nil)
	if typ, sid, _, err := l.readFrame(10 * time.Second); err != nil || typ != frPong {
		t.Fatalf("after the cancelled push: frame %d of stream %d (%v), want only the pong", typ, sid, err)
	}
	p.admin.wantUsage(t, "acme", 10, 6)

	// The allowance: 20 a period (messages and deliveries), 16 used. A
	// push of 5 is refused whole, a push of 4 is taken, then a pop is
	// refused.
	p.admin.putPlan(t, "pro", planJSON(true, 20, 3600, 0, 0)) // applied at once by the gateway that took it
	e := l.await(l.send("POST", "/api/v1/ephemeral/push", pushBody("a", 5)), nil)
	wantLink(t, "a push over the allowance", e, 429, "message_allowance_exceeded")
	wantRetryAfter(t, "allowance", e.answer, 1, 3600)
	want(t, "a push within the allowance", l.call("POST", "/api/v1/ephemeral/push", pushBody("a", 4)), 201, "")
	e = l.await(l.send("GET", "/api/v1/ephemeral/pop?queue=zz", ""), nil)
	wantLink(t, "a pop with the allowance spent", e, 429, "message_allowance_exceeded")
	p.admin.wantUsage(t, "acme", 14, 6)

	// The rate: 1 a second, on another tenant: a batch of 20 goes into
	// debt, then pushes and pops are refused with a Retry-After covering
	// it.
	p.admin.onPlan(t, "slow-co", "slow", planJSON(true, 0, 0, 1, 0))
	s := dialLink(t, p.gw.URL(), token(t, "slow-co", "read-write"))
	want(t, "push 20", s.call("POST", "/api/v1/ephemeral/push", pushBody("r", 20)), 201, "")
	e = s.await(s.send("POST", "/api/v1/ephemeral/push", pushBody("r", 1)), nil)
	wantLink(t, "a push in debt", e, 429, "rate_limited")
	wantRetryAfter(t, "push in debt", e.answer, 5, 20)
	e = s.await(s.send("GET", "/api/v1/ephemeral/pop?queue=r", ""), nil)
	wantLink(t, "a pop in debt", e, 429, "rate_limited")
	wantRetryAfter(t, "pop in debt", e.answer, 5, 20)
	p.admin.wantUsage(t, "slow-co", 20, 0)
}

// TestClientLinkSlots: a waiting pop on a link holds a parked-pop slot
// (parkedSlots 1: a second waiting pop is 429 parked_slots_exhausted, one
// that does not wait passes) and gives it back when answered, on its
// cancel frame and when the link closes; on the cancel and the close the
// broker lets the pop go at once (its count of parked pops falls well
// before the pop's 20 s), and a message pushed afterwards goes to the next
// pop. Over the gateway's link to the broker, and over HTTP
// (QUEEN_GATEWAY_LINK=false: each waiting pop on a broker connection of its
// own, closed to let it go).
func TestClientLinkSlots(t *testing.T) {
	t.Parallel()
	for _, brokerLink := range []bool{true, false} {
		t.Run("broker link "+strconv.FormatBool(brokerLink), func(t *testing.T) {
			t.Parallel()
			p := startPair(t, nil, map[string]string{"QUEEN_GATEWAY_LINK": strconv.FormatBool(brokerLink)})
			p.admin.onPlan(t, "acme", "one-slot", planJSON(true, 0, 0, 0, 1))
			warm := int64(0)
			if brokerLink {
				openLinks(t, p)
				warm = warmPushes
			}
			hc := p.gw.as(t, "acme", "read-write")
			l := dialLink(t, p.gw.URL(), token(t, "acme", "read-write"))

			// Answered.
			first := l.send("GET", "/api/v1/ephemeral/pop?queue=w&wait=true&timeout=20000&autoAck=true", "")
			p.admin.waitParked(t, "acme", 1)
			wantLink(t, "a second waiting pop", l.await(l.send("GET", "/api/v1/ephemeral/pop?queue=w2&wait=true&timeout=20000", ""), nil), 429, "parked_slots_exhausted")
			wantLink(t, "a pop that does not wait", l.await(l.send("GET", "/api/v1/ephemeral/pop?queue=w2", ""), nil), 200, "")
			hc.mustPush(t, "w", 1)
			r := wantLink(t, "the waiting pop", l.await(first, nil), 200, "")
			var got popped
			if err := json.Unmarshal(r.Body, &got); err != nil || len(got.Messages) != 1 {
				t.Fatalf("the waiting pop: %v, %d messages, want 1", err, len(got.Messages))
			}
			p.admin.waitParked(t, "acme", 0)
			p.admin.wantUsage(t, "acme", warm+1, 1)

			// Cancelled.
			brokertest.Eventually(t, 10*time.Second, "the broker still has parked pops", func() bool { return p.brokerParked(t) == 0 })
			gone := l.send("GET", "/api/v1/ephemeral/pop?queue=c&wait=true&timeout=20000&autoAck=true", "")
			p.admin.waitParked(t, "acme", 1)
			brokertest.Eventually(t, 10*time.Second, "the waiting pop never parked at the broker", func() bool { return p.brokerParked(t) == 1 })
			l.frame(frCancel, gone, nil)
			p.admin.waitParked(t, "acme", 0)
			brokertest.Eventually(t, 5*time.Second, "the cancelled pop is still parked at the broker", func() bool { return p.brokerParked(t) == 0 })
			hc.mustPush(t, "c", 1)
			r = l.call("GET", "/api/v1/ephemeral/pop?queue=c&autoAck=true", "")
			if err := json.Unmarshal(r.Body, &got); err != nil || len(got.Messages) != 1 {
				t.Fatalf("after the cancel, the message pushed was not popped: %s", r)
			}
			p.admin.wantUsage(t, "acme", warm+2, 2)

			// The link closes.
			l2 := dialLink(t, p.gw.URL(), token(t, "acme", "read-write"))
			l2.send("GET", "/api/v1/ephemeral/pop?queue=x&wait=true&timeout=20000&autoAck=true", "")
			p.admin.waitParked(t, "acme", 1)
			brokertest.Eventually(t, 10*time.Second, "the waiting pop never parked at the broker", func() bool { return p.brokerParked(t) == 1 })
			l2.nc.Close()
			p.admin.waitParked(t, "acme", 0)
			brokertest.Eventually(t, 5*time.Second, "the closed link's pop is still parked at the broker", func() bool { return p.brokerParked(t) == 0 })
			hc.mustPush(t, "x", 1)
			if m := hc.mustPop(t, "queue=x&autoAck=true"); len(m.Messages) != 1 {
				t.Fatalf("after the link closed, the message pushed was not popped: got %d", len(m.Messages))
			}
			// The slot serves the next waiting pop.
			next := l.send("GET", "/api/v1/ephemeral/pop?queue=x&wait=true&timeout=20000&autoAck=true", "")
			p.admin.waitParked(t, "acme", 1)
			hc.mustPush(t, "x", 1)
			wantLink(t, "the next waiting pop", l.await(next, nil), 200, "")
			p.admin.waitParked(t, "acme", 0)
			p.admin.wantUsage(t, "acme", warm+4, 4)
		})
	}
}

// TestClientLinkTokenExpiry: a link opened with a JWT that expires is
// closed when it does (once what it carries has ended: a pop parked
// before exp is served, a frame after exp is 401); one given a fresh token of its tenant in a token
// frame before then stays open past the first token's exp. A token of
// another tenant is 403 forbidden on its stream and changes nothing.
func TestClientLinkTokenExpiry(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	exp := time.Now().Add(3 * time.Second)
	short := mint(t, jwt.MapClaims{"tenant": "acme", "role": "read-write", "exp": exp.Unix()})

	ends := dialLink(t, p.gw.URL(), short)
	kept := dialLink(t, p.gw.URL(), short)
	parked := dialLink(t, p.gw.URL(), short)
	want(t, "push", ends.call("POST", "/api/v1/ephemeral/push", pushBody("q", 1)), 201, "")
	pop := parked.send("GET", "/api/v1/ephemeral/pop?queue=late&wait=true&timeout=30000&autoAck=true", "")

	kept.frame(frToken, 0, []byte("Bearer "+token(t, "other", "read-write")))
	wantLink(t, "a token of another tenant", kept.await(0, nil), 403, "forbidden")
	kept.frame(frToken, 1, []byte(token(t, "acme", "read-only")))
	wantLink(t, "a fresh token", kept.await(1, nil), 200, "")
	kept.next = 2

	if !ends.closed(time.Until(exp) + 5*time.Second) {
		t.Fatal("the link was not closed at its token's exp")
	}
	time.Sleep(time.Until(exp.Add(1500 * time.Millisecond))) // past the first token's exp, with the tick's second
	// The link that carries a pop parked before exp: a new frame is 401, as
	// over HTTP; the pop is still served, and then the link closes.
	wantLink(t, "a push after exp", parked.await(parked.send("POST", "/api/v1/ephemeral/push", pushBody("q", 1)), nil), 401, "unauthorized")
	pusher := dialLink(t, p.gw.URL(), token(t, "acme", "read-write"))
	want(t, "push to the parked pop", pusher.call("POST", "/api/v1/ephemeral/push", pushBody("late", 1)), 201, "")
	wantLink(t, "the pop parked before exp", parked.await(pop, nil), 200, "")
	if !parked.closed(5 * time.Second) {
		t.Fatal("the expired link was not closed once its pop was answered")
	}
	// Open, with the new token's level: read-only.
	wantLink(t, "a push with the fresh read-only token", kept.await(kept.send("POST", "/api/v1/ephemeral/push", pushBody("q", 1)), nil), 403, "forbidden")
	wantLink(t, "depth", kept.await(kept.send("GET", "/api/v1/ephemeral/queues/q/depth", ""), nil), 200, "")
}

// mint signs claims with the end clients' key.
func mint(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestClientLinkSDK: the Go SDK pointed at the gateway uses links: eight
// requesters and a responder doing request/reply hold no HTTP connection
// to the gateway (queen_gateway_clients does not move past the operator's
// own), at most the SDK's links; every request is answered, and the usage
// is exact (each request and its reply: two messages pushed, two
// delivered).
func TestClientLinkSDK(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	c, err := sdk.New(p.gw.URL(), sdk.WithToken(token(t, "acme", "read-write")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- c.Serve(serveCtx, "svc", sdk.ServeOptions{Wait: time.Second}, func(_ context.Context, m sdk.Message) (any, error) {
			env, err := sdk.ParseRequest(m)
			if err != nil {
				return nil, err
			}
			return env.Payload, nil
		})
	}()
	before := p.gwMetric(t, "queen_gateway_clients")
	const requesters, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, requesters)
	for i := range requesters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				n := fmt.Sprintf(`{"n":"%d-%d"}`, i, j)
				m, err := c.Request(ctx, "svc", json.RawMessage(n), sdk.RequestOptions{Timeout: 20 * time.Second})
				if err != nil {
					errs <- err
					return
				}
				if string(m.Payload) != n {
					errs <- fmt.Errorf("request %s answered %s", n, m.Payload)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := p.gwMetric(t, "queen_gateway_clients"); n > before {
		t.Fatalf("queen_gateway_clients %v under load, %v before: the SDK went over HTTP", n, before)
	}
	if n := p.gwMetric(t, "queen_gateway_client_links"); n < 1 || n > 2 {
		t.Fatalf("queen_gateway_client_links %v, want 1 or 2 (the SDK's links to one URL)", n)
	}
	stop()
	<-served
	p.admin.waitParked(t, "acme", 0)
	const total = requesters * each
	p.admin.wantUsage(t, "acme", 2*total, 2*total)
}

// TestClientLinkLongListing: a listing of more queues than the broker
// answers whole comes chunked over HTTP (the gateway sends a listing over
// HTTP); on a link it is given whole, framed by its Content-Length, with
// every queue.
func TestClientLinkLongListing(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	l := dialLink(t, p.gw.URL(), token(t, "acme", "read-write"))
	const n = 300 // the broker answers up to 256 queues whole
	got := map[uint64]linkEnd{}
	var ids []uint64
	for i := range n {
		ids = append(ids, l.send("POST", "/api/v1/ephemeral/push", pushBody(fmt.Sprintf("q%03d", i), 1)))
	}
	for _, id := range ids {
		wantLink(t, "push", l.await(id, got), 201, "")
	}
	end := wantAnswer(t, "the listing", l.await(l.send("GET", "/api/v1/ephemeral/queues", ""), nil))
	head, _, _ := strings.Cut(string(end.raw), "\r\n\r\n")
	if !strings.Contains(head, "\r\nContent-Length: ") || strings.Contains(strings.ToLower(head), "transfer-encoding") {
		t.Fatalf("the long listing on the link is not framed by a Content-Length: %q", head)
	}
	var list struct {
		Queues []struct {
			Queue string `json:"queue"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(end.answer.Body, &list); err != nil || len(list.Queues) != n {
		t.Fatalf("the listing on the link: %v, %d queues, want %d", err, len(list.Queues), n)
	}
	if names := p.gw.as(t, "acme", "read-write").queueNames(t); len(names) != n {
		t.Fatalf("the listing over HTTP: %d queues, want %d", len(names), n)
	}
}

// TestClientLinkManyWaitingPops: 10,000 waiting pops on one client link
// (unlimited slots), sent in one write: every one holds a slot and parks
// at the broker; the link's close lets every one go at the gateway and at
// the broker, and a message pushed after goes to the next pop.
func TestClientLinkManyWaitingPops(t *testing.T) {
	t.Parallel()
	const n = 10000
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	openLinks(t, p)
	l := dialLink(t, p.gw.URL(), token(t, "acme", "read-write"))
	var frames []byte
	for i := range n {
		p := requestPayload("GET", "/api/v1/ephemeral/pop?queue=many&wait=true&timeout=60000", "")
		h := make([]byte, 13)
		binary.BigEndian.PutUint32(h[0:4], uint32(len(p)))
		h[4] = frRequest
		binary.BigEndian.PutUint64(h[5:13], uint64(i))
		frames = append(append(frames, h...), p...)
	}
	if _, err := l.nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 30*time.Second, "the gateway never held 10,000 slots", func() bool { return p.admin.usage(t, "acme").Parked == n })
	brokertest.Eventually(t, 30*time.Second, "the broker never had 10,000 parked pops", func() bool { return p.brokerParked(t) == n })
	if m := p.gwMetric(t, "queen_gateway_client_links"); m != 1 {
		t.Fatalf("queen_gateway_client_links %v, want 1", m)
	}
	l.nc.Close()
	p.admin.waitParked(t, "acme", 0)
	brokertest.Eventually(t, 30*time.Second, "the closed link's pops are still parked at the broker", func() bool { return p.brokerParked(t) == 0 })
	c := p.gw.as(t, "acme", "read-write")
	c.mustPush(t, "many", 1)
	if m := c.mustPop(t, "queue=many&autoAck=true"); len(m.Messages) != 1 {
		t.Fatalf("after the link closed the message pushed was not popped: got %d", len(m.Messages))
	}
	p.admin.wantUsage(t, "acme", warmPushes+1, 1)
}

// TestClientLinkKillSwitch: the broker's kill switch answers the pops
// parked on a client link (through the gateway's link to the broker) with
// the empty batch (routes.md), and their slots come back; while it is set
// every frame is refused 503 ephemeral_disabled with its Retry-After (a
// waiting pop takes no slot), and once it is lifted the same link serves.
func TestClientLinkKillSwitch(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	openLinks(t, p)
	l := dialLink(t, p.gw.URL(), token(t, "acme", "read-write"))
	var ids []uint64
	for i := range 3 {
		ids = append(ids, l.send("GET", fmt.Sprintf("/api/v1/ephemeral/pop?queue=k%d&wait=true&timeout=30000", i), ""))
	}
	p.admin.waitParked(t, "acme", 3)
	brokertest.Eventually(t, 10*time.Second, "the pops never parked at the broker", func() bool { return p.brokerParked(t) == 3 })
	op := operatorOf(p.broker)
	want(t, "kill switch on", op.do(t, "POST", "/api/v1/system/ephemeral", `{"enabled":false,"retryAfterSeconds":7}`), 200, "")
	got := map[uint64]linkEnd{}
	for _, id := range ids {
		r := wantLink(t, "a parked pop at the kill switch", l.await(id, got), 200, "")
		var m popped
		if err := json.Unmarshal(r.Body, &m); err != nil || len(m.Messages) != 0 {
			t.Fatalf("a parked pop at the kill switch: %s, want the empty batch (routes.md)", r)
		}
	}
	p.admin.waitParked(t, "acme", 0)
	brokertest.Eventually(t, 10*time.Second, "the broker still has parked pops", func() bool { return p.brokerParked(t) == 0 })
	e := l.await(l.send("POST", "/api/v1/ephemeral/push", pushBody("k0", 1)), nil)
	r := wantLink(t, "a push while disabled", e, 503, "ephemeral_disabled")
	wantRetryAfter(t, "a push while disabled", r, 7, 7)
	wantLink(t, "a waiting pop while disabled", l.await(l.send("GET", "/api/v1/ephemeral/pop?queue=k1&wait=true&timeout=30000", ""), nil), 503, "ephemeral_disabled")
	p.admin.waitParked(t, "acme", 0)
	want(t, "kill switch off", op.do(t, "POST", "/api/v1/system/ephemeral", `{"enabled":true}`), 200, "")
	want(t, "a push once enabled", l.call("POST", "/api/v1/ephemeral/push", pushBody("k0", 1)), 201, "")
	p.admin.wantUsage(t, "acme", warmPushes+1, 0)
}

// TestClientLinkCell: client links through a gateway in front of a cell of
// two: each frame goes to the member that owns its queue (docs/gateway.md,
// "Routing to owners"), so no member relays; push, pop and a waiting pop
// woken from another link work for queues of either owner from every link,
// and the metering equals what the members counted.
func TestClientLinkCell(t *testing.T) {
	t.Parallel()
	ms := startSteadyCell(t, 2)
	ids := []string{ms[0].id, ms[1].id}
	g := startGateway(t, []string{ms[0].URL(), ms[1].URL()}, nil)
	admin := g.as(t, "ops", "admin")
	admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	var msgs, delivs int64
	msgs += int64(warmCellLinks(t, g, ms)) // opens every loop's link to every member
	relayedBefore := perMember(t, ms, "queen_ephemeral_relayed_total", "")
	tok := token(t, "acme", "read-write")
	links := []*rawLink{dialLink(t, g.URL(), tok), dialLink(t, g.URL(), tok), dialLink(t, g.URL(), tok), dialLink(t, g.URL(), tok)}
	for _, owner := range ms {
		q := brokertest.QueueOwnedBy(t, ids, "acme", "lq", owner.id)
		for i, l := range links {
			want(t, "push", l.call("POST", "/api/v1/ephemeral/push", pushBody(q, 2)), 201, "")
			msgs += 2
			r := l.call("GET", "/api/v1/ephemeral/pop?queue="+q+"&batch=10&autoAck=true", "")
			var p popped
			if err := json.Unmarshal(r.Body, &p); err != nil || r.Status != 200 || len(p.Messages) != 2 {
				t.Fatalf("queue %s (owner %s), link %d: popped %s", q, owner.id, i, r)
			}
			delivs += 2
			// A waiting pop on this link, woken by a push on the next.
			waiting := l.send("GET", "/api/v1/ephemeral/pop?queue="+q+"&wait=true&timeout=20000&autoAck=true", "")
			admin.waitParked(t, "acme", 1)
			want(t, "push from another link", links[(i+1)%len(links)].call("POST", "/api/v1/ephemeral/push", pushBody(q, 1)), 201, "")
			msgs++
			r = wantLink(t, "the waiting pop", l.await(waiting, nil), 200, "")
			if err := json.Unmarshal(r.Body, &p); err != nil || len(p.Messages) != 1 {
				t.Fatalf("queue %s, link %d: the waiting pop got %s", q, i, r)
			}
			delivs++
			admin.waitParked(t, "acme", 0)
		}
	}
	admin.wantUsage(t, "acme", msgs, delivs)
	var pushed, delivered, relayed float64
	for i, m := range ms {
		pushed += brokerMetric(t, m.Broker, "queen_ephemeral_pushed_messages_total", `tenant="acme"`)
		delivered += brokerMetric(t, m.Broker, "queen_ephemeral_delivered_messages_total", `tenant="acme"`)
		relayed += brokerMetric(t, m.Broker, "queen_ephemeral_relayed_total", "") - relayedBefore[i]
	}
	if int64(pushed) != msgs || int64(delivered) != delivs {
		t.Fatalf("the members counted %v pushed and %v delivered; the gateway %d and %d", pushed, delivered, msgs, delivs)
	}
	if relayed != 0 {
		t.Fatalf("the members relayed %v requests: the gateway should have sent each to its owner", relayed)
	}
}

// TestClientLinkOwnConnectionsReused: a stream that goes over HTTP on a
// broker connection of its own (a configure, a status read) gives it back
// to the pool once answered: 30 of them one after the other dial at most
// one connection, not 30.
func TestClientLinkOwnConnectionsReused(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	l := dialLink(t, p.gw.URL(), token(t, "acme", "read-write"))
	want(t, "configure", l.call("POST", "/api/v1/ephemeral/configure", `{"queue":"c"}`), 201, "")
	dials := p.gwMetric(t, "queen_gateway_upstream_dials_total")
	for i := range 30 {
		if i%2 == 0 {
			want(t, "configure", l.call("POST", "/api/v1/ephemeral/configure", `{"queue":"c"}`), 201, "")
		} else {
			want(t, "depth", l.call("GET", "/api/v1/ephemeral/queues/c/depth", ""), 200, "")
		}
	}
	if n := p.gwMetric(t, "queen_gateway_upstream_dials_total") - dials; n > 1 {
		t.Fatalf("30 requests on connections of their own dialled %v connections, want at most 1", n)
	}
}

// TestClientLinkSDKTokenFunc: the Go SDK with a token function (tokens
// living 9 to 10 s: shorter ones leave little time between a link's
// renewal and its retirement on a loaded machine) through the gateway: its links take fresh tokens in
// token frames, so a pop parked before the first token's exp is answered,
// after two lifetimes, by a push on the same client, and pushes paced
// through both exps all succeed.
func TestClientLinkSDKTokenFunc(t *testing.T) {
	t.Parallel()
	p := startPair(t, nil, nil)
	p.admin.onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	var calls atomic.Int32
	var firstExp atomic.Int64
	fn := func(context.Context) (string, error) {
		exp := time.Now().Add(10 * time.Second).Truncate(time.Second)
		if calls.Add(1) == 1 {
			firstExp.Store(exp.UnixNano())
		}
		return mint(t, jwt.MapClaims{"tenant": "acme", "role": "read-write", "exp": exp.Unix()}), nil
	}
	c, err := sdk.New(p.gw.URL(), sdk.WithTokenFunc(fn))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Push(ctx, "warm", []any{0}, sdk.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	popped := make(chan *sdk.PopResult, 1)
	go func() {
		res, err := c.Pop(ctx, "parked", sdk.PopOptions{Wait: true, Timeout: 30 * time.Second, AutoAck: true})
		if err != nil {
			t.Error(err)
		}
		popped <- res
	}()
	p.admin.waitParked(t, "acme", 1)
	end := time.Unix(0, firstExp.Load()).Add(4 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		if _, err := c.Push(ctx, "steady", []any{i}, sdk.PushOptions{}); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		time.Sleep(50 * time.Millisecond) // the pace of the pushes, not a wait for a condition
	}
	if _, err := c.Push(ctx, "parked", []any{"late"}, sdk.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if res := <-popped; res == nil || len(res.Messages) != 1 || string(res.Messages[0].Payload) != `"late"` {
		t.Fatalf("the pop parked before the first exp: %+v, want the message pushed after the second", res)
	}
	if n := p.gwMetric(t, "queen_gateway_client_links"); n < 1 || n > 2 {
		t.Fatalf("queen_gateway_client_links %v, want 1 or 2 (the SDK's links to one URL)", n)
	}
	if n := calls.Load(); n < 2 || n > 6 {
		t.Fatalf("the token function was called %d times over two lifetimes, want once a lifetime or so", n)
	}
}
