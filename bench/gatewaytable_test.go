package bench

import (
	"strings"
	"testing"
)

// The gateway table takes medians per scenario and path, reads the broker's
// CPU from the target when direct and from the process behind the target
// through the gateway, and checks the goals against the direct row.
func TestGatewayTable(t *testing.T) {
	rr := func(label string, rate, p50, target, behind float64) *Result {
		return &Result{Scenario: "reqreply", Target: "broker", Label: label, Unit: "round trips", Ops: int64(rate), Seconds: 1, Rate: rate,
			Params:  map[string]any{"requesters": float64(32)},
			Latency: &Latency{P50: p50, P99: 4 * p50}, CPU: CPU{Target: target, Behind: behind, TargetRW: int64(rate * 7), BehindRW: int64(rate * 4)}}
	}
	results := []*Result{
		rr("direct", 10000, 1000, 0.5, -1),    // broker 50 µs/rt
		rr("direct", 12000, 900, 0.6, -1),     // 50
		rr("direct", 8000, 1100, 0.4, -1),     // 50
		rr("gateway", 9000, 1200, 0.27, 0.45), // gateway 30 µs/rt, broker 50
		rr("gateway", 9000, 1300, 0.27, 0.45),
		rr("gateway", 9000, 1100, 0.27, 0.45),
		{Scenario: "throughput", Target: "broker", Label: "direct", Unit: "messages", Ops: 100000, Seconds: 1, Rate: 100000,
			Latency: &Latency{P50: 5000}, CPU: CPU{Target: 1, Behind: -1}},
		{Scenario: "throughput", Target: "broker", Label: "gateway", Unit: "messages", Ops: 50000, Seconds: 1, Rate: 50000,
			Latency: &Latency{P50: 10000}, CPU: CPU{Target: 0.6, Behind: 0.5}}, // gateway 12 µs/msg, broker 10: missed
		{Scenario: "throughput", Target: "broker", Label: "gateway-http", Unit: "messages", Ops: 40000, Seconds: 1, Rate: 40000,
			Latency: &Latency{P50: 12000}, CPU: CPU{Target: 0.6, Behind: 0.4}}, // gateway 15 µs/msg, broker 10: missed
		{Scenario: "reqreply", Target: "broker", Label: "", Ops: 1, Seconds: 1}, // unlabelled: left out
		{Scenario: "reqreply", Target: "broker", Label: "direct", Unit: "round trips", Ops: 100, Seconds: 1, Rate: 100,
			Params: map[string]any{"requesters": 1}, Latency: &Latency{P50: 100}, CPU: CPU{Target: 0.01, Behind: -1}},
		{Scenario: "reqreply", Target: "broker", Label: "gateway", Unit: "round trips", Ops: 80, Seconds: 1, Rate: 80,
			Params: map[string]any{"requesters": 1}, Latency: &Latency{P50: 130}, CPU: CPU{Target: 0.004, Behind: 0.008}},
	}
	var b strings.Builder
	PrintGatewayTable(&b, results)
	out := b.String()
	for _, want := range []string{
		"| reqreply, 32 requesters | direct | 10,000 round trips/s | 1000.0 | 4000.0 | 50.0 | - | 7.0 | - | 0 | 3 |",
		"| reqreply, 32 requesters | gateway | 9,000 round trips/s | 1200.0 | 4800.0 | 50.0 | 30.0 | 4.0 | 7.0 | 0 | 3 |",
		"| throughput | gateway | 50,000 messages/s | 10000.0 | 0.0 | 10.0 | 12.0 | - | - | 0 | 1 |",
		"| reqreply, 1 requester | gateway | 80 round trips/s | 130.0 | 0.0 | 100.0 | 50.0 | - | - | 0 | 1 |",
		"- reqreply, 1 requester: rate 0.80× direct; p50 +30 % (goal ≤ +25 %, MISSED); gateway CPU 0.50× the broker's behind it (goal < 1.0×, met); broker CPU behind the gateway 1.00× direct; gateway CPU 0.50× the broker's direct",
		"- reqreply, 32 requesters: rate 0.90× direct; p50 +20 % (goal ≤ +25 %, met); gateway CPU 0.60× the broker's behind it (goal < 1.0×, met); broker CPU behind the gateway 1.00× direct; gateway CPU 0.60× the broker's direct",
		"- throughput: rate 0.50× direct; p50 +100 % (for reference); gateway CPU 1.20× the broker's behind it (goal < 1.0×, MISSED); broker CPU behind the gateway 1.00× direct; gateway CPU 1.20× the broker's direct",
		"| throughput | gateway-http | 40,000 messages/s | 12000.0 | 0.0 | 10.0 | 15.0 | - | - | 0 | 1 |",
		"- throughput (gateway-http): rate 0.40× direct; p50 +140 % (for reference); gateway CPU 1.50× the broker's behind it (goal < 1.0×, MISSED); broker CPU behind the gateway 1.00× direct; gateway CPU 1.50× the broker's direct",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if !(strings.Index(out, "| reqreply, 32 requesters | direct") < strings.Index(out, "| reqreply, 1 requester | direct") &&
		strings.Index(out, "| reqreply, 1 requester | gateway") < strings.Index(out, "| throughput | direct") &&
		strings.Index(out, "| throughput | gateway |") < strings.Index(out, "| throughput | gateway-http |")) {
		t.Errorf("scenarios out of order:\n%s", out)
	}
}
