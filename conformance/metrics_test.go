package conformance

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape reads GET /metrics (no identity needed) and returns every sample
// by its series, and the body.
func (b *broker) scrape(t testing.TB) (map[string]float64, string) {
	t.Helper()
	resp, err := b.httpClient().Get(b.url("/metrics"))
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: Content-Type %q", ct)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("GET /metrics: bad sample line %q", line)
		}
		if _, dup := out[line[:i]]; dup {
			t.Fatalf("GET /metrics: series %s twice", line[:i])
		}
		out[line[:i]] = v
	}
	return out, string(body)
}

// Metering and metrics: /metrics shows drops by cause, pushed
// messages and deliveries per tenant (a parked pop completed later
// included), refusals by code, parked pops, the footprint (payload bytes
// plus the documented charges, charges_test.go), queues by tier and
// request latency per route, with exact values.
func TestMetrics(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)

	b.configure(t, "feed", `{"maxLength":2,"policy":"dropOldest"}`)
	b.push(t, "feed", "", `1`, `2`, `3`) // one dropped for bounds
	b.push(t, "imp", "", `"x"`)
	got := b.pop(t, popq{"queue": "feed", "batch": "10"})
	if len(got.Messages) != 2 {
		t.Fatalf("pop feed: %d messages, want 2", len(got.Messages))
	}

	// A parked pop shows in the gauge, then meters its delivery when a
	// push completes it.
	// The footprint so far (docs/engine.md, "What the budgets count"):
	// feed's queue, partition and ring (the batch of 3 was appended, then
	// its oldest dropped), the queue-mode group, its cursor and a window of
	// the 2 leased messages; imp's queue, partition and ring; the payloads.
	feed := queueCharge("feed") + partitionCharge("Default") + ringCharge(3) +
		groupCharge("") + chargeCursor + windowCharge(2) + int64(len(`2`)+len(`3`))
	imp := queueCharge("imp") + partitionCharge("Default") + ringCharge(1) + int64(len(`"x"`))
	ch := b.asyncPop(popq{"queue": "parkq", "wait": "true", "timeout": "10000"})
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, _ := b.scrape(t)
		if m["queen_ephemeral_parked_pops"] == 1 {
			// The parked pop made parkq and its queue-mode group, and its
			// waiter is charged while it waits.
			want := feed + imp + queueCharge("parkq") + groupCharge("") + chargeParked
			if g := m[`queen_ephemeral_bytes{scope="cell"}`]; g != float64(want) {
				t.Errorf(`with a parked pop, queen_ephemeral_bytes{scope="cell"} = %v, want %d`, g, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parked pop never showed in queen_ephemeral_parked_pops")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.push(t, "parkq", "", `{"a":1}`)
	if r := waitPop(t, ch, 5*time.Second); len(r.resp.Messages) != 1 {
		t.Fatalf("parked pop: %d messages, want 1", len(r.resp.Messages))
	}

	// Refusals.
	b.do(t, "GET", "/nope", nil).wantErr(t, 404, "not_found")
	b.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":`).wantErr(t, 400, "ephemeral_bad_request")
	b.do(t, "POST", "/api/v1/ephemeral/push", `{"queue":"q","messages":[{"payload":1}],"extra":1}`).wantErr(t, 400, "ephemeral_bad_request")

	l := b.queues(t)
	var held int64
	for _, q := range l.Queues {
		held += q.Bytes
	}
	if want := int64(len(`2`) + len(`3`) + len(`"x"`) + len(`{"a":1}`)); held != want {
		t.Fatalf("the queues hold %d payload bytes, want %d: %+v", held, want, l)
	}
	// The footprint: payload bytes plus the charges. The answered pop gave
	// its waiter back; the push made parkq's partition and ring, and the
	// answer the group's cursor there and a window of one leased message.
	footprint := feed + imp + queueCharge("parkq") + groupCharge("") + partitionCharge("Default") +
		ringCharge(1) + chargeCursor + windowCharge(1) + int64(len(`{"a":1}`))

	m, body := b.scrape(t)
	want := map[string]float64{
		`queen_ephemeral_dropped_total{cause="bounds"}`:                           1,
		`queen_ephemeral_dropped_total{cause="ttl"}`:                              0,
		`queen_ephemeral_dropped_total{cause="retry"}`:                            0,
		`queen_ephemeral_pushed_messages_total{tenant="default"}`:                 5,
		`queen_ephemeral_delivered_messages_total{tenant="default"}`:              3,
		`queen_ephemeral_refusals_total{code="not_found"}`:                        1,
		`queen_ephemeral_refusals_total{code="ephemeral_bad_request"}`:            2,
		`queen_ephemeral_parked_pops`:                                             0,
		`queen_ephemeral_bytes{scope="cell"}`:                                     float64(footprint),
		`queen_ephemeral_tenant_bytes{tenant="default"}`:                          float64(footprint),
		`queen_ephemeral_queues{tier="declared"}`:                                 1,
		`queen_ephemeral_queues{tier="implicit"}`:                                 2,
		`queen_ephemeral_request_duration_seconds_count{route="push"}`:            5,
		`queen_ephemeral_request_duration_seconds_count{route="pop"}`:             2,
		`queen_ephemeral_request_duration_seconds_count{route="configure"}`:       1,
		`queen_ephemeral_request_duration_seconds_count{route="queues"}`:          1,
		`queen_ephemeral_request_duration_seconds_count{route="other"}`:           1,
		`queen_ephemeral_request_duration_seconds_bucket{route="push",le="+Inf"}`: 5,
	}
	for series, v := range want {
		if g, ok := m[series]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", series, g, ok, v)
		}
	}
	if l.CellBytes != footprint {
		t.Errorf("the listing's cellBytes %d, want %d (the queues' %d payload bytes and the charges)", l.CellBytes, footprint, held)
	}
	// The parked pop took at least as long as the scrapes before the push.
	if s := m[`queen_ephemeral_request_duration_seconds_sum{route="pop"}`]; s <= 0 {
		t.Errorf("pop latency sum %v, want > 0", s)
	}
	for _, typ := range []string{
		"# TYPE queen_ephemeral_request_duration_seconds histogram",
		"# TYPE queen_ephemeral_pushed_messages_total counter",
		"# TYPE queen_ephemeral_dropped_total counter",
		"# TYPE queen_ephemeral_parked_pops gauge",
	} {
		if !strings.Contains(body, typ+"\n") {
			t.Errorf("no %q line in:\n%s", typ, body)
		}
	}
	if t.Failed() {
		t.Logf("GET /metrics:\n%s", body)
	}
}

// With QUEEN_METRICS_PUBLIC=true, /metrics needs no identity, like
// /health, in every auth mode; a request refused for its identity counts as
// a refusal. (Without it, /metrics follows the admin scope: the tests of
// adminscope_test.go and TestMetricsProtectedByDefault.)
func TestMetricsNeedNoIdentity(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": "metrics-test-secret", "QUEEN_METRICS_PUBLIC": "true"})
	b.do(t, "POST", "/api/v1/ephemeral/push", pushBody("q", "", `1`)).wantErr(t, 401, "unauthorized")
	m, body := b.scrape(t)
	if v := m[`queen_ephemeral_refusals_total{code="unauthorized"}`]; v != 1 {
		t.Fatalf("unauthorized refusals %v, want 1:\n%s", v, body)
	}
}

// By default /metrics, which names every tenant, follows the admin scope:
// in jwt mode a scrape without identity is 401 and a tenant's credential is
// 403, so the same broker as above but without QUEEN_METRICS_PUBLIC does
// not show its page to a loopback client with no identity.
func TestMetricsProtectedByDefault(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_AUTH_MODE": "jwt", "QUEEN_JWT_SECRET": "metrics-test-secret"})
	b.doH(t, "GET", "/metrics", nil).wantErr(t, 401, "unauthorized")
}
