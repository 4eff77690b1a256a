package conformance

import (
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/server"
)

// The operator metrics in a cell: each member shows the cell's size and that it is
// not fenced; an ack relayed to the owner counts its outcomes once, on the
// owner; and a member's page has every documented family, the relay's
// included, each with its HELP text.
func TestCellMetrics(t *testing.T) {
	t.Parallel()
	c := newSteadyTestCell(t)
	a, b := c.start(advertise(t), nil), c.start(advertise(t), nil)
	all := ids(a, b)
	c.waitLive(all...)

	q := queueOwnedBy(t, "cellmetrics", b.id, all...)
	a.push(t, q, "", `"x"`, `"y"`)
	p := a.pop(t, popq{"queue": q, "batch": "10"})
	if len(p.Messages) != 2 {
		t.Fatalf("pop through A: %d messages, want 2", len(p.Messages))
	}
	ids := p.ids()
	if got := a.ack(t, q, "", ackItem{ID: ids[0]}, ackItem{ID: ids[1], Status: "retry"}); strings.Join(got, " ") != "acked redelivered" {
		t.Fatalf("ack through A: %v", got)
	}

	ma, bodyA := a.scrape(t)
	mb, _ := b.scrape(t)
	for _, c := range []struct {
		who    string
		m      map[string]float64
		series string
		want   float64
	}{
		{"A", ma, "queen_ephemeral_cell_members", 2},
		{"B", mb, "queen_ephemeral_cell_members", 2},
		{"A", ma, "queen_ephemeral_cell_fenced", 0},
		{"B", mb, "queen_ephemeral_cell_fenced", 0},
		// The owner served the ack and counted it; A only relayed it.
		{"B", mb, `queen_ephemeral_ack_outcomes_total{outcome="acked"}`, 1},
		{"B", mb, `queen_ephemeral_ack_outcomes_total{outcome="redelivered"}`, 1},
		{"A", ma, `queen_ephemeral_ack_outcomes_total{outcome="acked"}`, 0},
		{"A", ma, `queen_ephemeral_ack_outcomes_total{outcome="redelivered"}`, 0},
		{"A", ma, "queen_ephemeral_relayed_total", 3},
		{"B", mb, "queen_ephemeral_relay_served_total", 3},
	} {
		if g, ok := c.m[c.series]; !ok || g != c.want {
			t.Errorf("%s: %s = %v (present %v), want %v", c.who, c.series, g, ok, c.want)
		}
	}

	help, _ := families(bodyA)
	for _, f := range server.Families() {
		if f.Name == "queen_ephemeral_refusals_total" {
			continue // made at the first refusal; none here
		}
		if help[f.Name] != f.Help {
			t.Errorf("A: family %s: HELP %q, want %q", f.Name, help[f.Name], f.Help)
		}
	}
	if t.Failed() {
		t.Logf("A's /metrics:\n%s", bodyA)
	}
}
