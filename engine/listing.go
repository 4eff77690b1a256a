package engine

// A listing walked as it is written: the server streams the queue listing
// of a tenant with a million queues without holding it whole (docs/server.md,
// "The listing").

// QueueCount returns how many queues the tenant holds (a queue being
// deleted may still count). It reads a counter; it walks nothing.
func (e *Engine) QueueCount(tenant string) int {
	t, ok := e.tenants.Load(tenant)
	if !ok {
		return 0
	}
	return t.queues.Size()
}

// EachQueue calls f with the gauges of every live queue of the tenant, in
// no particular order, until f returns false. No lock is held while f
// runs, so f may block for as long as it likes (a streamed listing waits
// there for its client to read): the walk's position is the caller's
// goroutine's, a resume cursor that costs no copy of the tenant's queues.
// A queue created or deleted during the walk may or may not be seen; none
// is seen twice.
func (e *Engine) EachQueue(tenant string, f func(QueueInfo) bool) {
	t, ok := e.tenants.Load(tenant)
	if !ok {
		return
	}
	t.queues.Range(func(_ string, q *Queue) bool {
		if q = q.live(); q == nil {
			return true
		}
		return f(q.info())
	})
}
