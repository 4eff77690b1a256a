package server

import (
	"bytes"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/puzpuzpuz/xsync/v4"

	"github.com/queenmq/ephemeral/engine"
	"github.com/queenmq/ephemeral/wire"
)

// GET /metrics: Prometheus text exposition (docs/server.md, metering and
// metrics; docs/operator.md lists every family, and metricfamilies.go holds
// each one's type, labels and HELP text).
//
// Counters that move per request are VictoriaMetrics/metrics counters made
// once and kept where the request already is: per tenant on tenantState,
// per route in an array indexed by routeID, per refusal code in a map that
// refusals (not messages) look up. Gauges are read from the engine when
// scraped.

const metricsPath = "/metrics"

// routeID names a route for the latency histograms.
type routeID uint8

const (
	routeOther routeID = iota // no route, or a 404 under a known prefix
	routePush
	routePop
	routeAck
	routeConfigure
	routeReset
	routeQueues
	routeDepth
	routeDeleteQueue
	routeHealth
	routeMetrics
	routeSystem
	routeGrants
	routeCellView
	numRoutes
)

var routeNames = [numRoutes]string{
	routeOther:       "other",
	routePush:        "push",
	routePop:         "pop",
	routeAck:         "ack",
	routeConfigure:   "configure",
	routeReset:       "reset",
	routeQueues:      "queues",
	routeDepth:       "depth",
	routeDeleteQueue: "delete_queue",
	routeHealth:      "health",
	routeMetrics:     "metrics",
	routeSystem:      "system",
	routeGrants:      "grants",
	routeCellView:    "cell",
}

