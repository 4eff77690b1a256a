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
