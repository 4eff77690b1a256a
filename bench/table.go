package bench

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
)

// The comparison table: one row per figure, one column per target, and the
// ratios broker/redis and broker/nats; then the goals, met or not.

type row struct {
	scenario, metric string
	better           string // "higher" or "lower"
	get              func(*Result) (float64, bool)
}

func lat(f func(*Latency) float64) func(*Result) (float64, bool) {
	return func(r *Result) (float64, bool) {
		if r.Latency == nil || r.Latency.Count == 0 {
			return 0, false
		}
		return f(r.Latency), true
	}
}

func rate(r *Result) (float64, bool) { return r.Rate, r.Ops > 0 }

// cpuPerOp is the target's CPU time per operation of the window, in µs:
// what a round trip or a message costs the target, whatever its speed.
func cpuPerOp(r *Result) (float64, bool) {
	if r.CPU.Target < 0 || r.Ops == 0 || r.Seconds <= 0 {
		return 0, false
	}
	return r.CPU.Target * r.Seconds / float64(r.Ops) * 1e6, true
}

// sysPerOp is the kernel's part of cpuPerOp.
func sysPerOp(r *Result) (float64, bool) {
	if r.CPU.TargetSys <= 0 || r.Ops == 0 || r.Seconds <= 0 { // 0: a report from before the field
		return 0, false
	}
	return r.CPU.TargetSys * r.Seconds / float64(r.Ops) * 1e6, true
}

// rwPerOp is the target's read/write system calls per operation.
func rwPerOp(r *Result) (float64, bool) {
	if r.CPU.TargetRW <= 0 || r.Ops == 0 { // 0: a report from before the field
		return 0, false
	}
	return float64(r.CPU.TargetRW) / float64(r.Ops), true
}
func inRate(r *Result) (float64, bool) { return r.InRate, r.InRate > 0 }
func perUnit(r *Result) (float64, bool) {
	if r.Memory == nil || r.Memory.Units == 0 || r.Memory.During == 0 {
		return 0, false
	}
	return r.Memory.PerUnit, true
}
func targetCPU(r *Result) (float64, bool) { return r.CPU.Target, r.CPU.Target >= 0 }

// idleCPU is the target's CPU per second of the window, in ms (the idle
// scenario's figure).
func idleCPU(r *Result) (float64, bool)   { return r.CPU.Target * 1000, r.CPU.Target >= 0 }
func clientCPU(r *Result) (float64, bool) { return r.CPU.Client, true }

// clientPerOp is the load tool's CPU per operation, in µs (0 in a report
// from before the field).
func clientPerOp(r *Result) (float64, bool) { return r.CPU.ClientPerOp, r.CPU.ClientPerOp > 0 }

var rows = []row{
	{"reqreply", "round trips/s", "higher", rate},
	{"reqreply", "p50 us", "lower", lat(func(l *Latency) float64 { return l.P50 })},
	{"reqreply", "p99 us", "lower", lat(func(l *Latency) float64 { return l.P99 })},
	{"reqreply", "p99.9 us", "lower", lat(func(l *Latency) float64 { return l.P999 })},
	{"reqreply", "target CPU us per round trip", "lower", cpuPerOp},
	{"reqreply", "target kernel us per round trip", "lower", sysPerOp},
	{"reqreply", "target read/write syscalls per round trip", "lower", rwPerOp},
	{"throughput", "messages/s out", "higher", rate},
	{"throughput", "messages/s in", "higher", inRate},
	{"throughput", "e2e p50 us", "lower", lat(func(l *Latency) float64 { return l.P50 })},
	{"throughput", "e2e p99 us", "lower", lat(func(l *Latency) float64 { return l.P99 })},
	{"throughput", "target CPU us per message", "lower", cpuPerOp},
	{"throughput", "target kernel us per message", "lower", sysPerOp},
	{"fanout", "deliveries/s", "higher", rate},
	{"fanout", "e2e p99 us", "lower", lat(func(l *Latency) float64 { return l.P99 })},
	{"fanout", "target CPU us per delivery", "lower", cpuPerOp},
	{"inboxes", "inboxes/s", "higher", rate},
	{"inboxes", "bytes per idle inbox", "lower", perUnit},
	{"parked", "bytes per parked pop", "lower", perUnit},
	{"parked", "wake p50 us", "lower", lat(func(l *Latency) float64 { return l.P50 })},
	{"parked", "wake p99 us", "lower", lat(func(l *Latency) float64 { return l.P99 })},
	{"parked", "wakes/s", "higher", rate},
	{"idle", "target CPU ms per second", "lower", idleCPU},
}

// cpuRows are appended for every scenario present: what limited a number.
var cpuRows = []row{
	{"", "target CPU (cores)", "", targetCPU},
	{"", "load tool CPU (cores)", "", clientCPU},
	{"", "load tool CPU us per op", "lower", clientPerOp},
}

