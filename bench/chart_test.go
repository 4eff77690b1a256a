package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// chartFixture is the SDK table's fixture (TestSDKTable) as runs: three
// runs of queen-mq (medians 2,000 rt/s, 1,000 + 100 µs), one of each peer.
func chartFixture() []SDKRun {
	return []SDKRun{
		{Lang: "js", Client: "queen-mq", Role: "ours", Ops: 1000, Seconds: 1, Rate: 1000, ClientPerOp: 1500, TargetPerOp: 100},
		{Lang: "js", Client: "queen-mq", Role: "ours", Ops: 3000, Seconds: 1, Rate: 3000, ClientPerOp: 500, TargetPerOp: 100},
		{Lang: "js", Client: "queen-mq", Role: "ours", Ops: 2000, Seconds: 1, Rate: 2000, ClientPerOp: 1000, TargetPerOp: -1},
		{Lang: "js", Client: "nats.js", Role: "peer", Ops: 20000, Seconds: 1, Rate: 20000, ClientPerOp: 40, TargetPerOp: 10},
		{Lang: "go", Client: "rawhttp (reference: the bench's raw client)", Role: "reference", Ops: 4000, Seconds: 1, Rate: 4000, ClientPerOp: 50, TargetPerOp: -1},
		{Lang: "go", Client: "nats.go", Role: "peer", Ops: 0, Seconds: 1, Rate: 0, Errors: 1}, // no completed run: no bar
	}
}

// TestSDKChart draws the fixture: each client that completed a run has a
// bar in each panel, scaled to the panel's longest (nats.js's 20,000 rt/s
// take the 470 units; queen-mq's median 2,000 a tenth), coloured by role,
// the CPU stacked client then server; the SVG is well-formed XML and the
// same bytes every time.
func TestSDKChart(t *testing.T) {
	var a, b bytes.Buffer
	if err := WriteSDKChart(&a, chartFixture()); err != nil {
		t.Fatal(err)
	}
	if err := WriteSDKChart(&b, chartFixture()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two charts of the same runs differ")
	}
	svg := a.String()
	wellFormed(t, svg)
	for _, want := range []string{
		// round trips/s: queen-mq (ours, bold) a tenth of nats.js's bar.
		`<text x="322" y="85" text-anchor="end" font-weight="bold">JS queen-mq</text>`,
		`<rect x="330.0" y="70" width="47.0" height="20" fill="#d9480f" fill-opacity="1"/>`,
		`<text x="383.0" y="85" font-weight="bold">2,000</text>`,
		`<rect x="330.0" y="96" width="470.0" height="20" fill="#1c7ed6" fill-opacity="1"/>`,
		`<text x="806.0" y="111">20,000</text>`,
		// the reference, grey, its explanation shortened
		`>Go rawhttp (reference)</text>`,
		`fill="#868e96" fill-opacity="1"/>`,
		// CPU: queen-mq's client 1,000 and server 100 (the median of the
		// two runs that know it) are the longest total, 1,100.
		`<rect x="330.0" y="192" width="427.3" height="20" fill="#d9480f" fill-opacity="1"/>`,
		`<rect x="757.3" y="192" width="42.7" height="20" fill="#d9480f" fill-opacity="0.4"/>`,
		`<text x="806.0" y="207" font-weight="bold">1000.0 + 100.0</text>`,
		`>40.0 + 10.0</text>`,
		`>50.0</text>`, // no server figure: the client's alone
		`>client</text>`, `>broker or server</text>`,
		"peers&#39; own clients",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %s\n%s", want, svg)
		}
	}
	if strings.Contains(svg, "nats.go") {
		t.Errorf("a client without a completed run has a bar:\n%s", svg)
	}
	if err := WriteSDKChart(io.Discard, chartFixture()[5:]); err == nil {
		t.Error("a chart of no completed run: no error")
	}
}

// TestPeersChart draws request/reply against the three targets: the broker
// ours, the two peers blue, the CPU the target's then the load tool's; the
// load tool's part is left out when no report has it (reports older than
// the field).
func TestPeersChart(t *testing.T) {
	res := []*Result{
		{Scenario: "reqreply", Target: "broker", Ops: 30000, Seconds: 1, Rate: 30000, CPU: CPU{Target: 0.6, ClientPerOp: 10}},
		{Scenario: "reqreply", Target: "broker", Ops: 10000, Seconds: 1, Rate: 10000, CPU: CPU{Target: 0.3, ClientPerOp: 30}},
		{Scenario: "reqreply", Target: "nats", Ops: 40000, Seconds: 1, Rate: 40000, CPU: CPU{Target: 0.8, ClientPerOp: 20}},
		{Scenario: "throughput", Target: "redis", Ops: 1, Seconds: 1, Rate: 1}, // not request/reply
	}
	var b bytes.Buffer
	if err := WritePeersChart(&b, res); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	wellFormed(t, svg)
	for _, want := range []string{
		// broker: median 20,000 rt/s of nats's 40,000; CPU the median of
		// 20 and 30 µs per round trip, 25, and 20 µs the load tool's.
		`<text x="322" y="85" text-anchor="end" font-weight="bold">queen broker</text>`,
		`<rect x="330.0" y="70" width="235.0" height="20" fill="#d9480f" fill-opacity="1"/>`,
		`>NATS core</text>`,
		`font-weight="bold">25.0 + 20.0</text>`,
		`>20.0 + 20.0</text>`,
		`>load tool</text>`,
		"CPU: the target&#39;s, then the load tool&#39;s.",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %s\n%s", want, svg)
		}
	}
	if strings.Contains(svg, ">Redis lists</text>") {
		t.Errorf("a target without a reqreply result has a bar:\n%s", svg)
	}

	for _, r := range res {
		r.CPU.ClientPerOp = 0
	}
	b.Reset()
	if err := WritePeersChart(&b, res); err != nil {
		t.Fatal(err)
	}
	if svg := b.String(); strings.Contains(svg, "load tool<") || strings.Contains(svg, " + -") || !strings.Contains(svg, `font-weight="bold">25.0</text>`) {
		t.Errorf("without the load tool's figure, the chart still shows its part:\n%s", svg)
	}
	if err := WritePeersChart(io.Discard, res[3:]); err == nil {
		t.Error("a chart of no reqreply result: no error")
	}
}

// wellFormed fails t unless svg parses as XML from end to end.
func wellFormed(t *testing.T, svg string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, svg)
		}
	}
}
