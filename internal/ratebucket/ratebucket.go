// Package ratebucket is the token bucket behind a tenant's messages per
// second, at the broker (D14, docs/decisions.md#d14-identity) and at the
// gateway (docs/gateway.md): it starts full, holds one second of
// allowance, admits while it is not empty and may go below zero, so the
// debt of a large batch delays what follows instead of refusing the batch.
package ratebucket

import (
	"math"
	"sync"
	"time"
)

// monoStart anchors monotonic time for the buckets.
var monoStart = time.Now()

// Bucket is one tenant's bucket. The zero value is a full bucket; the rate
// is passed to each call, so a rate that changes takes effect at once (a
// bucket holding more than a new, lower rate is cut down to it).
type Bucket struct {
	mu      sync.Mutex
	started bool
	tokens  float64 // may be negative: debt
	last    int64   // monotonic nanos of the last take
}

// Take admits n messages at rate per second (0 or less: unlimited). It
// returns 0 when admitted, else the whole seconds to wait (at least 1);
// a refusal spends nothing.
func (b *Bucket) Take(rate int64, n int) int {
	if rate <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := float64(rate)
	b.refill(r, int64(time.Since(monoStart)))
	if b.tokens <= 0 {
		return max(1, int(math.Ceil(-b.tokens/r)))
	}
	b.tokens -= float64(n)
	return 0
}

// Charge spends n messages whatever the bucket holds: what was already
// served (a pop's deliveries, known once it is answered) is paid for after
// the fact, and its debt delays what follows.
func (b *Bucket) Charge(rate int64, n int) {
	if rate <= 0 || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(float64(rate), int64(time.Since(monoStart)))
	b.tokens -= float64(n)
}

// refill adds what rate r earned since the last call, up to one second's
// worth; a bucket's first call fills it. b.mu is held.
func (b *Bucket) refill(r float64, now int64) {
	if !b.started {
		b.started, b.tokens = true, r
	} else {
		b.tokens = math.Min(r, b.tokens+r*float64(now-b.last)/1e9)
	}
	b.last = now
}

// Refill fills the bucket again (a tenant whose rate changed starts on
// the new rate's full second).
func (b *Bucket) Refill() {
	b.mu.Lock()
	b.started = false
	b.mu.Unlock()
}

// Refund gives back what an admitted batch took when it was refused later
// for another reason: a refused batch spends nothing.
func (b *Bucket) Refund(rate int64, n int) {
	if rate <= 0 {
		return
	}
	b.mu.Lock()
	b.tokens = math.Min(float64(rate), b.tokens+float64(n))
	b.mu.Unlock()
}
