// Command queenbench is the end-to-end load generator: it runs the bench
// scenarios against the broker, Redis or NATS on loopback, prints a
// progress line a second and a summary, writes a JSON report with -out, and
// prints a comparison table when several targets ran (or with -table).
// From bench/, a module of its own:
//
//	go run ./cmd/queenbench -scenario reqreply -d 10s
//	go run ./cmd/queenbench -scenario all -target broker,redis,nats -out run.json
//	go run ./cmd/queenbench -table a.json b.json
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/queenmq/ephemeral/bench"
)

func main() {
	cfg := bench.Defaults()
	var (
		scenarios = flag.String("scenario", "reqreply", "scenarios, comma-separated: "+strings.Join(bench.Scenarios, ", ")+", or all")
		targets   = flag.String("target", "broker", "targets, comma-separated: broker, redis, nats")
		addr      = flag.String("addr", "", "address of the target (one target only; default per target)")
		addrs     = map[string]*string{}
		out       = flag.String("out", "", "write the JSON report here")
		table     = flag.Bool("table", false, "print the comparison table of the JSON reports named as arguments, and run nothing")
		sdkTable  = flag.Bool("sdk-table", false, "print the SDK table (make bench-sdk) of the reports and JavaScript result lines named as arguments, and run nothing")
		svg       = flag.String("svg", "", "with -table or -sdk-table: also write the request/reply chart (round trips/s and CPU per round trip, ours against the peers') to this SVG file")
		quiet     = flag.Bool("q", false, "no progress line")
		cpuProf   = flag.String("cpuprofile", "", "write the load tool's own CPU profile here (to see what a client costs)")
		gwTable   = flag.Bool("gateway-table", false, "print the gateway table (make bench-gateway) of the JSON reports named as arguments, and run nothing")
		mint      = flag.Bool("mint-token", false, "print an HS256 token signed with -jwt-secret for -jwt-tenant and -jwt-role, valid for a day, and run nothing")
		jwtSecret = flag.String("jwt-secret", "", "-mint-token: the HS256 secret (the broker's or gateway's QUEEN_JWT_SECRET)")
		jwtTenant = flag.String("jwt-tenant", "bench", "-mint-token: the tenant claim")
		jwtRole   = flag.String("jwt-role", "read-write", "-mint-token: the role claim")
	)
	for _, t := range bench.Targets {
		addrs[t] = flag.String(t+"-addr", bench.DefaultAddr[t], "address of "+t+" when several targets run")
	}
	flag.StringVar(&cfg.Client, "client", cfg.Client, "how the broker is driven: raw (the tool's raw HTTP client), sdk (the Go SDK, package client, over links; reqreply only) or sdk-http (the Go SDK kept on HTTP/1.1)")
	flag.StringVar(&cfg.Inbox, "inbox", "", "reqreply: where replies go: requester (one inbox per requester) or request (a fresh one per round trip); default requester, request with -client sdk")
	flag.StringVar(&cfg.RespAddr, "resp-addr", "", "reqreply with the raw client: address the responders use (another member of a cell: every round trip relayed); default -addr")
	flag.StringVar(&cfg.Label, "label", "", "a name for this run in the report (make bench-gateway: direct or gateway)")
	flag.StringVar(&cfg.Token, "token", "", "broker target: send \"Authorization: Bearer TOKEN\" on every request (a broker in jwt mode, a gateway)")
	flag.IntVar(&cfg.BehindPID, "behind-pid", 0, "process id of what stands behind the target (the broker behind a gateway): its CPU over the window is reported too")
	flag.IntVar(&cfg.PID, "pid", 0, "process id of the target, for RSS and CPU (one target only; default: the process listening on the address)")
	cpuPIDs := flag.String("cpu-pids", "", "comma-separated process ids whose CPU over the window, summed, is the target's (every member of a cell reached through -addr); default -pid")
	flag.DurationVar(&cfg.Duration, "d", cfg.Duration, "measured duration (inboxes: the longest creation phase)")
	flag.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "load before the measured window")
	flag.IntVar(&cfg.Size, "size", cfg.Size, "payload bytes")
	flag.IntVar(&cfg.Requesters, "c", cfg.Requesters, "reqreply: requesters")
	flag.IntVar(&cfg.Responders, "w", cfg.Responders, "reqreply: responders")
	flag.IntVar(&cfg.Services, "services", cfg.Services, "reqreply with -client sdk: request queues, requester i asking queue i mod services and the responders sharing them out (several spread a cell's load over the queues' owners)")
	flag.IntVar(&cfg.RespBatch, "rbatch", cfg.RespBatch, "reqreply: requests a responder takes at once")
	flag.IntVar(&cfg.Producers, "p", cfg.Producers, "throughput: producers")
	flag.IntVar(&cfg.Consumers, "k", cfg.Consumers, "throughput: consumers")
	flag.IntVar(&cfg.Batch, "batch", cfg.Batch, "throughput, fanout: messages per push and per pop")
	flag.Float64Var(&cfg.Rate, "rate", 0, "throughput: messages/s pushed in all (0: as fast as possible)")
	flag.IntVar(&cfg.Window, "window", cfg.Window, "throughput, fanout: messages pushed and not yet taken, at most")
	flag.IntVar(&cfg.Groups, "groups", cfg.Groups, "fanout: groups")
	flag.IntVar(&cfg.Inboxes, "inboxes", cfg.Inboxes, "inboxes: how many")
	flag.DurationVar(&cfg.Collect, "collect", cfg.Collect, "inboxes: how long to wait for the idle inboxes to be collected")
	flag.IntVar(&cfg.Parked, "parked", cfg.Parked, "parked: waiting pops to hold")
	flag.IntVar(&cfg.Wakers, "wakers", cfg.Wakers, "inboxes, parked: connections that create or wake")
	flag.Parse()

	if *table {
		os.Exit(printTables(flag.Args(), *svg))
	}
	if *sdkTable {
		os.Exit(printSDKTable(flag.Args(), *svg))
	}
	if *gwTable {
		os.Exit(printGatewayTable(flag.Args()))
	}
	if *mint {
		tok, err := bench.MintToken(*jwtSecret, *jwtTenant, *jwtRole, 24*time.Hour)
		if err != nil {
			fatal(err.Error())
		}
		fmt.Println(tok)
		os.Exit(0)
	}
	scs := split(*scenarios)
	if len(scs) == 1 && scs[0] == "all" {
		scs = bench.Scenarios
	}
	tgs := split(*targets)
	if len(tgs) > 1 && (*addr != "" || cfg.PID != 0 || *cpuPIDs != "") {
		fatal("-addr, -pid and -cpu-pids name one target; with several use -broker-addr, -redis-addr, -nats-addr")
	}
	for _, f := range split(*cpuPIDs) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			fatal(fmt.Sprintf("-cpu-pids: %q is not a process id", f))
		}
		cfg.CPUPIDs = append(cfg.CPUPIDs, pid)
	}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fatal(err.Error())
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err.Error())
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	report := &bench.Report{Machine: bench.ThisMachine(), Started: time.Now().UTC(), Command: strings.Join(os.Args, " ")}
	failed := false
	for _, sc := range scs {
		for _, tg := range tgs {
			c := cfg
			c.Scenario, c.Target = sc, tg
			c.Addr = *addrs[tg]
			if *addr != "" {
				c.Addr = *addr
			}
			res, err := bench.Run(ctx, c)
			if res != nil {
				report.Results = append(report.Results, res)
				summary(res)
			}
			if err != nil {
				failed = true
				fmt.Fprintf(os.Stderr, "queenbench: %s against %s: %v\n", sc, tg, err)
			}
			if ctx.Err() != nil {
				break
			}
		}
	}
	pprof.StopCPUProfile() // before any exit below; a no-op without -cpuprofile
	if *out != "" {
		if err := bench.WriteReport(*out, report); err != nil {
			fatal(err.Error())
		}
	}
	if len(tgs) > 1 {
		fmt.Println()
		bench.PrintTable(os.Stdout, report.Results)
	}
	if failed || ctx.Err() != nil {
		os.Exit(1)
	}
}

