package conformance

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/server"
)

// families reads the # HELP and # TYPE lines of a page: name -> text and
// name -> type.
func families(body string) (help, typ map[string]string) {
	help, typ = map[string]string{}, map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, text, _ := strings.Cut(rest, " ")
			help[name] = text
		} else if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, t, _ := strings.Cut(rest, " ")
			typ[name] = t
		}
	}
	return help, typ
}

// runtimeFamily tells the process's and the Go runtime's families
// (go_*, process_*), which VictoriaMetrics/metrics writes under the names
// Prometheus's Go client uses and with an empty HELP: the broker documents
// them as a group (docs/operator.md, "Process and runtime"), not one by one.
func runtimeFamily(name string) bool {
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")
}

// Every family a real broker shows has a HELP text and a TYPE,
// and both are the ones server.Families documents; every sample belongs to
// a family so announced.
func TestMetricsEveryFamilyHasHelp(t *testing.T) {
	t.Parallel()
	b := startBroker(t, nil)
	b.configure(t, "orders", `{}`)
	b.push(t, "orders", "", `1`)
	// A refusal, so that the refusal family (made at the first) shows.
	b.do(t, "GET", "/nope", nil).wantErr(t, 404, "not_found")
	m, body := b.scrape(t)
	help, typ := families(body)
	known := map[string]server.Family{}
	for _, f := range server.Families() {
		known[f.Name] = f
	}
	if len(help) < 20 {
		t.Fatalf("only %d families on the page:\n%s", len(help), body)
	}
	for name, text := range help {
		if runtimeFamily(name) {
			continue
		}
		f, ok := known[name]
		switch {
		case !ok:
			t.Errorf("family %s is not in server.Families", name)
		case text == "":
			t.Errorf("family %s has an empty HELP", name)
		case text != f.Help:
			t.Errorf("family %s: HELP %q, want %q", name, text, f.Help)
		case typ[name] != f.Type:
			t.Errorf("family %s: TYPE %q, want %q", name, typ[name], f.Type)
		}
	}
	for name := range typ {
		if _, ok := help[name]; !ok {
			t.Errorf("family %s has a TYPE and no HELP", name)
		}
	}
	for series := range m {
		name, _, _ := strings.Cut(series, "{")
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if n, ok := strings.CutSuffix(name, suf); ok && typ[n] == "histogram" {
				base = n
			}
		}
		if help[base] == "" && !runtimeFamily(base) {
			t.Errorf("series %s belongs to no family with HELP", series)
		}
	}
	// The runtime's families are there too, with a TYPE.
	for _, name := range []string{"process_resident_memory_bytes", "process_open_fds", "go_goroutines", "go_memstats_heap_inuse_bytes"} {
		if typ[name] != "gauge" {
			t.Errorf("family %s: TYPE %q, want gauge", name, typ[name])
		}
	}
	// Every family of a broker outside a cell is on the page (the cell's
	// show on members only).
	for name := range known {
		if _, ok := help[name]; !ok && !strings.Contains(name, "relay") && !strings.Contains(name, "cell_") {
			t.Errorf("family %s is documented but not on the page", name)
		}
	}
}

