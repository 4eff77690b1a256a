package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/queenmq/ephemeral/server"
)

// metricName finds the broker's metric names in a PromQL expression.
var metricName = regexp.MustCompile(`\bqueen_ephemeral_[a-z_]+\b`)

// byLabels finds the label lists of by (...) and on (...) clauses.
var byLabels = regexp.MustCompile(`\b(?:by|on)\s*\(([^)]*)\)`)

// checkExpr requires every queen_ephemeral_ name in expr to be a family the
// broker exports (a histogram's _bucket, _sum and _count series included),
// at least one to be named, and every label an aggregation groups by to be
// a label of one of them (or a target label Prometheus adds).
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	fams := map[string]server.Family{}
	for _, f := range server.Families() {
		fams[f.Name] = f
	}
	names := metricName.FindAllString(expr, -1)
	if len(names) == 0 && !strings.Contains(expr, "up{") {
		t.Errorf("%s: %q names no broker metric", where, expr)
	}
	labels := map[string]bool{"instance": true, "job": true, "le": true}
	for _, n := range names {
		f, ok := fams[n]
		if !ok {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if base, cut := strings.CutSuffix(n, suf); cut && fams[base].Type == "histogram" {
					f, ok = fams[base], true
				}
			}
		}
		if !ok {
			t.Errorf("%s: %s is not a metric family the broker exports (server.Families)", where, n)
			continue
		}
		for _, l := range f.Labels {
			labels[l] = true
		}
	}
	for _, m := range byLabels.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				t.Errorf("%s: groups by label %q, which none of %v has", where, l, names)
			}
		}
	}
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// The alert rules parse as Prometheus rule groups, every rule has a
// severity, a summary and a description, names are unique, and every expr
// names only families the broker exports.
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile("prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true) // a misspelt key is an error, as promtool makes it
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("prometheus-alerts.yml: %v", err)
	}
	var alerts []string
	for _, g := range doc.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a name and rules are needed", g.Name)
		}
		for _, r := range g.Rules {
			where := "alert " + r.Alert
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.For == "" {
				t.Errorf("%s: alert, expr and for are needed: %+v", where, r)
			}
			if slices.Contains(alerts, r.Alert) {
				t.Errorf("%s: named twice", where)
			}
			alerts = append(alerts, r.Alert)
			switch r.Labels["severity"] {
			case "info", "warning", "critical":
			default:
				t.Errorf("%s: severity %q", where, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: a summary and a description are needed", where)
			}
			checkExpr(t, where, r.Expr)
		}
	}
	// The alerts docs/operator.md lists, and the cell's.
	for _, want := range []string{
		"QueenBrokerNearByteBudget", "QueenMessagesDropped", "QueenRefusalsRising",
		"QueenCellMemberLost", "QueenForwardFailedRising",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s among %v", want, alerts)
		}
	}
	// Every alert is documented in the operator guide.
	guide, err := os.ReadFile("../docs/operator.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !strings.Contains(string(guide), "`"+a+"`") {
			t.Errorf("docs/operator.md does not explain %s", a)
		}
	}
}

type panel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// The dashboard parses, takes its Prometheus data source from a variable,
// and every panel's queries name only families the broker exports; every
// family but the histogram buckets' is on some panel.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q", d.Title, d.UID)
	}
	var dsVar bool
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus" {
			dsVar = true
		}
	}
	if !dsVar {
		t.Errorf("no datasource variable of type prometheus: %+v", d.Templating.List)
	}
	seen := map[string]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			where := "panel " + p.Title
			if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: data source %+v, want the ${datasource} variable", where, p.Datasource)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no queries", where)
			}
			for _, tg := range p.Targets {
				checkExpr(t, where, tg.Expr)
				for _, n := range metricName.FindAllString(tg.Expr, -1) {
					seen[strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count")] = true
				}
			}
		}
	}
	walk(d.Panels)
	for _, f := range server.Families() {
		if !seen[f.Name] {
			t.Errorf("family %s is on no panel", f.Name)
		}
	}
}

// The systemd unit has the three sections, an EnvironmentFile, a
// descriptor limit and the hardening the operator guide describes.
func TestSystemdUnit(t *testing.T) {
	raw, err := os.ReadFile("queen.service")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
			keys[section] = ""
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Errorf("not a key=value line: %q", line)
				continue
			}
			keys[section+k] = v
		}
	}
	for k, want := range map[string]string{
		"[Service]ExecStart":       "/usr/local/bin/queen",
		"[Service]EnvironmentFile": "-/etc/queen/queen.env",
		"[Service]LimitNOFILE":     "1048576",
		"[Service]NoNewPrivileges": "yes",
		"[Service]ProtectSystem":   "strict",
		"[Service]DynamicUser":     "yes",
		"[Service]StateDirectory":  "queen",
		"[Service]Environment":     "QUEEN_DATA_DIR=/var/lib/queen/data",
		"[Install]WantedBy":        "multi-user.target",
	} {
		if got, ok := keys[k]; !ok || got != want {
			t.Errorf("%s = %q (present %v), want %q", k, got, ok, want)
		}
	}
	if _, ok := keys["[Unit]"]; !ok {
		t.Error("no [Unit] section")
	}
	// The environment file sets only variables queen reads (QUEEN_*, HOST,
	// PORT, GOMEMLIMIT), one per line.
	env, err := os.ReadFile("queen.env")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(env), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "#")
		k, _, ok := strings.Cut(line, "=")
		if !ok || strings.Contains(k, " ") {
			continue // a comment
		}
		if !strings.HasPrefix(k, "QUEEN_") && k != "HOST" && k != "PORT" && k != "GOMEMLIMIT" {
			t.Errorf("queen.env sets %s, which queen does not read", k)
		}
	}
}

// The operator guide documents every family the broker exports, each in a
// table row of its own.
func TestOperatorGuideDocumentsEveryFamily(t *testing.T) {
	guide, err := os.ReadFile("../docs/operator.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range server.Families() {
		if !strings.Contains(string(guide), "| `"+f.Name+"` | "+f.Type+" |") {
			t.Errorf("docs/operator.md has no table row for %s (%s)", f.Name, f.Type)
		}
	}
}

// With promtool on PATH (Debian's prometheus package has it), the rules'
// PromQL is checked and their unit tests (prometheus-alerts_test.yml:
// alerts that must fire on given series, with their labels and texts, and
// ones that must not) are run. Without it the test says so and skips.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH: the rules' PromQL is not checked here")
	}
	for _, args := range [][]string{
		{"check", "rules", "prometheus-alerts.yml"},
		{"test", "rules", "prometheus-alerts_test.yml"},
	} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