// latencyBuckets cover a request served on the loop (tens of microseconds)
// up to a parked pop's longest wait.
var latencyBuckets = []float64{
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
	0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

type serverMetrics struct {
	set      *metrics.Set
	latency  [numRoutes]*metrics.PrometheusHistogram
	refusals *xsync.Map[string, *metrics.Counter]
	// outcomes are the ack outcomes, indexed by engine.Outcome: made at
	// start so that all four series show, zero included, and so that
	// counting one is an array index, not a lookup.
	outcomes [numOutcomes]*metrics.Counter
}

// numOutcomes is the size of the closed list of ack outcomes (docs/routes.md, ack).
const numOutcomes = int(engine.OutcomeUnknown) + 1

func newServerMetrics() *serverMetrics {
	metrics.ExposeMetadata(true) // # TYPE lines, so histograms read as histograms
	m := &serverMetrics{set: metrics.NewSet(), refusals: xsync.NewMap[string, *metrics.Counter]()}
	for r := range numRoutes {
		m.latency[r] = m.set.NewPrometheusHistogramExt(
			`queen_ephemeral_request_duration_seconds{route="`+routeNames[r]+`"}`, latencyBuckets)
	}
	for o := range numOutcomes {
		m.outcomes[o] = m.set.NewCounter(`queen_ephemeral_ack_outcomes_total{outcome="` + engine.Outcome(o).String() + `"}`)
	}
	return m
}

// ackOutcomes counts the outcomes of one ack call: tallied on the stack
// and added once per outcome seen, so an ack of 10,000 ids costs at most
// four atomic adds and no allocation (P3).
func (m *serverMetrics) ackOutcomes(out []engine.Outcome) {
	var n [numOutcomes]int
	for _, o := range out {
		// Outcome.String calls anything past the list unknown; so does this.
		n[min(o, engine.OutcomeUnknown)]++
	}
	for o, c := range n {
		if c > 0 {
			m.outcomes[o].Add(c)
		}
	}
}

// tenantCounters makes the metering counters of a new tenant, once.
func (m *serverMetrics) tenantCounters(tenant string) (pushed, delivered *metrics.Counter) {
	l := `{tenant="` + labelValue(tenant) + `"}`
	return m.set.GetOrCreateCounter("queen_ephemeral_pushed_messages_total" + l),
		m.set.GetOrCreateCounter("queen_ephemeral_delivered_messages_total" + l)
}

// refused counts one refusal of code.
func (m *serverMetrics) refused(code string) {
	c, ok := m.refusals.Load(code)
	if !ok {
		c, _ = m.refusals.LoadOrCompute(strings.Clone(code), func() (*metrics.Counter, bool) {
			return m.set.GetOrCreateCounter(`queen_ephemeral_refusals_total{code="` + labelValue(code) + `"}`), false
		})
	}
	c.Inc()
}

// observe records a request of route that started at start and is answered
// now.
func (m *serverMetrics) observe(r routeID, start time.Time) {
	m.latency[r].Update(time.Since(start).Seconds())
}

// labelValue escapes v for a label value of the text format.
func labelValue(v string) string {
	if !strings.ContainsAny(v, "\\\"\n") {
		return v
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

// serveMetrics answers GET /metrics off the loop: the engine's gauges walk
// every tenant's queues, which a loop should not wait for.
func (cs *conn) serveMetrics(req *wire.Request) {
	// The page names every tenant: it follows the admin scope unless the
	// operator made it public (docs/server.md, "Admin scope").
	if !cs.s.cfg.MetricsPublic && !cs.adminAccess(req, needOperator, nil) {
		return
	}
	head := req.Head(200)
	head.ContentType = "text/plain; version=0.0.4; charset=utf-8"
	cs.goBusy()
	go func() {
		body := cs.s.appendMetrics(nil)
		cs.answerAsync(wire.AppendResponse(nil, head, body))
	}()
}

// appendMetrics appends every series in the text exposition format.
func (s *Server) appendMetrics(b []byte) []byte {
	var buf bytes.Buffer
	s.m.set.WritePrometheus(&buf)
	b = fillHelp(b, buf.Bytes())

	e := s.e
	b = family(b, "queen_ephemeral_build_info")
	b = append(b, `queen_ephemeral_build_info{version="`...)
	b = append(b, labelValue(s.cfg.Version)...)
	b = append(b, `",commit="`...)
	b = append(b, labelValue(s.cfg.Commit)...)
	b = append(b, `",goversion="`...)
	b = append(b, labelValue(runtime.Version())...)
	b = append(b, "\"} 1\n"...)

	b = family(b, "queen_ephemeral_dropped_total")
	for _, c := range causes {
		b = sample(b, "queen_ephemeral_dropped_total", "cause", c.String(), e.Drops(c))
	}

	var parked, cell int64
	var declared, implicit int
	var tenants []byte
	e.TenantGauges(func(tenant string, bytes int64, d, i int, p int64) {
		declared += d
		implicit += i
		parked += p
		tenants = sample(tenants, "queen_ephemeral_tenant_bytes", "tenant", labelValue(tenant), bytes)
	})
	cell = e.CellBytes()

	b = family(b, "queen_ephemeral_parked_pops")
	b = append(b, "queen_ephemeral_parked_pops "...)
	b = strconv.AppendInt(b, parked, 10)
	b = append(b, '\n')
	b = family(b, "queen_ephemeral_bytes")
	b = sample(b, "queen_ephemeral_bytes", "scope", "cell", cell)
	b = family(b, "queen_ephemeral_max_bytes")
	b = sample(b, "queen_ephemeral_max_bytes", "scope", "cell", e.MaxBytes())
	b = family(b, "queen_ephemeral_tenant_bytes")
	b = append(b, tenants...)
	b = family(b, "queen_ephemeral_queues")
	b = sample(b, "queen_ephemeral_queues", "tier", "declared", int64(declared))
	b = sample(b, "queen_ephemeral_queues", "tier", "implicit", int64(implicit))
	b = s.appendQueueSeries(b)
	b = s.appendCellSeries(b)
	return appendProcessMetrics(b, &buf)
}

// appendProcessMetrics appends the process's and the Go runtime's own
// families (RSS, heap, GC pauses, goroutines, descriptors, CPU), as
// VictoriaMetrics/metrics writes them under the names Prometheus's Go
// client uses (go_*, process_*): a broker whose main risk is memory shows
// its RSS beside its budget. They read /proc, which is why the scrape runs
// off the loop (docs/operator.md, "Process and runtime").
func appendProcessMetrics(b []byte, buf *bytes.Buffer) []byte {
	buf.Reset()
	metrics.WriteProcessMetrics(buf)
	metrics.WriteFDMetrics(buf)
	return append(b, buf.Bytes()...)
}

var causes = [...]engine.Cause{engine.CauseBounds, engine.CauseTTL, engine.CauseRetry}

// declaredRow is one declared queue's gauges, gathered to be sorted.
type declaredRow struct {
	tenant, queue string
	g             engine.QueueGauges
}

// appendQueueSeries appends the per-queue families for declared queues
// only: an implicit queue (an inbox) would be a series per request/reply
// client, and those stay in the aggregates above. Sorted by tenant and
// queue so that a page reads (and diffs) the same from scrape to scrape;
// the scrape runs off the loops, so the sort's cost is nobody's latency.
func (s *Server) appendQueueSeries(b []byte) []byte {
	var rows []declaredRow
	s.e.DeclaredGauges(func(tenant, queue string, g engine.QueueGauges) {
		rows = append(rows, declaredRow{tenant, queue, g})
	})
	slices.SortFunc(rows, func(x, y declaredRow) int {
		if c := strings.Compare(x.tenant, y.tenant); c != 0 {
			return c
		}
		return strings.Compare(x.queue, y.queue)
	})
	b = family(b, "queen_ephemeral_queue_depth")
	for _, r := range rows {
		b = queueSample(b, "queen_ephemeral_queue_depth", r, "", r.g.Depth)
	}
	b = family(b, "queen_ephemeral_queue_bytes")
	for _, r := range rows {
		b = queueSample(b, "queen_ephemeral_queue_bytes", r, "", r.g.Bytes)
	}
	b = family(b, "queen_ephemeral_queue_dropped_total")
	for _, r := range rows {
		b = queueSample(b, "queen_ephemeral_queue_dropped_total", r, "bounds", r.g.Drops.Bounds)
		b = queueSample(b, "queen_ephemeral_queue_dropped_total", r, "ttl", r.g.Drops.TTL)
		b = queueSample(b, "queen_ephemeral_queue_dropped_total", r, "retry", r.g.Drops.Retry)
	}
	return b
}

// queueSample appends name{tenant,queue[,cause]} v.
func queueSample(b []byte, name string, r declaredRow, cause string, v int64) []byte {
	b = append(b, name...)
	b = append(b, `{tenant="`...)
	b = append(b, labelValue(r.tenant)...)
	b = append(b, `",queue="`...)
	b = append(b, labelValue(r.queue)...)
	if cause != "" {
		b = append(b, `",cause="`...)
		b = append(b, cause...)
	}
	b = append(b, `"} `...)
	b = strconv.AppendInt(b, v, 10)
	return append(b, '\n')
}

// appendCellSeries appends the membership gauges of a member of a cell,
// read from its current view; a broker outside a cell shows none.
func (s *Server) appendCellSeries(b []byte) []byte {
	if s.cfg.Cell == nil {
		return b
	}
	v := s.cfg.Cell.View()
	var members int
	if v != nil { // no view yet: no members, and fenced
		members = len(v.Members)
	}
	b = family(b, "queen_ephemeral_cell_members")
	b = append(b, "queen_ephemeral_cell_members "...)
	b = strconv.AppendInt(b, int64(members), 10)
	b = append(b, '\n')
	b = family(b, "queen_ephemeral_cell_fenced")
	b = append(b, "queen_ephemeral_cell_fenced "...)
	if v.Fenced() {
		b = append(b, "1\n"...)
	} else {
		b = append(b, "0\n"...)
	}
	return b
}

// fillHelp appends src, VictoriaMetrics/metrics' page, to dst with the text
// of each "# HELP name" line filled in from families: the library writes
// the line but has no way to be given its text.
func fillHelp(dst, src []byte) []byte {
	for len(src) > 0 {
		line := src
		if i := bytes.IndexByte(src, '\n'); i >= 0 {
			line, src = src[:i], src[i+1:]
		} else {
			src = nil
		}
		dst = append(dst, line...)
		if name, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok && bytes.IndexByte(name, ' ') < 0 {
			if f, ok := familyByName[string(name)]; ok {
				dst = append(dst, ' ')
				dst = append(dst, f.Help...)
			}
		}
		dst = append(dst, '\n')
	}
	return dst
}

// family appends the HELP and TYPE lines of the family name, from families.
// A name not listed there gets an empty HELP and the type untyped, which
// the tests of every scrape refuse; a broker in production does not stop
// for it.
func family(b []byte, name string) []byte {
	f, ok := familyByName[name]
	if !ok {
		f.Type = "untyped"
	}
	b = append(b, "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, f.Help...)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, f.Type...)
	return append(b, '\n')
}

// sample appends name{label="value"} v; value is escaped already.
func sample(b []byte, name, label, value string, v int64) []byte {
	b = append(b, name...)
	b = append(b, '{')
	b = append(b, label...)
	b = append(b, `="`...)
	b = append(b, value...)
	b = append(b, `"} `...)
	b = strconv.AppendInt(b, v, 10)
	return append(b, '\n')
}
