package bench

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
	"text/template"
)

// The charts beside the comparison tables (make bench-peers, make
// bench-sdk, queenbench -svg): request/reply, ours against the peers', as
// an SVG of horizontal bars in two panels, round trips/s and CPU per round
// trip. Written with the standard library alone and deterministically (the
// same results give the same bytes), so a chart can be committed beside its
// table and regenerated from the raw results.

// Bar colours by role: ours stand out, the peers are what we are measured
// against, the references are context.
var chartColour = map[string]string{"ours": "#d9480f", "peer": "#1c7ed6", "reference": "#868e96"}

// chartBar is one bar: a label, its role and its value in parts (stacked
// left to right, the later parts lighter), and the text written after it.
type chartBar struct {
	Label, Role, Text string
	Parts             []float64
}

// chartPanel is one figure compared across the bars, with the names of the
// parts when a bar has several.
type chartPanel struct {
	Title string
	Parts []string
	Bars  []chartBar
}

// The geometry, in SVG user units.
const (
	chartWidth  = 960
	chartLabelW = 330 // the label column
	chartBarW   = 470 // the longest bar
	chartBarH   = 20
	chartGap    = 6
	chartTitleH = 40
	chartPanelH = 30 // a panel's title line
)

type svgRect struct {
	X, Y, W    float64
	Fill       string
	Opacity    string
	LabelY     float64
	Label      string
	Text       string
	TextX      float64
	Bold       bool
	FirstOfBar bool
}

type svgPanel struct {
	Y      float64
	Title  string
	Legend []svgLegend
	Rects  []svgRect
}

type svgLegend struct {
	X, Y, TX, TY float64
	Name         string
	Opacity      string
}

var chartTmpl = template.Must(template.New("chart").Parse(`<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="Helvetica, Arial, sans-serif" font-size="13">
<rect width="{{.W}}" height="{{.H}}" fill="#ffffff"/>
<text x="12" y="24" font-size="16" font-weight="bold">{{.Title}}</text>
{{- range .Panels}}
<text x="12" y="{{printf "%.0f" .Y}}" font-weight="bold">{{.Title}}</text>
{{- range .Legend}}
<rect x="{{printf "%.0f" .X}}" y="{{printf "%.0f" .Y}}" width="12" height="12" fill="#495057" fill-opacity="{{.Opacity}}"/><text x="{{printf "%.0f" .TX}}" y="{{printf "%.0f" .TY}}">{{.Name}}</text>
{{- end}}
{{- range .Rects}}
{{- if .FirstOfBar}}
<text x="{{printf "%d" $.LabelX}}" y="{{printf "%.0f" .LabelY}}" text-anchor="end"{{if .Bold}} font-weight="bold"{{end}}>{{.Label}}</text>
{{- end}}
<rect x="{{printf "%.1f" .X}}" y="{{printf "%.0f" .Y}}" width="{{printf "%.1f" .W}}" height="{{$.BarH}}" fill="{{.Fill}}" fill-opacity="{{.Opacity}}"/>
{{- if .Text}}
<text x="{{printf "%.1f" .TextX}}" y="{{printf "%.0f" .LabelY}}"{{if .Bold}} font-weight="bold"{{end}}>{{.Text}}</text>
{{- end}}
{{- end}}
{{- end}}
<text x="12" y="{{.FootY}}" fill="#495057" font-size="11">{{.Foot}}</text>
</svg>
`))

// writeChart writes the panels as one SVG. A panel's bars share its scale,
// the longest total taking chartBarW.
func writeChart(w io.Writer, title, foot string, panels []chartPanel) error {
	type page struct {
		W, H, BarH, LabelX, FootY int
		Title, Foot               string
		Panels                    []svgPanel
	}
	p := page{W: chartWidth, BarH: chartBarH, LabelX: chartLabelW - 8, Title: xmlText(title), Foot: xmlText(foot)}
	y := float64(chartTitleH)
	for _, pn := range panels {
		sp := svgPanel{Y: y + 20, Title: xmlText(pn.Title)}
		if len(pn.Parts) > 1 { // the legend, on the panel's title line
			x := float64(chartLabelW + chartBarW - 260)
			for i, name := range pn.Parts {
				sp.Legend = append(sp.Legend, svgLegend{X: x, Y: y + 9, TX: x + 16, TY: y + 20, Name: xmlText(name), Opacity: partOpacity(i)})
				x += 24 + 7*float64(len(name))
			}
		}
		most := 0.0
		for _, b := range pn.Bars {
			most = math.Max(most, sum(b.Parts))
		}
		y += chartPanelH
		for _, b := range pn.Bars {
			x := float64(chartLabelW)
			for i, v := range b.Parts {
				wd := 0.0
				if most > 0 {
					wd = v / most * chartBarW
				}
				sp.Rects = append(sp.Rects, svgRect{X: x, Y: y, W: wd, Fill: chartColour[b.Role], Opacity: partOpacity(i),
					LabelY: y + 15, Label: xmlText(b.Label), Bold: b.Role == "ours", FirstOfBar: i == 0})
				x += wd
			}
			last := &sp.Rects[len(sp.Rects)-1]
			last.Text, last.TextX = xmlText(b.Text), x+6
			y += chartBarH + chartGap
		}
		p.Panels = append(p.Panels, sp)
		y += 14
	}
	p.FootY = int(y) + 10
	p.H = p.FootY + 12
	return chartTmpl.Execute(w, p)
}