// index groups the results by scenario and target: several runs of one
// pair (make bench-peers ROUNDS) are summarised by their median.
func index(results []*Result) map[string][]*Result {
	m := map[string][]*Result{}
	for _, r := range results {
		k := r.Scenario + "/" + r.Target
		m[k] = append(m[k], r)
	}
	return m
}

// median is the median of get over the runs that have the figure (the
// mean of the middle two for an even count).
func median(runs []*Result, get func(*Result) (float64, bool)) (float64, bool) {
	var vs []float64
	for _, r := range runs {
		if v, ok := get(r); ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, false
	}
	sort.Float64s(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2, true
	}
	return vs[len(vs)/2], true
}

func fmtValue(v float64) string {
	switch {
	case math.Abs(v) >= 1000:
		return thousands(v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// PrintTable writes the comparison table of results to w.
func PrintTable(w io.Writer, results []*Result) {
	idx := index(results)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tfigure\tbroker\tredis\tnats\tbroker/redis\tbroker/nats\tbetter\t")
	most := 0
	for _, runs := range idx {
		most = max(most, len(runs))
	}
	for _, sc := range Scenarios {
		var any bool
		for _, t := range Targets {
			any = any || idx[sc+"/"+t] != nil
		}
		if !any {
			continue
		}
		all := []row{}
		for _, r := range rows {
			if r.scenario == sc {
				all = append(all, r)
			}
		}
		for _, r := range cpuRows {
			r.scenario = sc
			all = append(all, r)
		}
		for _, r := range all {
			vals := map[string]float64{}
			cells := []string{r.scenario, r.metric}
			for _, t := range Targets {
				v, ok := median(idx[sc+"/"+t], r.get)
				if !ok {
					cells = append(cells, "-")
					continue
				}
				vals[t] = v
				cells = append(cells, fmtValue(v))
			}
			for _, peer := range []string{"redis", "nats"} {
				b, ok1 := vals["broker"]
				p, ok2 := vals[peer]
				if ok1 && ok2 && p != 0 && r.better != "" {
					cells = append(cells, fmt.Sprintf("%.2f", b/p))
				} else {
					cells = append(cells, "-")
				}
			}
			cells = append(cells, r.better)
			fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		}
	}
	tw.Flush()
	if most > 1 {
		fmt.Fprintf(w, "\n(each figure is the median of up to %d runs of its scenario and target)\n", most)
	}
	printGoals(w, idx)
}

type goal struct {
	what     string
	scenario string
	check    func(idx map[string][]*Result) (ok bool, detail string, known bool)
}

// ratioGoal: broker's figure times factor against the peer's (higher is better
// when higher, else lower).
func ratioGoal(what, sc, peer string, factor float64, get func(*Result) (float64, bool), higher bool) goal {
	return goal{what, sc, func(idx map[string][]*Result) (bool, string, bool) {
		bv, ok1 := median(idx[sc+"/broker"], get)
		pv, ok2 := median(idx[sc+"/"+peer], get)
		if !ok1 || !ok2 || pv == 0 {
			return false, "", false
		}
		want := pv * factor
		if higher {
			return bv >= want, fmt.Sprintf("broker %s vs %s (%.2fx of the goal)", fmtValue(bv), fmtValue(want), bv/want), true
		}
		return bv <= want, fmt.Sprintf("broker %s vs %s (%.2fx of the goal)", fmtValue(bv), fmtValue(want), bv/want), true
	}}
}

func limitGoal(what, sc string, limit float64) goal {
	return goal{what, sc, func(idx map[string][]*Result) (bool, string, bool) {
		v, ok := median(idx[sc+"/broker"], perUnit)
		if !ok {
			return false, "", false
		}
		return v < limit, fmt.Sprintf("%s bytes, limit %s", fmtValue(v), fmtValue(limit)), true
	}}
}

var goals = []goal{
	ratioGoal("reqreply round trips/s >= NATS core", "reqreply", "nats", 1, rate, true),
	ratioGoal("reqreply round trips/s >= 2 x Redis lists", "reqreply", "redis", 2, rate, true),
	ratioGoal("reqreply p99 <= NATS core", "reqreply", "nats", 1, lat(func(l *Latency) float64 { return l.P99 }), false),
	ratioGoal("throughput (push+pop+ack) >= Redis lists", "throughput", "redis", 1, rate, true),
	ratioGoal("fanout deliveries/s >= NATS core", "fanout", "nats", 1, rate, true),
	limitGoal("under 1 KiB per idle inbox", "inboxes", 1024),
	limitGoal("under 2 KiB per parked pop", "parked", 2048),
}

func printGoals(w io.Writer, idx map[string][]*Result) {
	header := false
	for _, g := range goals {
		if idx[g.scenario+"/broker"] == nil {
			continue // the scenario did not run
		}
		if !header {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "goals (BENCHMARKS.md, end to end):")
			header = true
		}
		ok, detail, known := g.check(idx)
		verdict := "not measured"
		switch {
		case known && ok:
			verdict = "met: " + detail
		case known:
			verdict = "MISSED: " + detail
		}
		fmt.Fprintf(w, "  %-44s %s\n", g.what, verdict)
	}
}
