package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// The SDK table (make bench-sdk, bench/sdk.sh): request/reply through each
// language's clients, ours against the peers' own, in one markdown table of
// medians. Its rows come from queenbench reports (the Go clients) and from
// the JSON lines bench/sdk/reqreply.mjs prints (the JavaScript clients).

// SDKRun is one reqreply run of one client: the JSON line the JavaScript
// script prints, and what a queenbench reqreply result is turned into.
type SDKRun struct {
	Lang   string `json:"lang"`   // "go" or "js"
	Client string `json:"client"` // e.g. "queen-mq", "nats.js", "Go SDK"
	Target string `json:"target"` // broker, redis or nats
	// Role is "ours" (one of our SDKs), "peer" (a peer's own client, what
	// ours is measured against) or "reference" (the tool's raw client).
	Role    string  `json:"role"`
	Ops     int64   `json:"ops"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"`  // round trips per second
	P50     float64 `json:"p50Us"` // round-trip latency, µs
	P99     float64 `json:"p99Us"`
	// ClientPerOp is the client process's CPU (requesters and responders)
	// per round trip, µs; TargetPerOp the server's, -1 when unknown.
	ClientPerOp float64 `json:"clientUsPerOp"`
	TargetPerOp float64 `json:"targetUsPerOp"`
	Errors      int64   `json:"errors"`
}

// sdkRunOf turns a queenbench reqreply result into an SDKRun.
func sdkRunOf(r *Result) (SDKRun, bool) {
	if r.Scenario != "reqreply" {
		return SDKRun{}, false
	}
	run := SDKRun{Lang: "go", Target: r.Target, Role: "peer", Ops: r.Ops, Seconds: r.Seconds, Rate: r.Rate,
		ClientPerOp: r.CPU.ClientPerOp, TargetPerOp: -1, Errors: r.Errors}
	switch {
	case r.Target == "broker" && r.Client == ClientSDK:
		run.Client, run.Role = "client (our SDK)", "ours"
	case r.Target == "broker" && r.Client == ClientSDKHTTP:
		run.Client, run.Role = "client over HTTP/1.1 (reference: our SDK without links)", "reference"
	case r.Target == "broker":
		run.Client, run.Role = "rawhttp (reference: the bench's raw client)", "reference"
	case r.Target == "redis":
		run.Client = "go-redis"
	case r.Target == "nats":
		run.Client = "nats.go"
	default:
		return SDKRun{}, false
	}
	if l := r.Latency; l != nil {
		run.P50, run.P99 = l.P50, l.P99
	}
	if v, ok := cpuPerOp(r); ok {
		run.TargetPerOp = v
	}
	return run, true
}

// ReadSDKRuns reads a queenbench JSON report or a file of JSON lines from
// the JavaScript script.
func ReadSDKRuns(path string) ([]SDKRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var runs []SDKRun
	if t := bytes.TrimSpace(b); bytes.HasPrefix(t, []byte("{")) && bytes.Contains(t, []byte(`"results"`)) {
		var rep Report
		if err := json.Unmarshal(t, &rep); err == nil && rep.Results != nil {
			for _, r := range rep.Results {
				if run, ok := sdkRunOf(r); ok {
					runs = append(runs, run)
				}
			}
			return runs, nil
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue // the script's other output
		}
		var run SDKRun
		if err := json.Unmarshal(line, &run); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if run.Client == "" || run.Lang == "" {
			return nil, fmt.Errorf("%s:%d: a line without lang or client", path, n)
		}
		runs = append(runs, run)
	}
	return runs, sc.Err()
}

// sdkRow is the medians of one client's runs.
type sdkRow struct {
	lang, client, role                 string
	runs                               int
	rate, p50, p99, clientCPU, tgtCPU  float64
	hasTgt                             bool
	errors                             int64
	ratio                              float64 // rate / the best peer's of the language
	hasRatio                           bool
	p99Ratio, cpuRatio                 float64 // against the best peer's p99 and the cheapest peer's CPU
	hasP99Ratio, hasCPURatio, withRate bool
}

func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

var langOrder = map[string]int{"js": 0, "go": 1}
var roleOrder = map[string]int{"ours": 0, "peer": 1, "reference": 2}

