package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// The gateway table (make bench-gateway, bench/gateway.sh): each scenario
// run straight at a broker (label "direct") and through a gateway in front
// of one (a label starting "gateway": "gateway", the gateway as it ships,
// and "gateway-http", with its link off), in one markdown table of
// medians, then the goals for each gateway path: the gateway adds at most
// 25 % to the request/reply p50 and spends less CPU per operation than
// the broker behind it.

// gatewayRow is the medians of one (scenario, label)'s runs.
type gatewayRow struct {
	scenario, label string
	name            string // the scenario as the table shows it (reqreply with its requesters)
	unit            string
	runs            int
	errors          int64
	rate, p50, p99  float64
	// broker is the broker's CPU per operation (µs): the target's when
	// direct, the process behind the target's through the gateway; gateway
	// is the gateway's own, -1 when direct.
	broker, gateway float64
	// brokerRW and gatewayRW are their read/write system calls per
	// operation, -1 when unknown.
	brokerRW, gatewayRW float64
	measured            bool // at least one run completed
}

func gatewayRows(results []*Result) []*gatewayRow {
	type acc struct {
		row                       *gatewayRow
		rate, p50, p99, brk, gate []float64
		brkRW, gateRW             []float64
	}
	byKey := map[string]*acc{}
	var keys []string
	for _, r := range results {
		if r.Label != "direct" && !isGatewayLabel(r.Label) {
			continue
		}
		name := variantName(r)
		k := name + "/" + r.Label
		a := byKey[k]
		if a == nil {
			a = &acc{row: &gatewayRow{scenario: r.Scenario, name: name, label: r.Label, unit: r.Unit, broker: -1, gateway: -1, brokerRW: -1, gatewayRW: -1}}
			byKey[k] = a
			keys = append(keys, k)
		}
		a.row.runs++
		a.row.errors += r.Errors
		if r.Ops == 0 || r.Seconds <= 0 {
			continue // a failed run: counted in runs and errors, not in the medians
		}
		a.rate = append(a.rate, r.Rate)
		if r.Latency != nil {
			a.p50 = append(a.p50, r.Latency.P50)
			a.p99 = append(a.p99, r.Latency.P99)
		}
		perOp := func(cores float64) float64 { return cores * r.Seconds / float64(r.Ops) * 1e6 }
		rwPerOp := func(n int64) float64 { return float64(n) / float64(r.Ops) }
		// The broker is the target when direct, and the process behind the
		// target through the gateway.
		brokerCPU, brokerRW := r.CPU.Target, r.CPU.TargetRW
		if isGatewayLabel(r.Label) {
			brokerCPU, brokerRW = r.CPU.Behind, r.CPU.BehindRW
			if r.CPU.Target >= 0 {
				a.gate = append(a.gate, perOp(r.CPU.Target))
			}
			if r.CPU.TargetRW > 0 {
				a.gateRW = append(a.gateRW, rwPerOp(r.CPU.TargetRW))
			}
		}
		if brokerCPU >= 0 {
			a.brk = append(a.brk, perOp(brokerCPU))
		}
		if brokerRW > 0 {
			a.brkRW = append(a.brkRW, rwPerOp(brokerRW))
		}
	}
	rows := make([]*gatewayRow, 0, len(keys))
	for _, k := range keys {
		a := byKey[k]
		r := a.row
		if len(a.rate) > 0 {
			r.measured = true
			r.rate, r.p50, r.p99 = medianOf(a.rate), medianOf(a.p50), medianOf(a.p99)
		}
		if len(a.brk) > 0 {
			r.broker = medianOf(a.brk)
		}
		if len(a.gate) > 0 {
			r.gateway = medianOf(a.gate)
		}
		if len(a.brkRW) > 0 {
			r.brokerRW = medianOf(a.brkRW)
		}
		if len(a.gateRW) > 0 {
			r.gatewayRW = medianOf(a.gateRW)
		}
		rows = append(rows, r)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].scenario != rows[j].scenario {
			return scenarioIndex(rows[i].scenario) < scenarioIndex(rows[j].scenario)
		}
		if rows[i].name != rows[j].name {
			return rows[i].name > rows[j].name // the loaded variant ("32 requesters") before "1 requester"
		}
		if (rows[i].label == "direct") != (rows[j].label == "direct") {
			return rows[i].label == "direct"
		}
		return rows[i].label < rows[j].label
	})
	return rows
}