// Ack outcomes by outcome, per declared queue depth, bytes and
// drops by cause (none for implicit queues), the budget beside the
// footprint, and the open connections, with exact values.
func TestMetricsAckOutcomesAndQueues(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]string{"QUEEN_EPHEMERAL_MAX_BYTES": "50000000"})

	// orders: bounded, one message dropped for bounds, none popped. jobs:
	// two popped, one acked, one failed. idle: declared, never used.
	b.configure(t, "orders", `{"maxLength":2,"policy":"dropOldest"}`)
	b.configure(t, "jobs", `{}`)
	b.configure(t, "idle", `{}`)
	b.push(t, "orders", "", `"a"`, `"bb"`, `"ccc"`) // "a" dropped for bounds
	b.push(t, "jobs", "", `"bb"`, `"ccc"`)
	b.push(t, "inbox-1", "", `1`)
	b.push(t, "inbox-2", "", `2`, `3`)

	got := b.pop(t, popq{"queue": "jobs", "batch": "10"})
	if len(got.Messages) != 2 {
		t.Fatalf("pop jobs: %d messages, want 2", len(got.Messages))
	}
	ids := got.ids()
	outcomes := b.ack(t, "jobs", "",
		ackItem{ID: ids[0]},                     // acked
		ackItem{ID: ids[1], Status: "failed"},   // redelivered
		ackItem{ID: ids[0]},                     // unknown: settled already
		ackItem{ID: "e:8000000000ab:Default:1"}, // stale: another incarnation
		ackItem{ID: "not-an-id"},                // unknown
	)
	if want := "acked redelivered unknown stale unknown"; strings.Join(outcomes, " ") != want {
		t.Fatalf("ack outcomes %v, want %s", outcomes, want)
	}

	m, body := b.scrape(t)
	want := map[string]float64{
		`queen_ephemeral_ack_outcomes_total{outcome="acked"}`:       1,
		`queen_ephemeral_ack_outcomes_total{outcome="redelivered"}`: 1,
		`queen_ephemeral_ack_outcomes_total{outcome="stale"}`:       1,
		`queen_ephemeral_ack_outcomes_total{outcome="unknown"}`:     2,
		// D5: depth counts pending messages; bytes counts what is held,
		// the reclaimable "bb" of jobs included.
		`queen_ephemeral_queue_depth{tenant="default",queue="orders"}`:                        2,
		`queen_ephemeral_queue_bytes{tenant="default",queue="orders"}`:                        float64(len(`"bb"`) + len(`"ccc"`)),
		`queen_ephemeral_queue_depth{tenant="default",queue="jobs"}`:                          1,
		`queen_ephemeral_queue_bytes{tenant="default",queue="jobs"}`:                          float64(len(`"bb"`) + len(`"ccc"`)),
		`queen_ephemeral_queue_dropped_total{tenant="default",queue="jobs",cause="bounds"}`:   0,
		`queen_ephemeral_queue_dropped_total{tenant="default",queue="orders",cause="bounds"}`: 1,
		`queen_ephemeral_queue_dropped_total{tenant="default",queue="orders",cause="ttl"}`:    0,
		`queen_ephemeral_queue_dropped_total{tenant="default",queue="orders",cause="retry"}`:  0,
		`queen_ephemeral_queue_depth{tenant="default",queue="idle"}`:                          0,
		`queen_ephemeral_queue_bytes{tenant="default",queue="idle"}`:                          0,
		`queen_ephemeral_queue_dropped_total{tenant="default",queue="idle",cause="bounds"}`:   0,
		`queen_ephemeral_dropped_total{cause="bounds"}`:                                       1,
		`queen_ephemeral_max_bytes{scope="cell"}`:                                             50000000,
		`queen_ephemeral_queues{tier="declared"}`:                                             3,
		`queen_ephemeral_queues{tier="implicit"}`:                                             2,
		`queen_ephemeral_request_duration_seconds_count{route="ack"}`:                         1,
		`queen_ephemeral_pushed_messages_total{tenant="default"}`:                             8,
		`queen_ephemeral_delivered_messages_total{tenant="default"}`:                          2,
		`queen_ephemeral_parked_pops`:                                                         0,
	}
	for series, v := range want {
		if g, ok := m[series]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", series, g, ok, v)
		}
	}
	// The listing agrees with the per-queue series.
	for _, q := range []string{"orders", "jobs", "idle"} {
		r := b.row(t, q)
		d := m[`queen_ephemeral_queue_depth{tenant="default",queue="`+q+`"}`]
		by := m[`queen_ephemeral_queue_bytes{tenant="default",queue="`+q+`"}`]
		if float64(r.Depth) != d || float64(r.Bytes) != by {
			t.Errorf("listing row of %s %+v; the series say depth %v, bytes %v", q, r, d, by)
		}
	}
	// Implicit queues cost no series of their own.
	if strings.Contains(body, `queue="inbox-`) {
		t.Errorf("an implicit queue has series of its own:\n%s", body)
	}
	var perQueue int
	for series := range m {
		if strings.HasPrefix(series, "queen_ephemeral_queue_") {
			perQueue++
		}
	}
	if perQueue != 3*(1+1+3) { // three declared queues: depth, bytes, three drop causes
		t.Errorf("%d per-queue series, want 15", perQueue)
	}
	if t.Failed() {
		t.Logf("GET /metrics:\n%s", body)
	}

	// Connections: three raw ones held open, plus the scrape's own once
	// every earlier connection of the test's client is gone.
	b.httpClient().CloseIdleConnections()
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", b.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, _ := b.scrape(t)
		b.httpClient().CloseIdleConnections()
		if m["queen_ephemeral_connections"] == float64(len(held)+1) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queen_ephemeral_connections = %v, want %d", m["queen_ephemeral_connections"], len(held)+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
