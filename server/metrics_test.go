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
	cs := &conn{s: s, ls: new(loopScratch)}
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
	out := string(s.appendMetrics(nil))
	for _, line := range []string{
		`queen_ephemeral_request_duration_seconds_count{route="push"} 2201`,
		`queen_ephemeral_pushed_messages_total{tenant="default"} 4402`,
		`queen_ephemeral_dropped_total{cause="bounds"} 3402`,
		`queen_ephemeral_queues{tier="declared"} 1`,
	} {
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