// isGatewayLabel reports whether a run went through a gateway.
func isGatewayLabel(label string) bool { return strings.HasPrefix(label, "gateway") }

// variantName is the scenario as the table names it: reqreply with its
// requester count, which bench/gateway.sh varies (a loaded run and an
// unloaded one, whose p50 is the transport time a hop adds).
func variantName(r *Result) string {
	if r.Scenario != "reqreply" {
		return r.Scenario
	}
	var n int
	switch v := r.Params["requesters"].(type) {
	case int:
		n = v
	case float64: // read back from JSON
		n = int(v)
	default:
		return r.Scenario
	}
	if n == 1 {
		return "reqreply, 1 requester"
	}
	return fmt.Sprintf("reqreply, %d requesters", n)
}

func scenarioIndex(s string) int {
	for i, n := range Scenarios {
		if n == s {
			return i
		}
	}
	return len(Scenarios)
}

// PrintGatewayTable writes the markdown table of the runs' medians to w,
// then the goals, met or missed.
func PrintGatewayTable(w io.Writer, results []*Result) {
	rows := gatewayRows(results)
	fmt.Fprintln(w, "| scenario | path | rate | p50 µs | p99 µs | broker CPU µs/op | gateway CPU µs/op | broker syscalls/op | gateway syscalls/op | errors | runs |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	most := 0
	us := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v)
	}
	for _, r := range rows {
		most = max(most, r.runs)
		cells := []string{r.name, r.label, "-", "-", "-", us(r.broker), us(r.gateway), us(r.brokerRW), us(r.gatewayRW), fmt.Sprint(r.errors), fmt.Sprint(r.runs)}
		if r.measured {
			cells[2] = thousands(r.rate) + " " + r.unit + "/s"
			cells[3], cells[4] = us(r.p50), us(r.p99)
		}
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
	}
	fmt.Fprintf(w, "\nEach figure is the median of up to %d runs; an op is the scenario's unit (a round trip, a message). Through the gateway, broker CPU is the broker's behind it, in the same window; syscalls are read/write-family system calls (/proc/PID/io).\n", most)
	printGatewayGoals(w, rows)
}

// printGatewayGoals compares each scenario's gateway row with its direct
// row: the p50 added (a goal for request/reply, whose p50 is a round trip;
// for reference elsewhere), and the gateway's CPU per operation against
// the broker's behind it (a goal everywhere).
func printGatewayGoals(w io.Writer, rows []*gatewayRow) {
	direct := map[string]*gatewayRow{}
	for _, r := range rows {
		if r.label == "direct" {
			direct[r.name] = r
		}
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	header := false
	for _, g := range rows {
		d := direct[g.name]
		if !isGatewayLabel(g.label) || d == nil {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\nGoals (issue: the gateway adds at most 25 % to the round trip's p50 and costs less CPU per request than the broker):")
			header = true
		}
		if !g.measured || !d.measured {
			fmt.Fprintf(w, "- %s (%s): not measured (a side has no completed run)\n", g.name, g.label)
			continue
		}
		line := fmt.Sprintf("- %s: rate %.2f× direct", g.name, g.rate/d.rate)
		if g.label != "gateway" {
			line = fmt.Sprintf("- %s (%s): rate %.2f× direct", g.name, g.label, g.rate/d.rate)
		}
		if d.p50 > 0 {
			added := g.p50/d.p50 - 1
			if g.scenario == "reqreply" {
				line += fmt.Sprintf("; p50 %+.0f %% (goal ≤ +25 %%, %s)", 100*added, verdict(added <= 0.25))
			} else {
				line += fmt.Sprintf("; p50 %+.0f %% (for reference)", 100*added)
			}
		}
		if g.gateway >= 0 && g.broker > 0 {
			line += fmt.Sprintf("; gateway CPU %.2f× the broker's behind it (goal < 1.0×, %s)", g.gateway/g.broker, verdict(g.gateway < g.broker))
		}
		if g.broker > 0 && d.broker > 0 {
			line += fmt.Sprintf("; broker CPU behind the gateway %.2f× direct", g.broker/d.broker)
		}
		if g.gateway >= 0 && d.broker > 0 {
			// For reference: the broker behind a gateway may do less than
			// one serving the clients itself (a link batches its reads and
			// writes), so the gateway is also set against the broker direct.
			line += fmt.Sprintf("; gateway CPU %.2f× the broker's direct", g.gateway/d.broker)
		}
		fmt.Fprintln(w, line)
	}
}
