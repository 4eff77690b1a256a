package server

import (
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/queenmq/ephemeral/internal/ratebucket"
	"github.com/queenmq/ephemeral/store"
)

// tenantState is what the server keeps per tenant: whether it has a grant
// row, its message rate and bucket (D14) and its metering counters. It is
// made once per tenant and never removed.
type tenantState struct {
	granted atomic.Bool
	rate    atomic.Int64 // messages per second, 0 = unlimited
	bucket  ratebucket.Bucket

	// Metering (made once per tenant: no lookup per message).
	pushed    *metrics.Counter
	delivered *metrics.Counter

	name string // the tenant's, for requests that carry it as bytes (tenantName)
}

// tenantName returns the tenant named by b as a string: the name its state
// keeps once the tenant has been seen, so that a relayed or gateway-link
// frame, whose tenant arrives as bytes, does not allocate one per request.
func (s *Server) tenantName(b []byte) string {
	if ts, ok := s.tenants.Load(bytesString(b)); ok {
		return ts.name
	}
	return string(b)
}

// tenantState returns the state of tenant, creating it on the default rate.
func (s *Server) tenantState(tenant string) *tenantState {
	if ts, ok := s.tenants.Load(tenant); ok {
		return ts
	}
	ts, _ := s.tenants.LoadOrCompute(tenant, func() (*tenantState, bool) {
		ts := &tenantState{name: tenant}
		ts.rate.Store(s.cfg.TenantMsgsPerSecond)
		ts.pushed, ts.delivered = s.m.tenantCounters(tenant)
		return ts, false
	})
	return ts
}

// setGrant applies a grant row (or its absence) to memory: the engine's
// allowances and the rate. A rate that changes refills the bucket.
//
// In a cell g is the grant as stored; this member applies its share of the
// byte allowance and the rate, and the engine divides the queue allowance's
// implicit part by members (share.go).
func (s *Server) setGrant(tenant string, g *store.Grant) {
	members := int64(1)
	if g != nil {
		var sh store.Grant
		sh, members = s.grantShare(*g)
		g = &sh
	}
	ts := s.tenantState(tenant)
	ts.granted.Store(g != nil)
	rate := s.cfg.TenantMsgsPerSecond
	if g != nil {
		rate = g.MessagesPerSecond
	}
	if ts.rate.Swap(rate) != rate {
		ts.bucket.Refill()
	}
	if g != nil {
		s.e.SetTenantLimitsShared(tenant, g.MaxBytes, g.MaxQueues, members)
	} else {
		s.e.ClearTenantLimits(tenant)
	}
}

// take admits n messages of the tenant under its rate (D14): 0 when
// admitted, else the seconds to wait. With no rate it takes no lock.
func (ts *tenantState) take(n int) int { return ts.bucket.Take(ts.rate.Load(), n) }

// refund gives back what a push admitted by the rate but refused later
// (queue bounds, allowance) took: a refused push spends nothing.
func (ts *tenantState) refund(n int) { ts.bucket.Refund(ts.rate.Load(), n) }
