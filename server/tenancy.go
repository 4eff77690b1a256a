package server

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/queenmq/ephemeral/store"
	"github.com/queenmq/ephemeral/wire"
)

// tenantState is what the server keeps per tenant: whether it has a grant
// row, and its message rate bucket (D14).
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

// monoStart anchors monotonic time for the rate buckets.
var monoStart = time.Now()

// take admits n messages of tenant under its rate (D14): a push is admitted
// while the bucket is not empty and may take it below zero; a refused push
// spends nothing. It returns 0 when admitted, else the seconds to wait.
func (ts *tenantState) take(n int) int {
	if !ts.limited.Load() {
		return 0 // no rate: no lock on the push path
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.rate <= 0 {
		return 0
	}
	now := int64(time.Since(monoStart))
	rate := float64(ts.rate)
	if ts.last != 0 {
		ts.tokens = math.Min(rate, ts.tokens+rate*float64(now-ts.last)/1e9)
	}
	ts.last = now
	if ts.tokens <= 0 {
		return max(1, int(math.Ceil(-ts.tokens/rate)))
	}
	ts.tokens -= float64(n)
	return 0
}

// refund gives back what a push admitted by the rate but refused later
// (queue bounds, allowance) took: a refused push spends nothing.
func (ts *tenantState) refund(n int) {
	if !ts.limited.Load() {
		return
	}
	ts.mu.Lock()
	if ts.rate > 0 {
		ts.tokens = math.Min(float64(ts.rate), ts.tokens+float64(n))
	}
	ts.mu.Unlock()
}

// ---------------------------------------------------------------------------
// The kill switch (D15)

// killSwitch returns the state in force.
func (s *Server) killSwitch() store.KillSwitch {
	s.ksMu.Lock()
	defer s.ksMu.Unlock()
	return s.ks
}

// setKillSwitch applies k in memory at once, answers parked pops empty when
// it pauses, and has the persister write it.
func (s *Server) setKillSwitch(k store.KillSwitch) {
	s.ksMu.Lock()
	s.ks = k
	s.ksGen++
	// Under the lock, so that a stored kill switch applied concurrently
	// (applyStoredKillSwitch) cannot leave the flags of the other one.
	s.paused.Store(!k.Enabled)
	s.retryAfter.Store(max(1, k.RetryAfterSeconds))
	s.ksMu.Unlock()
	if !k.Enabled {
		s.e.ReleaseWaiters()
	}
	select {
	case s.ksDirty <- struct{}{}:
	default:
	}
}

// ksGenerationNow is the count of the operator's changes on this broker.
func (s *Server) ksGenerationNow() uint64 {
	s.ksMu.Lock()
	defer s.ksMu.Unlock()
	return s.ksGen
}

// applyStoredKillSwitch applies k, read from the store by a reconcile that
// began at kill switch generation gen, unless memory is newer: an operator
// set one here since gen, or one set here is not written yet (D15: applied
// at once, kept in the store once it answers; the stored value is then the
// older). It reports whether it changed anything. Pausing answers parked
// pops empty, as setting does. deferred reports that memory was newer: the
// caller looks again later, since the write that will settle it may be
// one it has already counted.
func (s *Server) applyStoredKillSwitch(k store.KillSwitch, gen uint64) (changed, deferred bool) {
	s.ksMu.Lock()
	if s.ksGen != gen || s.ksWritten != s.ksGen {
		s.ksMu.Unlock()
		return false, true
	}
	if s.ks == k {
		s.ksMu.Unlock()
		return false, false
	}
	s.ks = k
	s.paused.Store(!k.Enabled)
	s.retryAfter.Store(max(1, k.RetryAfterSeconds))
	s.ksMu.Unlock()
	if !k.Enabled {
		s.e.ReleaseWaiters()
	}
	return true, false
}

// persistKillSwitch writes the kill switch whenever it changes, retrying
// until it is written (D15: applied in memory even when the store is down,
// kept in the store once it answers).
func (s *Server) persistKillSwitch() {
	var written uint64
	for {
		select {
		case <-s.ksDirty:
		case <-s.quit:
			return
		}
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			s.ksMu.Lock()
			k, gen := s.ks, s.ksGen
			s.ksMu.Unlock()
			if gen == written {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StoreTimeout)
			err := store.SaveKillSwitch(ctx, s.st, k)
			cancel()
			if err == nil {
				written = gen
				s.ksMu.Lock()
				s.ksWritten = max(s.ksWritten, gen)
				s.ksMu.Unlock()
				continue
			}
			s.cfg.Logger.Warn("the kill switch could not be written; retrying", "err", err, "in", delay)
			select {
			case <-time.After(delay):
			case <-s.quit:
				return
			}
		}
	}
}

var errDisabledMsg = "an operator paused the ephemeral surface"

// ---------------------------------------------------------------------------
// Gates, outermost first (D7)

// Refusals of the gates, allocated once.
var (
	errFeatureGated = &wire.Error{Status: 403, Code: codeFeatureGated, Msg: "the tenant is not granted the ephemeral class"}
	errRateLimited  = &wire.Error{Status: 429, Code: codeRateLimited, Msg: "the tenant is over its messages-per-second allowance"}
	errDisabled     = &wire.Error{Status: 503, Code: codeDisabled, Msg: errDisabledMsg}
)

// admit runs identity, then the kill switch and the
// grant (D7). It sets cs.tenant and cs.ts, or answers the refusal.
func (cs *conn) admit(req *wire.Request, need Access) bool {
	s := cs.s
	tenant, level, werr := s.auth.identify(req)
	if werr != nil {
		cs.out = s.appendError(cs.out, req.Head(0), werr)
		return false
	}
	if level&need != need {
		cs.out = s.appendError(cs.out, req.Head(0), errLevel)
		return false
	}
	cs.tenant, cs.access = tenant, level
	if s.paused.Load() {
		head := req.Head(0)
		head.RetryAfter = int(s.retryAfter.Load())
		cs.out = s.appendError(cs.out, head, errDisabled)
		return false
	}
	cs.ts = s.tenantState(tenant)
	if s.cfg.RequireGrant {
		if !cs.ts.granted.Load() {
			cs.out = s.appendError(cs.out, req.Head(0), errFeatureGated)
			return false
		}
	}
	return true
}

// rateLimited refuses a push of n messages over the tenant's rate (after
// shape, before the queue's bounds, D7).
func (cs *conn) rateLimited(req *wire.Request, n int) bool {
	wait := cs.ts.take(n)
	if wait == 0 {
		return false
	}
	head := req.Head(0)
	head.RetryAfter = wait
	cs.out = cs.s.appendError(cs.out, head, errRateLimited)
	return true
}
