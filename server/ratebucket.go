package server

import (
	"math"
	"time"
)

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
