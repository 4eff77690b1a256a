package conformance

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestCellJSSDKRequestReplyCost measures (only with QUEEN_CELL_MEASURE=1)
// the JS SDK's request/reply (clients/js/bench/reqreply.mjs: 32
// requesters, 4 responders, a fresh inbox per request, 1 s warm-up and 3 s
// measured) pointed at ONE URL: one broker on PostgreSQL, and member A of a
// cell of three on the same PostgreSQL (at the default heartbeat and member
// timeout, as TestCellSDKRequestReplyCost), with owner routing (the default)
// and without it (--no-owner-routing: every call relayed by A to its
// owner). Interleaved rounds (QUEEN_CELL_MEASURE_ROUNDS, default 3); it logs
// the medians of round trips/s and of the brokers' CPU per round trip (every
// member summed, from /proc, read by the script over its 3 measured seconds
// only: the warm-up, Node's start and the responders' last parked pops are
// left out) and their ratios to one broker (the goals: ≤ 1.15× the
// CPU, ≥ 0.9× the round trips/s), the median of the rounds' own ratios, and
// the client's and the brokers' read and write system calls per round trip.
//
//	QUEEN_CELL_MEASURE=1 go test ./conformance/ -run TestCellJSSDKRequestReplyCost -v -count 1
func TestCellJSSDKRequestReplyCost(t *testing.T) {
	if os.Getenv("QUEEN_CELL_MEASURE") != "1" {
		t.Skip("a measurement: set QUEEN_CELL_MEASURE=1")
	}
	node := jsNode(t)
	script, err := filepath.Abs(filepath.Join("..", "clients", "js", "bench", "reqreply.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("QUEEN_CELL_MEASURE_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	c := newSteadyTestCell(t)
	one := startBrokerOn(t, postgresStore, nil)
	timings := brokertest.MeasuredCellTimings()
	a, b, cc := c.start(advertise(t), timings), c.start(advertise(t), timings), c.start(advertise(t), timings)
	c.waitLive(a.id, b.id, cc.id)
	type result struct{ rate, cpu, client, relayed, syscalls, brokerSyscalls float64 }
	run := func(url string, brokers []*broker, extra ...string) result {
		relayed := 0.0
		pids := make([]string, len(brokers))
		for i, m := range brokers {
			s, _ := m.scrape(t)
			relayed -= s["queen_ephemeral_relayed_total"]
			pids[i] = strconv.Itoa(m.PID())
		}
		// QUEEN_CELL_MEASURE_NODE_ARGS: node's own flags (e.g. --cpu-prof).
		args := append(strings.Fields(os.Getenv("QUEEN_CELL_MEASURE_NODE_ARGS")), script, "--url", url, "--seconds", "3", "--warmup", "1",
			"--cpu-pids", strings.Join(pids, ","))
		args = append(args, extra...)
		out, err := exec.Command(node, args...).Output()
		if err != nil {
			t.Fatalf("reqreply.mjs: %v", err)
		}
		for _, m := range brokers {
			s, _ := m.scrape(t)
			relayed += s["queen_ephemeral_relayed_total"]
		}
		var r struct {
			RoundTripsPerSec, CPUUsPerRoundTrip, BrokerCPUUsPerRoundTrip float64
			SyscallsPerRoundTrip, BrokerSyscallsPerRoundTrip             float64 // 0 where /proc/PID/io is unreadable
		}
		if err := json.Unmarshal(out, &r); err != nil || r.RoundTripsPerSec == 0 || r.BrokerCPUUsPerRoundTrip == 0 {
			t.Fatalf("reqreply.mjs printed %s: %v", out, err)
		}
		// relayed counts the warm-up's calls too (4 s of calls in all).
		return result{r.RoundTripsPerSec, r.BrokerCPUUsPerRoundTrip, r.CPUUsPerRoundTrip, relayed / (r.RoundTripsPerSec * 4), r.SyscallsPerRoundTrip, r.BrokerSyscallsPerRoundTrip}
	}
	members := []*broker{a.broker, b.broker, cc.broker}
	var single, routed, relayed []result
	for i := 0; i < rounds; i++ {
		single = append(single, run(one.url(""), []*broker{one}))
		routed = append(routed, run(a.url(""), members))
		relayed = append(relayed, run(a.url(""), members, "--no-owner-routing"))
	}
	med := func(rs []result, f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	rate := func(r result) float64 { return r.rate }
	cpu := func(r result) float64 { return r.cpu }
	s, o, l := med(single, rate), med(routed, rate), med(relayed, rate)
	sc, oc, lc := med(single, cpu), med(routed, cpu), med(relayed, cpu)
	t.Logf("JS SDK request/reply through one URL, medians of %d interleaved rounds: round trips/s one broker %.0f, cell of three with owner routing %.0f (%.2f×), relayed %.0f (%.2f×)", rounds, s, o, o/s, l, l/s)
	t.Logf("brokers' CPU per round trip (every member summed): one broker %.1f µs, cell of three with owner routing %.1f µs (%.2f×), relayed %.1f µs (%.2f×)", sc, oc, oc/sc, lc, lc/sc)
	// Each routed round against the one-broker round just before it: the
	// machine's speed drifts from round to round (one broker's own CPU per
	// round trip has ranged over 2× within a run), and a pair shares its
	// moment. Logged beside the ratio of the medians, not instead of it.
	paired := func(f func(result) float64) float64 {
		v := make([]float64, len(single))
		for i := range single {
			v[i] = f(routed[i]) / f(single[i])
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	t.Logf("owner routing, the median of each round's ratio to the one-broker round before it: round trips/s %.2f×, brokers' CPU per round trip %.2f×", paired(rate), paired(cpu))
	client := func(r result) float64 { return r.client }
	t.Logf("the client's CPU per round trip: one broker %.1f µs, routed %.1f µs, relayed %.1f µs", med(single, client), med(routed, client), med(relayed, client))
	sys := func(r result) float64 { return r.syscalls }
	bsys := func(r result) float64 { return r.brokerSyscalls }
	t.Logf("read/write system calls per round trip, the client's and the brokers' (summed): one broker %.2f and %.2f, routed %.2f and %.2f, relayed %.2f and %.2f",
		med(single, sys), med(single, bsys), med(routed, sys), med(routed, bsys), med(relayed, sys), med(relayed, bsys))
	t.Logf("requests relayed per round trip (every member summed): routed %.2f, relayed %.2f", med(routed, func(r result) float64 { return r.relayed }), med(relayed, func(r result) float64 { return r.relayed }))
	t.Logf("rounds (round trips/s, brokers' µs, client's µs, relayed per round trip, client's and brokers' system calls per round trip): one %v, routed %v, relayed %v", single, routed, relayed)
}