// xmlText escapes s for the text of an SVG element (text/template does not).
func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

func partOpacity(i int) string {
	if i == 0 {
		return "1"
	}
	return "0.4"
}

func sum(vs []float64) float64 {
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return s
}

// WriteSDKChart writes the SDK table's chart (make bench-sdk): each
// client's round trips/s, and its CPU per round trip, the client's and the
// broker's or server's. It writes nothing and says so when no client
// completed a run.
func WriteSDKChart(w io.Writer, runs []SDKRun) error {
	rate := chartPanel{Title: "round trips/s (higher is better)"}
	cpu := chartPanel{Title: "CPU µs per round trip (lower is better)", Parts: []string{"client", "broker or server"}}
	most := 0
	for _, r := range sdkRows(runs) {
		most = max(most, r.runs)
		if !r.withRate {
			continue
		}
		label := langName[r.lang] + " " + shortClient(r.client)
		rate.Bars = append(rate.Bars, chartBar{Label: label, Role: r.role, Parts: []float64{r.rate}, Text: thousands(r.rate)})
		parts, text := []float64{r.clientCPU}, fmt.Sprintf("%.1f", r.clientCPU)
		if r.hasTgt {
			parts = append(parts, r.tgtCPU)
			text += fmt.Sprintf(" + %.1f", r.tgtCPU)
		}
		cpu.Bars = append(cpu.Bars, chartBar{Label: label, Role: r.role, Parts: parts, Text: text})
	}
	if len(rate.Bars) == 0 {
		return fmt.Errorf("no client completed a run: no chart")
	}
	return writeChart(w, "Request/reply through the SDKs: ours (orange) against the peers' own clients (blue)",
		fmt.Sprintf("Medians of up to %d runs per client; grey: references. CPU: the client process's, then the broker's or server's.", most),
		[]chartPanel{rate, cpu})
}

// shortClient drops the table's parenthesised explanation from a client's
// name but keeps what the bar is ("reference: ...").
func shortClient(c string) string {
	if i := strings.Index(c, " (reference"); i >= 0 {
		return c[:i] + " (reference)"
	}
	return c
}

// targetName is how the peers chart names a target.
var targetName = map[string]string{"broker": "queen broker", "redis": "Redis lists", "nats": "NATS core"}

// WritePeersChart writes the comparison table's chart (make bench-peers):
// request/reply against each target, its round trips/s and its CPU per
// round trip, the target's and the load tool's. It fails when no reqreply
// result is among results.
func WritePeersChart(w io.Writer, results []*Result) error {
	idx := index(results)
	rate := chartPanel{Title: "round trips/s (higher is better)"}
	cpu := chartPanel{Title: "CPU µs per round trip (lower is better)", Parts: []string{"broker or server", "load tool"}}
	most, loadTool := 0, false
	for _, t := range Targets {
		runs := idx["reqreply/"+t]
		most = max(most, len(runs))
		v, ok := median(runs, func(r *Result) (float64, bool) { return r.Rate, r.Ops > 0 })
		if !ok {
			continue
		}
		role := "peer"
		if t == "broker" {
			role = "ours"
		}
		rate.Bars = append(rate.Bars, chartBar{Label: targetName[t], Role: role, Parts: []float64{v}, Text: thousands(v)})
		// The target's CPU, then the load tool's (absent from reports
		// made before the field): a part that is not known is 0 and "-".
		var parts []float64
		var texts []string
		for i, get := range []func(*Result) (float64, bool){cpuPerOp, clientPerOp} {
			c, ok := median(runs, get)
			switch {
			case ok:
				parts, texts = append(parts, c), append(texts, fmt.Sprintf("%.1f", c))
				loadTool = loadTool || i == 1
			default:
				parts, texts = append(parts, 0), append(texts, "-")
			}
		}
		cpu.Bars = append(cpu.Bars, chartBar{Label: targetName[t], Role: role, Parts: parts, Text: strings.Join(texts, " + ")})
	}
	if len(rate.Bars) == 0 {
		return fmt.Errorf("no reqreply result: no chart")
	}
	if !loadTool { // the reports predate the load tool's figure: the target's alone
		cpu.Parts = cpu.Parts[:1]
		for i := range cpu.Bars {
			b := &cpu.Bars[i]
			b.Parts, b.Text = b.Parts[:1], strings.TrimSuffix(b.Text, " + -")
		}
	}
	cpuNote := "the target's, then the load tool's"
	if !loadTool {
		cpuNote = "the target's"
	}
	return writeChart(w, "Request/reply: the broker (orange) against Redis lists and NATS core (blue)",
		fmt.Sprintf("Medians of up to %d runs per target, the same load tool against each. CPU: %s.", most, cpuNote),
		[]chartPanel{rate, cpu})
}
