package server

import (
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/queenmq/ephemeral/store"
)

// tenantState is what the server keeps per tenant: whether it has a grant
// row, its message rate bucket (D14; take and refund in ratebucket.go) and
// its metering counters. It is made once per tenant and never removed.
//
// Invariant, whenever mu is free: limited == (rate > 0) and tokens <= rate.
type tenantState struct {
	granted atomic.Bool
	limited atomic.Bool // rate > 0: pushes take from the bucket
	mu      sync.Mutex
	rate    int64   // messages per second, 0 = unlimited
	tokens  float64 // may be negative: debt
	last    int64   // monotonic nanos of the last refill

	// Metering (made once per tenant: no lookup per message).
	pushed    *metrics.Counter
	delivered *metrics.Counter
}

// tenantState returns the state of tenant, creating it on the default rate.
func (s *Server) tenantState(tenant string) *tenantState {
	if ts, ok := s.tenants.Load(tenant); ok {
		return ts
	}
	ts, _ := s.tenants.LoadOrCompute(tenant, func() (*tenantState, bool) {
		ts := &tenantState{rate: s.cfg.TenantMsgsPerSecond, tokens: float64(s.cfg.TenantMsgsPerSecond)}
		ts.limited.Store(ts.rate > 0)
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
	ts.mu.Lock()
	rate := s.cfg.TenantMsgsPerSecond
	if g != nil {
		rate = g.MessagesPerSecond
	}
	if rate != ts.rate {
		ts.rate, ts.tokens, ts.last = rate, float64(rate), 0
	}
	ts.limited.Store(ts.rate > 0)
	ts.mu.Unlock()
	if g != nil {
		s.e.SetTenantLimitsShared(tenant, g.MaxBytes, g.MaxQueues, members)
	} else {
		s.e.ClearTenantLimits(tenant)
	}
}