func sdkRows(runs []SDKRun) []*sdkRow {
	type acc struct {
		row                      *sdkRow
		rate, p50, p99, cpu, tgt []float64
	}
	byKey := map[string]*acc{}
	var keys []string
	for _, r := range runs {
		k := r.Lang + "/" + r.Client
		a := byKey[k]
		if a == nil {
			a = &acc{row: &sdkRow{lang: r.Lang, client: r.Client, role: r.Role}}
			byKey[k] = a
			keys = append(keys, k)
		}
		a.row.runs++
		a.row.errors += r.Errors
		if r.Ops == 0 {
			continue // a failed run: counted in runs and errors, not in the medians
		}
		a.rate = append(a.rate, r.Rate)
		a.p50 = append(a.p50, r.P50)
		a.p99 = append(a.p99, r.P99)
		a.cpu = append(a.cpu, r.ClientPerOp)
		if r.TargetPerOp >= 0 {
			a.tgt = append(a.tgt, r.TargetPerOp)
		}
	}
	rows := make([]*sdkRow, 0, len(keys))
	for _, k := range keys {
		a := byKey[k]
		r := a.row
		if len(a.rate) > 0 {
			r.withRate = true
			r.rate, r.p50, r.p99, r.clientCPU = medianOf(a.rate), medianOf(a.p50), medianOf(a.p99), medianOf(a.cpu)
		}
		if len(a.tgt) > 0 {
			r.tgtCPU, r.hasTgt = medianOf(a.tgt), true
		}
		rows = append(rows, r)
	}
	// Ratios against the language's peers: the fastest one's rate and p99,
	// the cheapest one's CPU.
	for _, r := range rows {
		var bestRate, bestP99, bestCPU *sdkRow
		for _, p := range rows {
			if p.lang != r.lang || p.role != "peer" || !p.withRate {
				continue
			}
			if bestRate == nil || p.rate > bestRate.rate {
				bestRate = p
			}
			if bestP99 == nil || p.p99 < bestP99.p99 {
				bestP99 = p
			}
			if bestCPU == nil || p.clientCPU < bestCPU.clientCPU {
				bestCPU = p
			}
		}
		if bestRate == nil || !r.withRate {
			continue
		}
		r.ratio, r.hasRatio = r.rate/bestRate.rate, bestRate.rate > 0
		r.p99Ratio, r.hasP99Ratio = r.p99/bestP99.p99, bestP99.p99 > 0
		r.cpuRatio, r.hasCPURatio = r.clientCPU/bestCPU.clientCPU, bestCPU.clientCPU > 0
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.lang != b.lang {
			return langOrder[a.lang] < langOrder[b.lang]
		}
		if a.role != b.role {
			return roleOrder[a.role] < roleOrder[b.role]
		}
		return a.rate > b.rate
	})
	return rows
}

var langName = map[string]string{"js": "JS", "go": "Go"}

// PrintSDKTable writes the markdown table of the runs' medians to w, then
// the goals, met or missed.
func PrintSDKTable(w io.Writer, runs []SDKRun) {
	rows := sdkRows(runs)
	fmt.Fprintln(w, "| client | round trips/s | p50 ms | p99 ms | client CPU µs/rt | broker/server CPU µs/rt | rt/s × best peer | p99 × best peer | CPU × cheapest peer | errors | runs |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	most := 0
	for _, r := range rows {
		most = max(most, r.runs)
		name := langName[r.lang] + " " + r.client
		if r.role == "ours" {
			name = "**" + name + "**"
		}
		cells := []string{name, "-", "-", "-", "-", "-", "-", "-", "-", fmt.Sprint(r.errors), fmt.Sprint(r.runs)}
		if r.withRate {
			cells[1] = thousands(r.rate)
			cells[2] = fmt.Sprintf("%.2f", r.p50/1e3)
			cells[3] = fmt.Sprintf("%.2f", r.p99/1e3)
			cells[4] = fmt.Sprintf("%.1f", r.clientCPU)
		}
		if r.hasTgt {
			cells[5] = fmt.Sprintf("%.1f", r.tgtCPU)
		}
		if r.hasRatio {
			cells[6] = fmt.Sprintf("%.2f", r.ratio)
		}
		if r.hasP99Ratio {
			cells[7] = fmt.Sprintf("%.2f", r.p99Ratio)
		}
		if r.hasCPURatio {
			cells[8] = fmt.Sprintf("%.2f", r.cpuRatio)
		}
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
	}
	fmt.Fprintf(w, "\nEach figure is the median of up to %d runs; client CPU is the client process's (requesters and responders) per round trip.\n", most)
	printSDKGoals(w, rows)
}

// printSDKGoals checks the goals: each of our SDKs against each
// peer of its language, on round trips/s (≥ 1.0×), p99 (no worse) and
// client CPU per round trip (within 1.5×).
func printSDKGoals(w io.Writer, rows []*sdkRow) {
	header := false
	for _, ours := range rows {
		if ours.role != "ours" {
			continue
		}
		for _, p := range rows {
			if p.lang != ours.lang || p.role != "peer" {
				continue
			}
			if !header {
				fmt.Fprintln(w, "\nGoals (BENCHMARKS.md, request/reply through the SDKs):")
				header = true
			}
			name := langName[ours.lang] + " " + ours.client
			if !ours.withRate || !p.withRate {
				fmt.Fprintf(w, "- %s vs %s: not measured (a side has no completed run)\n", name, p.client)
				continue
			}
			// The issue sets the Go SDK's speed goals against nats.go only;
			// go-redis is there for reference, its CPU still a goal.
			speedGoal := !(ours.lang == "go" && p.client == "go-redis")
			verdict := func(ok bool) string {
				if ok {
					return "met"
				}
				return "MISSED"
			}
			speed := func(ok bool) string {
				if !speedGoal {
					return "for reference"
				}
				return verdict(ok)
			}
			fmt.Fprintf(w, "- %s vs %s: round trips/s %.2f× (goal ≥ 1.0×, %s); p99 %.2f× (goal ≤ 1.0×, %s); client CPU/rt %.2f× (goal ≤ 1.5×, %s)\n",
				name, p.client,
				ours.rate/p.rate, speed(ours.rate >= p.rate),
				ours.p99/p.p99, speed(ours.p99 <= p.p99),
				ours.clientCPU/p.clientCPU, verdict(ours.clientCPU <= 1.5*p.clientCPU))
		}
	}
}
