package gateway

import (
	"bytes"

	"github.com/VictoriaMetrics/metrics"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/queenmq/ephemeral/wire"
)

// gatewayMetrics are the gateway's series on GET /metrics
// (docs/gateway.md, "Metrics"), all named queen_gateway_*.
type gatewayMetrics struct {
	set       *metrics.Set
	forwarded *metrics.Counter
	dials     *metrics.Counter
	// lost counts answers lost after their request was written (a broker's
	// connection or link failed): each closed its client's connection.
	lost *metrics.Counter
	// acceptErrors counts accept errors (out of descriptors, mostly).
	acceptErrors *metrics.Counter
	// idleShed counts idle clients closed so that a new one could be
	// accepted when descriptors ran out (shed.go).
	idleShed *metrics.Counter
	refusals *xsync.Map[string, *metrics.Counter]
	// toOwner and fallback count the pushes, pops and acks sent in front
	// of a cell: on the link to their queue's owner, or to any configured
	// member, which relays them (owners.go).
	toOwner, fallback *metrics.Counter
	// viewReads counts the view reads the gateway sent (cellwatch.go).
	viewReads *metrics.Counter
}

// sent counts a forwarded request, and how it was routed in a cell.
func (m *gatewayMetrics) sent(how routedHow) {
	m.forwarded.Inc()
	switch how {
	case routedOwner:
		m.toOwner.Inc()
	case routedFallback:
		m.fallback.Inc()
	}
}

func (g *Gateway) initMetrics() {
	m := &g.m
	metrics.ExposeMetadata(true) // # TYPE lines, so the runtime's histograms read as histograms
	m.set = metrics.NewSet()
	m.refusals = xsync.NewMap[string, *metrics.Counter]()
	m.forwarded = m.set.NewCounter("queen_gateway_forwarded_total")
	m.dials = m.set.NewCounter("queen_gateway_upstream_dials_total")
	m.lost = m.set.NewCounter("queen_gateway_answers_lost_total")
	m.acceptErrors = m.set.NewCounter("queen_gateway_accept_errors_total")
	m.idleShed = m.set.NewCounter("queen_gateway_idle_shed_total")
	m.toOwner = m.set.NewCounter(`queen_gateway_owner_routed_total{how="owner"}`)
	m.fallback = m.set.NewCounter(`queen_gateway_owner_routed_total{how="fallback"}`)
	m.viewReads = m.set.NewCounter("queen_gateway_cell_view_reads_total")
	m.set.NewGauge("queen_gateway_cell_members", func() float64 {
		if v := g.owners.Load(); v != nil {
			return float64(len(v.ids))
		}
		return 0
	})
	m.set.NewGauge("queen_gateway_clients", func() float64 { return float64(g.clients.Load()) })
	m.set.NewGauge("queen_gateway_links", func() float64 { return float64(g.links.Load()) })
	m.set.NewGauge("queen_gateway_client_links", func() float64 { return float64(g.clientLinks.Load()) })
	m.set.NewGauge("queen_gateway_usage_writes", func() float64 { return float64(g.flushes.Load()) })
	m.set.NewGauge("queen_gateway_parked", func() float64 {
		var n int64
		g.tenants.Range(func(_ string, ts *tenantState) bool {
			n += ts.parked.Load()
			return true
		})
		return float64(n)
	})
}

// refused counts a refusal the gateway answered, by its code.
func (m *gatewayMetrics) refused(code string) {
	c, _ := m.refusals.LoadOrCompute(code, func() (*metrics.Counter, bool) {
		return m.set.GetOrCreateCounter(`queen_gateway_refusals_total{code="` + code + `"}`), false
	})
	c.Inc()
}

// appendMetrics answers GET /metrics (head: the request's 200 head): the
// gateway's series, then the process's and the Go runtime's own (RSS, heap,
// GC pauses, goroutines, descriptors, CPU), as VictoriaMetrics/metrics
// writes them under the names Prometheus's Go client uses
// (docs/operator.md, "Process and runtime"). Those read /proc, so it runs
// off the loop.
func (g *Gateway) appendMetrics(dst []byte, h wire.Head) []byte {
	var buf bytes.Buffer
	g.m.set.WritePrometheus(&buf)
	metrics.WriteProcessMetrics(&buf)
	metrics.WriteFDMetrics(&buf)
	h.ContentType = "text/plain; version=0.0.4"
	return wire.AppendResponse(dst, h, buf.Bytes())
}

// appendHealth answers GET /health: 200 while the gateway serves.
func appendHealth(dst []byte, req *wire.Request, g *Gateway) []byte {
	body := `{"status":"ok"}`
	if g.stopping.Load() {
		h := req.Head(503)
		return wire.AppendResponse(dst, h, []byte(`{"status":"stopping"}`))
	}
	return wire.AppendResponse(dst, req.Head(200), []byte(body))
}
