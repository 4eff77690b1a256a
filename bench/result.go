package bench

import (
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Report is what one queenbench run writes with -out.
type Report struct {
	Machine Machine   `json:"machine"`
	Started time.Time `json:"started"`
	Command string    `json:"command"`
	Results []*Result `json:"results"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs       int    `json:"nproc"`
	CPUModel   string `json:"cpuModel"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"goVersion"`
	Kernel     string `json:"kernel"`
}

// Result is one scenario against one target.
type Result struct {
	Scenario string         `json:"scenario"`
	Target   string         `json:"target"`
	Client   string         `json:"client,omitempty"` // broker: "raw" or "sdk" (-client)
	Label    string         `json:"label,omitempty"`  // -label
	Addr     string         `json:"addr"`
	Params   map[string]any `json:"params"`

	Seconds float64 `json:"seconds"` // the measured window
	Unit    string  `json:"unit"`    // what Ops counts
	Ops     int64   `json:"ops"`
	Rate    float64 `json:"rate"`             // Ops per second
	InRate  float64 `json:"inRate,omitempty"` // throughput, fanout: messages pushed per second

	Latency *Latency `json:"latency,omitempty"` // microseconds
	Memory  *Memory  `json:"memory,omitempty"`
	CPU     CPU      `json:"cpu"`

	Errors  int64    `json:"errors"`
	Refused int64    `json:"refused,omitempty"` // pushes refused with backpressure (429) and retried
	Notes   []string `json:"notes,omitempty"`
}

// Latency is a summary of an HDR histogram, in microseconds.
type Latency struct {
	What  string  `json:"what"`
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p99.9"`
	Max   float64 `json:"max"`
}

// Memory is the target's resident set (VmRSS) at the scenario's stages.
type Memory struct {
	PID       int     `json:"pid"`
	Before    int64   `json:"rssBefore"`
	During    int64   `json:"rssDuring"`
	After     int64   `json:"rssAfter"`
	Units     int64   `json:"units"`        // inboxes or parked pops held at "during"
	PerUnit   float64 `json:"bytesPerUnit"` // (During-Before)/Units
	Collected bool    `json:"collected"`    // inboxes: gone before "after" was read
}

// CPU is the CPU time used during the measured window, in cores (1.0 = one
// core busy the whole window): what limited a number.
type CPU struct {
	Client float64 `json:"client"`
	// ClientPerOp is the load tool's own CPU time per operation of the
	// window, in microseconds: for reqreply, what its requesters and
	// responders together spent per round trip (the whole process, client
	// library included: with -client sdk, the SDK's cost).
	ClientPerOp float64 `json:"clientUsPerOp"`
	Target      float64 `json:"target"` // -1 when the target's process is unknown
	// TargetSys is the part of Target spent in the kernel, and TargetRW the
	// target's read/write system calls over the window (-1: unknown): what
	// an operation costs where the time goes to moving bytes through
	// sockets.
	TargetSys float64 `json:"targetSys"`
	TargetRW  int64   `json:"targetReadWriteSyscalls"`
	// Behind is the CPU of the process behind the target (-behind-pid: the
	// broker behind a gateway) and BehindRW its read/write system calls,
	// -1 when not asked for or unknown.
	Behind   float64 `json:"behind"`
	BehindRW int64   `json:"behindReadWriteSyscalls"`
}

type histT = hdrhistogram.Histogram

// newHist returns a histogram of nanoseconds, 1 ns to a minute, three
// significant digits.
func newHist() *histT {
	return hdrhistogram.New(1, int64(time.Minute), 3)
}

func record(h *histT, d int64) {
	if d < 1 {
		d = 1
	}
	if max := h.HighestTrackableValue(); d > max {
		d = max
	}
	_ = h.RecordValue(d)
}

func summarize(what string, h *histT) *Latency {
	us := func(v int64) float64 { return float64(v) / 1e3 }
	return &Latency{
		What:  what,
		Count: h.TotalCount(),
		Mean:  h.Mean() / 1e3,
		P50:   us(h.ValueAtQuantile(50)),
		P90:   us(h.ValueAtQuantile(90)),
		P99:   us(h.ValueAtQuantile(99)),
		P999:  us(h.ValueAtQuantile(99.9)),
		Max:   us(h.Max()),
	}
}

// ThisMachine reads the machine's description.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// WriteReport writes r as indented JSON to path.
func WriteReport(path string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadReport reads a file WriteReport wrote.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	return &r, json.Unmarshal(b, &r)
}