func summary(r *bench.Result) {
	label := r.Target
	if r.Client != "" && r.Client != bench.ClientRaw {
		label += "(" + r.Client + ")"
	}
	if r.Scenario == "idle" { // nothing done: the target's CPU is the figure
		fmt.Printf("%s/%s: target CPU %.2f ms per second (%.1f ms in %.2fs)\n", r.Scenario, label, r.CPU.Target*1000, r.CPU.Target*r.Seconds*1000, r.Seconds)
		return
	}
	fmt.Printf("%s/%s: %d %s in %.2fs = %.0f/s", r.Scenario, label, r.Ops, r.Unit, r.Seconds, r.Rate)
	if r.InRate > 0 {
		fmt.Printf(" (in %.0f/s)", r.InRate)
	}
	if r.Refused > 0 {
		fmt.Printf(", %d pushes refused and retried", r.Refused)
	}
	fmt.Println()
	if l := r.Latency; l != nil && l.Count > 0 {
		fmt.Printf("  latency (%s), us: p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  (n=%d)\n",
			l.What, l.P50, l.P90, l.P99, l.P999, l.Max, l.Count)
	}
	if m := r.Memory; m != nil {
		fmt.Printf("  rss (pid %d): before %s, during %s, after %s; %.0f bytes per unit over %d units",
			m.PID, mib(m.Before), mib(m.During), mib(m.After), m.PerUnit, m.Units)
		if r.Scenario == "inboxes" {
			fmt.Printf("; collected: %v", m.Collected)
		}
		fmt.Println()
	}
	fmt.Printf("  cpu, cores: load tool %.2f, target %.2f", r.CPU.Client, r.CPU.Target)
	if r.CPU.Behind >= 0 {
		fmt.Printf(", behind the target %.2f", r.CPU.Behind)
	}
	fmt.Printf("; load tool %.1f us per op\n", r.CPU.ClientPerOp)
	for _, n := range r.Notes {
		fmt.Println("  note:", n)
	}
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func printTables(files []string, svg string) int {
	if len(files) == 0 {
		fatal("-table needs JSON reports as arguments")
	}
	var all []*bench.Result
	for i, f := range files {
		r, err := bench.ReadReport(f)
		if err != nil {
			fatal(err.Error())
		}
		if i == 0 {
			m := r.Machine
			fmt.Printf("machine: %d CPUs (%s), GOMAXPROCS %d, %s, Linux %s\n\n", m.CPUs, m.CPUModel, m.GOMAXPROCS, m.GoVersion, m.Kernel)
		}
		all = append(all, r.Results...)
	}
	bench.PrintTable(os.Stdout, all)
	return writeSVG(svg, func(f *os.File) error { return bench.WritePeersChart(f, all) })
}

func printSDKTable(files []string, svg string) int {
	if len(files) == 0 {
		fatal("-sdk-table needs queenbench reports or JavaScript result files as arguments")
	}
	var all []bench.SDKRun
	for _, f := range files {
		runs, err := bench.ReadSDKRuns(f)
		if err != nil {
			fatal(err.Error())
		}
		all = append(all, runs...)
	}
	bench.PrintSDKTable(os.Stdout, all)
	return writeSVG(svg, func(f *os.File) error { return bench.WriteSDKChart(f, all) })
}

// writeSVG writes a table's chart to path with write (nothing when path is
// empty), removing the file when write fails.
func writeSVG(path string, write func(*os.File) error) int {
	if path == "" {
		return 0
	}
	f, err := os.Create(path)
	if err != nil {
		fatal(err.Error())
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		fmt.Fprintln(os.Stderr, "queenbench: -svg:", err)
		return 1
	}
	return 0
}

func printGatewayTable(files []string) int {
	if len(files) == 0 {
		fatal("-gateway-table needs queenbench reports as arguments")
	}
	var all []*bench.Result
	for _, f := range files {
		r, err := bench.ReadReport(f)
		if err != nil {
			fatal(err.Error())
		}
		all = append(all, r.Results...)
	}
	bench.PrintGatewayTable(os.Stdout, all)
	return 0
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "queenbench:", msg)
	os.Exit(2)
}
