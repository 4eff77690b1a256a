package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// P3 with metrics on: a push served on the loop (admit, decode, engine
// push, metering counter, latency histogram, answer) allocates nothing in
// the steady state.
func TestPushWithMetricsIsAllocationFree(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	st := openStore(t)
	s := New(Config{Engine: e, Store: st})
	must(t, e.Configure("default", "q", engine.OptionSet{
		Has:     engine.HasMaxLength | engine.HasPolicy,
		Options: engine.Options{MaxLength: 1000, Policy: engine.PolicyDropOldest},
	}))

	body := `{"queue":"q","partition":"p","messages":[{"payload":{"n":1}},{"payload":"two"}]}`
	raw := fmt.Sprintf("POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	var p wire.Parser
	req, _, err := p.Parse([]byte(raw))
	if err != nil || req == nil {
		t.Fatalf("parse: %v", err)
	}
	cs := &conn{s: s, ls: new(loopState)}
	serve := func() {
		cs.out = cs.out[:0]
		cs.route(req)
	}
	for range 2000 { // fill the ring to its bound: later pushes drop the oldest
		serve()
	}
	if !strings.HasPrefix(string(cs.out), "HTTP/1.1 201") {
		t.Fatalf("push answer: %s", cs.out)
	}
	if allocs := testing.AllocsPerRun(200, serve); allocs != 0 {
		t.Fatalf("a push with metrics on allocates %.1f times", allocs)
	}
	ts := s.tenantState("default")
	if got := ts.pushed.Get(); got != 2*(2000+201) {
		t.Fatalf("pushed counter %d, want %d", got, 2*(2000+201))
	}
	wantSamples(t, s,
		`queen_ephemeral_request_duration_seconds_count{route="push"} 2201`,
		`queen_ephemeral_pushed_messages_total{tenant="default"} 4402`,
		`queen_ephemeral_dropped_total{cause="bounds"} 3402`,
		`queen_ephemeral_queues{tier="declared"} 1`,
	)
}

// wantSamples fails t for every sample line missing from s's /metrics page.
func wantSamples(t *testing.T, s *Server, lines ...string) {
	t.Helper()
	out := string(s.appendMetrics(nil))
	for _, line := range lines {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("no %s in:\n%s", line, out)
		}
	}
}

func TestLabelValueEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"acme":      "acme",
		`a"b`:       `a\"b`,
		`a\b`:       `a\\b`,
		"a\nb":      `a\nb`,
		`\"` + "\n": `\\\"\n`,
	} {
		if got := labelValue(in); got != want {
			t.Errorf("labelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// P3 with the ack outcome counters: an ack served on the loop counts its
// outcomes without allocating, and counts each one exactly.
func TestAckOutcomesAreCountedWithoutAllocating(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	st := openStore(t)
	s := New(Config{Engine: e, Store: st})
	if _, err := e.Push("default", "q", "p", [][]byte{[]byte("1")}); err != nil {
		t.Fatal(err)
	}
	// Three ids: one of another incarnation (stale), one that is not an
	// id (unknown), one of ours with no lease (unknown).
	ours := string(e.AppendID(nil, "p", 0))
	body := `{"queue":"q","acks":[{"id":"e:8000000000ab:p:1"},{"id":"x"},{"id":"` + ours + `"}]}`
	raw := fmt.Sprintf("POST /api/v1/ephemeral/ack HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	var p wire.Parser
	req, _, err := p.Parse([]byte(raw))
	if err != nil || req == nil {
		t.Fatalf("parse: %v", err)
	}
	cs := &conn{s: s, ls: new(loopState)}
	serve := func() {
		cs.out = cs.out[:0]
		cs.route(req)
	}
	serve()
	if !strings.Contains(string(cs.out), `"outcome":"stale"`) {
		t.Fatalf("ack answer: %s", cs.out)
	}
	if allocs := testing.AllocsPerRun(100, serve); allocs != 0 {
		t.Fatalf("an ack with metrics on allocates %.1f times", allocs)
	}
	// One call above, and AllocsPerRun's warm-up run and 100 runs.
	wantSamples(t, s,
		`queen_ephemeral_ack_outcomes_total{outcome="acked"} 0`,
		`queen_ephemeral_ack_outcomes_total{outcome="redelivered"} 0`,
		`queen_ephemeral_ack_outcomes_total{outcome="stale"} 102`,
		`queen_ephemeral_ack_outcomes_total{outcome="unknown"} 204`,
	)
}

// fillHelp gives VictoriaMetrics' empty HELP lines their text and leaves
// every other line as it was.
func TestFillHelp(t *testing.T) {
	in := "# HELP queen_ephemeral_connections\n# TYPE queen_ephemeral_connections gauge\nqueen_ephemeral_connections 3\n# HELP other_family\n# HELP x has text\n"
	want := "# HELP queen_ephemeral_connections " + familyByName["queen_ephemeral_connections"].Help +
		"\n# TYPE queen_ephemeral_connections gauge\nqueen_ephemeral_connections 3\n# HELP other_family\n# HELP x has text\n"
	if got := string(fillHelp(nil, []byte(in))); got != want {
		t.Fatalf("fillHelp:\n%s\nwant:\n%s", got, want)
	}
}

// Every family the server writes is in families with a one-line HELP text
// and a known type, and no name is listed twice.
func TestFamiliesAreDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range families {
		if seen[f.Name] {
			t.Errorf("%s listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.Help == "" || strings.ContainsAny(f.Help, "\n\\") {
			t.Errorf("%s: HELP %q must be one line of text", f.Name, f.Help)
		}
		switch f.Type {
		case "counter", "gauge", "histogram":
		default:
			t.Errorf("%s: type %q", f.Name, f.Type)
		}
		if strings.HasSuffix(f.Name, "_total") != (f.Type == "counter") {
			t.Errorf("%s: a counter's name, and only a counter's, ends in _total (type %s)", f.Name, f.Type)
		}
	}
}

// /metrics carries the process's and the Go runtime's own figures beside
// the broker's (docs/operator.md, "Process and runtime"): RSS, heap, GC
// pauses, goroutines and descriptors, each with a value a live process has.
func TestMetricsProcessAndRuntime(t *testing.T) {
	e := engine.New(engine.Config{MaxBytes: 1 << 30})
	defer e.Close()
	s := New(Config{Engine: e, Store: openStore(t)})
	page := string(s.appendMetrics(nil))
	values := map[string]string{}
	for line := range strings.Lines(page) {
		if name, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && !strings.HasPrefix(name, "#") {
			values[name] = v
		}
	}
	for _, name := range []string{
		"process_resident_memory_bytes", "process_open_fds", "process_max_fds",
		"process_cpu_seconds_total", "go_goroutines", "go_memstats_heap_inuse_bytes",
		"go_gc_duration_seconds_count",
	} {
		v, ok := values[name]
		if !ok {
			t.Errorf("no %s on the page", name)
			continue
		}
		if name == "process_cpu_seconds_total" || name == "go_gc_duration_seconds_count" {
			continue // may be 0 in a short test
		}
		if v == "0" || strings.HasPrefix(v, "-") {
			t.Errorf("%s %s: want a positive value", name, v)
		}
	}
	if !strings.Contains(page, "# TYPE process_resident_memory_bytes gauge\n") {
		t.Errorf("process_resident_memory_bytes has no TYPE line")
	}
}
