package engine

// TenantGauges calls fn once per tenant the engine knows, with its
// footprint (payload bytes plus charges: what its allowance counts), its
// live queues by tier (declared, implicit) and the pops parked on them. It
// reads atomics only, takes no partition lock and does not allocate per
// queue: it is meant for a metrics scrape. Tenants come in no particular
// order.
func (e *Engine) TenantGauges(fn func(tenant string, bytes int64, declared, implicit int, parked int64)) {
	e.tenants.Range(func(name string, t *tenant) bool {
		var declared, implicit int
		var parked int64
		t.queues.Range(func(_ string, q *Queue) bool {
			if q = q.live(); q == nil {
				return true
			}
			if q.declared.Load() {
				declared++
			} else {
				implicit++
			}
			parked += int64(q.parked.Load())
			return true
		})
		fn(name, t.footprint.Load(), declared, implicit, parked)
		return true
	})
}

// QueueGauges are one declared queue's gauges for a metrics scrape.
type QueueGauges struct {
	Depth int64 // pending messages (D5), as the listing's depth
	Bytes int64 // payload bytes held, as the listing's bytes
	Drops Drops // since the queue was made
}

// DeclaredGauges calls fn once per live declared queue with its gauges,
// read from atomics with no partition lock and no allocation per queue,
// for a metrics scrape. Implicit queues (inboxes) are skipped: there may
// be a hundred thousand of them, and a series each would cost the scraper
// more than the broker; they stay in the aggregates (TenantGauges, Drops).
// The walk still visits every queue to find the declared ones, which is
// what TenantGauges does too; the scrape runs off the event loops.
func (e *Engine) DeclaredGauges(fn func(tenant, queue string, g QueueGauges)) {
	e.tenants.Range(func(name string, t *tenant) bool {
		t.queues.Range(func(_ string, q *Queue) bool {
			if q = q.live(); q == nil || !q.declared.Load() {
				return true
			}
			fn(name, q.name, QueueGauges{
				Depth: max(0, q.length.Load()-q.reclaimableMsgs.Load()),
				Bytes: q.bytes.Load(),
				Drops: Drops{
					Bounds: q.drops[CauseBounds].Load(),
					TTL:    q.drops[CauseTTL].Load(),
					Retry:  q.drops[CauseRetry].Load(),
				},
			})
			return true
		})
		return true
	})
}
