package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The SDK table reads both kinds of input (a queenbench report, the
// JavaScript script's JSON lines), takes medians per client and compares
// each language's clients with its fastest peer.
func TestSDKTable(t *testing.T) {
	dir := t.TempDir()
	rep := &Report{Results: []*Result{
		{Scenario: "reqreply", Target: "broker", Client: ClientSDK, Ops: 3000, Seconds: 1, Rate: 3000,
			Latency: &Latency{P50: 2000, P99: 9000}, CPU: CPU{Client: 1, ClientPerOp: 300, Target: 0.3}},
		{Scenario: "reqreply", Target: "nats", Ops: 30000, Seconds: 1, Rate: 30000,
			Latency: &Latency{P50: 500, P99: 3000}, CPU: CPU{Client: 0.6, ClientPerOp: 20, Target: -1}},
		{Scenario: "throughput", Target: "broker", Ops: 1, Seconds: 1, Rate: 1}, // not a reqreply: left out
	}}
	goFile := filepath.Join(dir, "go.json")
	if err := WriteReport(goFile, rep); err != nil {
		t.Fatal(err)
	}
	jsFile := filepath.Join(dir, "js.json")
	lines := `{"lang":"js","client":"queen-mq","target":"broker","role":"ours","ops":1000,"seconds":1,"rate":1000,"p50Us":30000,"p99Us":80000,"clientUsPerOp":1500,"targetUsPerOp":100,"errors":0}
{"lang":"js","client":"queen-mq","target":"broker","role":"ours","ops":3000,"seconds":1,"rate":3000,"p50Us":10000,"p99Us":60000,"clientUsPerOp":500,"targetUsPerOp":100,"errors":1}
{"lang":"js","client":"queen-mq","target":"broker","role":"ours","ops":2000,"seconds":1,"rate":2000,"p50Us":20000,"p99Us":70000,"clientUsPerOp":1000,"targetUsPerOp":-1,"errors":0}
{"lang":"js","client":"nats.js","target":"nats","role":"peer","ops":20000,"seconds":1,"rate":20000,"p50Us":1000,"p99Us":6000,"clientUsPerOp":40,"targetUsPerOp":10,"errors":0}
{"lang":"js","client":"ioredis","target":"redis","role":"peer","ops":10000,"seconds":1,"rate":10000,"p50Us":2000,"p99Us":4000,"clientUsPerOp":50,"targetUsPerOp":20,"errors":0}
`
	if err := os.WriteFile(jsFile, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	var runs []SDKRun
	for _, f := range []string{goFile, jsFile} {
		r, err := ReadSDKRuns(f)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r...)
	}
	if len(runs) != 7 {
		t.Fatalf("%d runs read, want 7: %+v", len(runs), runs)
	}
	var b strings.Builder
	PrintSDKTable(&b, runs)
	out := b.String()
	for _, want := range []string{
		// medians of three runs; 2,000/20,000 = 0.10 of nats.js's rate;
		// p99 70 ms against the best peer p99 (ioredis, 4 ms): 17.50;
		// CPU 1,000 µs against the cheapest peer's 40: 25.00; one error.
		"| **JS queen-mq** | 2,000 | 20.00 | 70.00 | 1000.0 | 100.0 | 0.10 | 17.50 | 25.00 | 1 | 3 |",
		"| JS nats.js | 20,000 | 1.00 | 6.00 | 40.0 | 10.0 | 1.00 | 1.50 | 1.00 | 0 | 1 |",
		"| **Go client (our SDK)** | 3,000 | 2.00 | 9.00 | 300.0 | 100.0 | 0.10 | 3.00 | 15.00 | 0 | 1 |",
		"| Go nats.go | 30,000 | 0.50 | 3.00 | 20.0 | - | 1.00 | 1.00 | 1.00 | 0 | 1 |",
		"- JS queen-mq vs ioredis: round trips/s 0.20× (goal ≥ 1.0×, MISSED)",
		"- Go client (our SDK) vs nats.go: round trips/s 0.10× (goal ≥ 1.0×, MISSED); p99 3.00× (goal ≤ 1.0×, MISSED); client CPU/rt 15.00× (goal ≤ 1.5×, MISSED)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}

// -client sdk drives reqreply only, and always with a fresh inbox.
func TestConfigClient(t *testing.T) {
	for _, c := range []struct {
		scenario, target, client, inbox string
		wantInbox, wantErr              string
	}{
		{"reqreply", "broker", ClientRaw, "", InboxRequester, ""},
		{"reqreply", "broker", ClientSDK, "", InboxRequest, ""},
		{"reqreply", "redis", ClientSDK, "", InboxRequester, ""}, // -client concerns the broker only
		{"reqreply", "nats", ClientRaw, InboxRequest, InboxRequest, ""},
		{"reqreply", "broker", ClientSDK, InboxRequester, "", "-inbox request"},
		{"throughput", "broker", ClientSDK, "", "", "reqreply scenario only"},
		{"reqreply", "broker", "fetch", "", "", "raw, sdk or sdk-http"},
		{"reqreply", "broker", ClientRaw, "mine", "", "request or requester"},
	} {
		cfg := Defaults()
		cfg.Scenario, cfg.Target, cfg.Client, cfg.Inbox = c.scenario, c.target, c.client, c.inbox
		err := cfg.check()
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%+v: %v", c, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%+v: error %v, want one saying %q", c, err, c.wantErr)
		case c.wantErr == "" && cfg.Inbox != c.wantInbox:
			t.Errorf("%+v: inbox %q, want %q", c, cfg.Inbox, c.wantInbox)
		}
	}
}

// -services: at least 1, with the SDK only; every queue has a responder.
func TestConfigServices(t *testing.T) {
	for _, c := range []struct {
		client   string
		services int
		wantErr  string
	}{
		{ClientSDK, 8, ""},
		{ClientSDK, 0, "at least 1"},
		{ClientRaw, 1, ""},
		{ClientRaw, 8, "with -client sdk only"},
	} {
		cfg := Defaults()
		cfg.Scenario, cfg.Target, cfg.Client, cfg.Services = "reqreply", "broker", c.client, c.services
		err := cfg.check()
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%+v: error %v, want %q", c, err, c.wantErr)
		}
	}
	for _, c := range []struct{ responders, queues int }{{4, 1}, {4, 3}, {4, 4}, {4, 8}, {4, 9}, {1, 5}} {
		served := make([]int, c.queues)
		for id := range c.responders {
			for _, j := range servedBy(id, c.responders, c.queues) {
				served[j]++
			}
		}
		for j, n := range served {
			if n == 0 || c.queues >= c.responders && n != 1 {
				t.Errorf("%d responders, %d queues: queue %d served by %d", c.responders, c.queues, j, n)
			}
		}
	}
}
