package e2e

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestGatewayCellMeasure measures request/reply through a gateway in front
// of a cell of two, with the gateway's links to the members and over HTTP
// alone (BENCHMARKS.md, "The gateway in front of a cell"): queenbench's
// reqreply (32 requesters, 4 responders) through one gateway and then the
// other, alternating, three rounds; the requests land on both members and
// about half are relayed to the other. QUEEN_GATEWAY_CELL_MEASURE_CLIENT=sdk
// drives it through the Go SDK instead of queenbench's own client. A
// measurement, not a test:
//
//	QUEEN_GATEWAY_CELL_MEASURE=1 go test ./gateway/e2e -run TestGatewayCellMeasure -v -count 1
func TestGatewayCellMeasure(t *testing.T) {
	if os.Getenv("QUEEN_GATEWAY_CELL_MEASURE") != "1" {
		t.Skip("a measurement: set QUEEN_GATEWAY_CELL_MEASURE=1")
	}
	bench := t.TempDir() + "/queenbench"
	if err := brokertest.Build("../../bench", "./cmd/queenbench", bench); err != nil {
		t.Fatal(err)
	}
	ms := startCell(t, 2)
	urls := []string{ms[0].URL(), ms[1].URL()}
	paths := []string{"link", "http"}
	gws := map[string]*gateway{}
	for _, path := range paths {
		g := startGateway(t, urls, map[string]string{"QUEEN_GATEWAY_LINK": strconv.FormatBool(path == "link")})
		g.as(t, "ops", "admin").onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
		gws[path] = g
	}
	behind := map[string][]*brokertest.Broker{"link": {ms[0].Broker, ms[1].Broker}, "http": {ms[0].Broker, ms[1].Broker}}
	alternate(t, bench, paths, gws, behind)
}

// alternate runs queenbench's reqreply through each path's gateway in
// turn, three rounds, the order reversed every other round, and logs each
// run and the medians: round trips/s, p50, the gateway's CPU and the
// brokers' behind it (summed, over the whole run, warm-up included) per
// round trip.
func alternate(t *testing.T, bench string, paths []string, gws map[string]*gateway, behind map[string][]*brokertest.Broker) {
	cpu := func(bs []*brokertest.Broker) (d time.Duration) {
		for _, b := range bs {
			d += b.CPU(t)
		}
		return d
	}
	tok := token(t, "acme", "read-write")
	type run struct{ rate, p50, gatewayCPU, brokersCPU float64 }
	runs := map[string][]run{}
	for round := range 3 {
		order := slices.Clone(paths)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, path := range order {
			g := gws[path]
			before := cpu(behind[path])
			start := time.Now()
			args := []string{"-scenario", "reqreply", "-addr", strings.TrimPrefix(g.URL(), "http://"), "-token", tok,
				"-pid", strconv.Itoa(g.PID()), "-d", "4s", "-warmup", "1s"}
			if c := os.Getenv("QUEEN_GATEWAY_CELL_MEASURE_CLIENT"); c != "" {
				args = append(args, "-client", c)
			}
			r := brokertest.Queenbench(t, bench, args...)
			wall := time.Since(start)
			brokers := cpu(behind[path]) - before
			runs[path] = append(runs[path], run{
				rate: r.Rate, p50: r.Latency.P50,
				gatewayCPU: r.CPU.Target / r.Rate * 1e6,
				brokersCPU: brokers.Seconds() / wall.Seconds() / r.Rate * 1e6,
			})
			t.Logf("round %d %s: %.0f round trips/s, p50 %.0f µs, gateway CPU %.1f µs/rt, brokers %.1f µs/rt", round+1, path,
				r.Rate, r.Latency.P50, r.CPU.Target/r.Rate*1e6, brokers.Seconds()/wall.Seconds()/r.Rate*1e6)
		}
	}
	median := func(path string, f func(run) float64) float64 {
		var v []float64
		for _, r := range runs[path] {
			v = append(v, f(r))
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	var b bytes.Buffer
	for _, path := range paths {
		fmt.Fprintf(&b, "%s: %.0f round trips/s, p50 %.0f µs, gateway CPU %.1f µs/rt, brokers' CPU %.1f µs/rt; ", path,
			median(path, func(r run) float64 { return r.rate }), median(path, func(r run) float64 { return r.p50 }),
			median(path, func(r run) float64 { return r.gatewayCPU }), median(path, func(r run) float64 { return r.brokersCPU }))
	}
	t.Logf("medians of 3: %s", b.String())
}

// TestGatewayOwnerMeasure measures request/reply through a gateway in
// front of one broker and in front of a cell of three that it routes by
// owner (docs/gateway.md, "Routing to owners"), both on one PostgreSQL:
// queenbench's reqreply (32 requesters, 4 responders, a fresh inbox per
// request) through one gateway and then the other, alternating, three
// rounds; the gateway's CPU and the brokers' (every member summed) per
// round trip; the members run at the default heartbeat and member timeout.
// QUEEN_GATEWAY_OWNER_MEASURE_BEFORE names a gateway binary of
// an earlier build to run a third path with (the cell behind a gateway that
// relays); QUEEN_GATEWAY_CELL_MEASURE_CLIENT=sdk drives it through the Go
// SDK. A measurement, not a test:
//
//	QUEEN_GATEWAY_OWNER_MEASURE=1 go test ./gateway/e2e -run TestGatewayOwnerMeasure -v -count 1
func TestGatewayOwnerMeasure(t *testing.T) {
	if os.Getenv("QUEEN_GATEWAY_OWNER_MEASURE") != "1" {
		t.Skip("a measurement: set QUEEN_GATEWAY_OWNER_MEASURE=1")
	}
	bench := t.TempDir() + "/queenbench"
	if err := brokertest.Build("../../bench", "./cmd/queenbench", bench); err != nil {
		t.Fatal(err)
	}
	dbURL, schema := schemaURL(t)
	one := startBroker(t, map[string]string{"QUEEN_DATABASE_URL": dbURL, "QUEEN_DATABASE_SCHEMA": schema})
	timings := brokertest.MeasuredCellTimings() // the membership's cost is part of what is measured
	ms := startCell(t, 3, timings, timings, timings)
	behind := map[string][]*brokertest.Broker{"broker": {one}, "cell": {ms[0].Broker, ms[1].Broker, ms[2].Broker}}
	gws := map[string]*gateway{
		"broker": startGateway(t, []string{one.URL()}, nil),
		"cell":   startGateway(t, []string{ms[0].URL()}, nil),
	}
	paths := []string{"broker", "cell"}
	if bin := os.Getenv("QUEEN_GATEWAY_OWNER_MEASURE_BEFORE"); bin != "" {
		p := brokertest.New(t, bin, gatewayEnv([]string{ms[0].URL()}, nil))
		p.LogTail = 4000
		p.Start(t)
		gws["cell-before"] = &gateway{Broker: p}
		behind["cell-before"] = behind["cell"]
		paths = append(paths, "cell-before")
	}
	for _, g := range gws {
		g.as(t, "ops", "admin").onPlan(t, "acme", "pro", planJSON(true, 0, 0, 0, 0))
	}
	alternate(t, bench, paths, gws, behind)
	t.Logf("gateway: %d calls to owners, %d relayed through another member",
		int(gwMetric(t, gws["cell"], "queen_gateway_owner_routed_total", `how="owner"`)), int(gwMetric(t, gws["cell"], "queen_gateway_owner_routed_total", `how="fallback"`)))
}
